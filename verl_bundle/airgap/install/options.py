"""install.sh's options: parsed into one `Options` value, with the usage text and exit codes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_bundle.airgap.contract.manifest import Manifest

EXIT_OK = 0
EXIT_FAILED = 1  # a phase or a post-install check failed (run again to continue)
EXIT_USAGE = 2
EXIT_DAMAGED = 3  # a file does not match SHA256SUMS / the manifest
EXIT_NOT_READY = 4  # wrong Python, or the doctor found a failure
EXIT_INTERRUPTED = 130


class InstallError(Exception):
    """Ends the install with an exit code and a message (one line, or a few for a failure)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Options:
    bundle: str  # the bundle directory (where install.sh is)
    prefix: str | None = None
    python: str | None = None  # a path, or "bundled"
    bundled_python: str | None = None  # where install.sh unpacked the bundled CPython
    into_env: str | None = None
    dry_run: bool = False
    skip_doctor: bool = False
    require_gpu: bool = False
    skip_phases: tuple[str, ...] = ()
    yes: bool = False
    log: str | None = None
    events: str | None = None
    json: bool = False
    help: bool = False

    @property
    def target(self) -> str:
        """The environment installed into (absolute): --into-env, --prefix or the default."""
        chosen = self.into_env or self.prefix
        if chosen is None:
            raise InstallError(
                EXIT_USAGE, "HOME is not set, so there is no default prefix; pass --prefix DIR"
            )
        return os.path.abspath(chosen)


def default_prefix(m: Manifest) -> str | None:
    home = os.environ.get("HOME")
    if not home:
        return None
    return os.path.join(home, f"verl-{m.profile.name}-{m.target.python_tag}")


_VALUED = {
    "--prefix": "a directory",
    "--python": "a path",
    "--bundled-python": "a directory",  # given by install.sh, not by people
    "--into-env": "a path",
    "--skip-phase": "a phase name",
    "--log": "a file",
    "--events": "a file",
}
_FLAGS = {
    "--dry-run": "dry_run",
    "--skip-doctor": "skip_doctor",
    "--require-gpu": "require_gpu",
    "--yes": "yes",
    "-y": "yes",
    "--json": "json",
    "--help": "help",
    "-h": "help",
}


def parse(argv: list[str], m: Manifest | None) -> Options:
    """argv (after the bundle directory) -> Options; InstallError(2) naming the bad option."""
    if not argv:
        raise InstallError(EXIT_USAGE, "install.sh: the bundle directory is missing")
    values: dict[str, object] = {"bundle": os.path.abspath(argv[0])}
    skips: list[str] = []
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        if arg in _FLAGS:
            values[_FLAGS[arg]] = True
            continue
        name, eq, value = arg.partition("=")
        if name not in _VALUED:
            raise InstallError(EXIT_USAGE, f"unknown option '{arg}' (see ./install.sh --help)")
        if not eq:
            if not args:
                raise InstallError(EXIT_USAGE, f"{name} needs {_VALUED[name]}")
            value = args.pop(0)
        if name == "--skip-phase":
            if m is not None and value not in m.phase_names:
                raise InstallError(
                    EXIT_USAGE,
                    f"--skip-phase {value}: no such phase (phases: {' '.join(m.phase_names)})",
                )
            skips.append(value)
        else:
            values[name[2:].replace("-", "_")] = value
    values["skip_phases"] = tuple(skips)
    if m is not None and "prefix" not in values and "into_env" not in values:
        values["prefix"] = default_prefix(m)
    opts = Options(**values)  # type: ignore[arg-type]
    if opts.into_env and opts.prefix:
        raise InstallError(
            EXIT_USAGE,
            "give --prefix (a new venv) or --into-env (an existing environment), not both",
        )
    return opts


def usage(m: Manifest | None) -> str:
    name = m.name if m else "this bundle"
    py = m.target.python if m else "X.Y"
    cuda = m.target.cuda if m else "?"
    profile = m.profile.name if m else "?"
    phases = " ".join(m.phase_names) if m else "(see manifest.json)"
    prefix = (default_prefix(m) if m else None) or "$HOME/verl-<profile>-<cpXY>"
    carried = f" ({m.interpreter.version})" if m and m.interpreter else " (if it carries one)"
    return f"""Usage: ./install.sh [options]

Installs {name} (profile {profile}, Python {py}, CUDA {cuda}) with no network.

Steps: (1) check every file against SHA256SUMS and the manifest; (2) check the Python
version; (3) run the doctor (stops on failures, prints the fixes); (4) create the venv and
bring pip (and uv, where it runs) from bootstrap/; (5) install the phases in order: {phases};
(6) post-install checks (versions, imports, torch version and CUDA, C++ ABI, GPU when
present); (7) say how to activate. A second run after a failure, Ctrl-C or kill continues
where it stopped; a newer bundle run on the same prefix installs what changed.

Options:
  --prefix DIR      create the venv in DIR (default: {prefix}); an existing
                    directory must be empty or a venv this installer made
  --python PATH     the Python {py} to create the venv from (default: python{py}, then python3);
                    `bundled`: the CPython this bundle carries{carried}, unpacked into
                    PREFIX/python (the default when this server has no Python {py})
  --into-env PATH   install into an existing environment instead (a venv or conda env whose
                    bin/python is Python {py}); its own pip is not changed. What would be
                    up- or downgraded is shown and asked about first (unless --yes)
  --dry-run         print the plan: exactly the commands a run would execute; change nothing
  --skip-doctor     do not run the pre-install checks
  --require-gpu     make the doctor's driver and GPU checks failures, not warnings
  --skip-phase NAME leave a phase out (repeatable); its packages are not installed or checked.
                    For rehearsals on a host that cannot do a source build.
  --yes             do not ask before installing
  --log FILE        also write everything to FILE (default: <prefix>/.verl-bundle/install.log)
  --events FILE     append each step's events to FILE as JSON lines (for scripts)
  --json            print the result as JSON on stdout (progress goes to stderr)
  --from URL        install from a served bundle (an extracted bundle behind python3 -m
                    http.server or nginx: http://head:8000/<bundle>/): every file is fetched
                    into a local copy, checked against its sha256 as it arrives, then that
                    copy is installed as above. Credentials go in the URL (user:password@)
  --work DIR        where --from keeps its copy (kept; a rerun fetches only what is missing);
                    default: a directory in $TMPDIR, removed after a successful install
  --help            this text

Exit codes:
  0  installed and checked
  1  a phase or a post-install check failed (run again to continue from that phase)
  2  usage error (a bad option, or a --prefix that is not a new directory or a venv it made)
  3  the bundle is damaged (a file does not match SHA256SUMS, or lib/ holds unlisted files)
  4  this server is not ready (wrong Python, or the doctor found a failure)
  130 interrupted (run again to continue)

Uninstall: remove the prefix directory. Upgrade: run a newer bundle's install.sh with the
same --prefix; it installs what changed and removes what left the bundle.
"""
