"""Values from outside (a tarball's top directory, paths, URLs, host patterns) checked where they
enter the cluster writers, and the one renderer that lets them leave: quoted for sh, refused on
an `#SBATCH` line unless plain, and marked `!unsafe` for Ansible so that a value is never a
template. A hostile name (a newline, `$(touch X)`, `{{ lookup('pipe', ...) }}`) is either refused
in one line or travels as inert data."""

from __future__ import annotations

import json
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from verl_bundle.airgap.contract.skip_phases import SkipPhases, skip_phases
from verl_bundle.credentials import redact_url
from verl_bundle.errors import UsageError

# A bundle's name is a plain file name: what `verl-bundle build` writes (verl-bundle-cu118-...).
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
# What an `#SBATCH` option value may hold: sbatch's own parser, not a shell, reads these lines.
SBATCH_VALUE = re.compile(r"[A-Za-z0-9._/%+=:,@-]{1,1000}")
# An Ansible host pattern: names, groups, wildcards, unions, intersections, exclusions, ranges.
HOST_PATTERN = re.compile(r"[A-Za-z0-9_.:*!&,\[\]-]{1,1000}")
# Ansible's `serial`: a count or a percentage.
SERIAL = re.compile(r"[1-9][0-9]{0,5}%?")
MAX_PATH = 4096


def _control(value: str) -> str | None:
    """The first control character (or an unpaired surrogate) in `value`, shown; None if none."""
    for ch in value:
        if ord(ch) < 32 or 127 <= ord(ch) < 160 or 0xD800 <= ord(ch) < 0xE000:
            return repr(ch)
    return None


def plain_name(value: str, what: str) -> str:
    """`value` as a bundle name (a plain file name), or a one-line UsageError saying why not."""
    if not PLAIN_NAME.fullmatch(value):
        raise UsageError(
            f"{what} {value[:80]!r} is not a plain bundle name (letters, digits, '.', '_', '+', "
            "'-'; no '/', spaces or control characters): use the tarball `verl-bundle build` "
            "wrote, under its own name"
        )
    return value


def path_value(value: Path | str, what: str) -> str:
    """A path for a script: any characters a file name may hold except control characters
    (quoting cannot make a newline in a path safe for every tool that reads it)."""
    text = str(value)
    bad = _control(text)
    if not text or bad or len(text) > MAX_PATH:
        why = f"holds the control character {bad}" if bad else "is empty or too long"
        raise UsageError(f"{what} {text[:80]!r} {why}: give a plain path")
    return text


def url_value(url: str, what: str) -> str:
    """An http(s) URL with a host and no control characters or spaces."""
    bad = _control(url)
    if bad or any(ch.isspace() for ch in url) or len(url) > MAX_PATH:
        raise UsageError(f"{what} {redact_url(url)[:80]!r} holds spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{what} {redact_url(url)}: give the http:// or https:// URL of the extracted "
            "bundle as served (python3 -m http.server or nginx in the directory above it)"
        )
    return url


def pin_value(value: str, what: str = "--bundle-sha256") -> str:
    """The sha256 of a bundle's SHA256SUMS (64 hex digits), lower-case; a one-line UsageError
    for anything else."""
    if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise UsageError(
            f"{what} {value[:80]!r}: give the 64 hex digits of the bundle's SHA256SUMS sha256 "
            "(sha256sum SHA256SUMS in your extracted copy)"
        )
    return value.lower()


def has_credentials(url: str) -> bool:
    return bool(url) and "@" in urlsplit(url).netloc


def host_pattern(value: str) -> str:
    if not HOST_PATTERN.fullmatch(value):
        raise UsageError(
            f"--hosts {value[:80]!r}: not an inventory pattern (names, groups, '*', ':', '!', "
            "'&', ',' and [ranges]; no spaces, braces or quotes)"
        )
    return value


def serial_value(value: str) -> str:
    if value and not SERIAL.fullmatch(value):
        raise UsageError(f"--serial {value[:40]!r}: give a host count (64) or a percentage (25%)")
    return value


def tarball_name(tarball: Path) -> str:
    """The bundle's name: the top directory of the tarball's first member, checked."""
    try:
        with tarfile.open(tarball) as tf:
            first = tf.next()
    except (OSError, tarfile.TarError) as exc:
        raise UsageError(f"{tarball}: not a readable bundle tarball ({exc})") from None
    if first is None:
        raise UsageError(f"{tarball}: an empty tarball, not a bundle")
    return plain_name(first.name.split("/", 1)[0], f"{tarball}: its top directory")


def served_name(url: str) -> str:
    """The bundle's name as a served URL ends (http://head:8000/NAME/), checked; '' for a
    bundle served at the server's root."""
    last = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    return plain_name(last, f"--from-url {redact_url(url)}:") if last else ""


@dataclass(frozen=True)
class InstallOptions:
    """The install.sh options a cluster install passes to every node's install.sh: one list for
    both engines (slurm install, ansible install), checked once where it enters."""

    quick: bool = False  # --quick: leave out the trainer dry run (minutes per node)
    repair: bool = False  # --repair: reinstall exactly what differs from the bundle
    require_gpu: bool = False  # --require-gpu: a node without a usable GPU fails
    skip_phases: SkipPhases = ()  # --skip-phase NAME (repeatable)

    def argv(self) -> list[str]:
        """install.sh's arguments for these options, each a plain word (checked)."""
        out = ["--quick"] * self.quick + ["--repair"] * self.repair
        out += ["--require-gpu"] * self.require_gpu
        for phase in skip_phases(self.skip_phases, None):  # the bundle may come later
            out += ["--skip-phase", phase]
        return out


NO_OPTIONS = InstallOptions()


# -- leaving: the renderer and its filters ---------------------------------------------------
def _sh(value: object) -> str:
    text = str(value)
    if _control(text):  # every value was checked where it entered: this is a bug, not input
        raise ValueError(f"a control character reached a shell script: {text[:80]!r}")
    return shlex.quote(text)


def sh_quote(value: object) -> str:
    """`value` quoted for sh (a command line printed for the user to run)."""
    return _sh(value)


def _sbatch(value: object) -> str:
    text = str(value)
    if not SBATCH_VALUE.fullmatch(text):
        raise UsageError(
            f"{text[:80]!r} cannot go on an #SBATCH line (sbatch reads it without a shell): "
            "use a path of letters, digits and / . _ - + % , : @ ="
        )
    return text


def _unsafe(value: object) -> str:
    """A YAML scalar Ansible never templates: `!unsafe` and a JSON string (JSON is YAML)."""
    return "!unsafe " + json.dumps(str(value))


def render(template: str, context: dict[str, Any]) -> str:
    """templates/TEMPLATE with `context`; undefined names are errors; values leave only through
    the `sh`, `sbatch` and `unsafe` filters (the templates use nothing else for outside values)."""
    import jinja2

    from verl_bundle.resources import data_dir

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - shell and YAML, not HTML: the filters quote
    )
    env.filters.update(sh=_sh, sbatch=_sbatch, unsafe=_unsafe)
    return env.get_template(template).render(**context)
