"""The environment fingerprint: one sha256 over the sorted "name==version" of every distribution
an interpreter sees. Nodes of one Ray cluster must show the same one; the installer writes it
into <prefix>/.verl-bundle/fingerprint at its end, the doctor reads it back (`--prefix`), and
the fleet report compares it across nodes. Standard library only, Python 3.8+."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

from verl_bundle.airgap.contract.manifest import canonical
from verl_bundle.airgap.errors import StepError

FINGERPRINT = Path(".verl-bundle") / "fingerprint"
TIMEOUT = 60.0

# Run by the environment's own interpreter: its distributions, as importlib.metadata sees them.
LIST_DISTRIBUTIONS = """
import json
from importlib import metadata
print(json.dumps(sorted({
    "%s==%s" % (d.metadata["Name"] or "", d.version) for d in metadata.distributions()
})))
"""


class FingerprintError(StepError, RuntimeError):
    """The interpreter could not list its distributions (one line: which, and why)."""


def _canonical(line: str) -> str:
    """ "Flash_Attn==2.5.8" -> "flash-attn==2.5.8" (PEP 503 names, so spelling cannot drift)."""
    name, _, version = line.partition("==")
    return f"{canonical(name)}=={version}"


def of_lines(lines: list[str]) -> str:
    """The fingerprint of these "name==version" lines (order and name spelling do not count)."""
    canonical = sorted({_canonical(line) for line in lines if line.partition("==")[0]})
    return hashlib.sha256("\n".join(canonical).encode("utf-8")).hexdigest()


def distributions(python: str) -> list[str]:
    """The "name==version" of every distribution `python` sees."""
    try:
        proc = subprocess.run(
            [python, "-I", "-B", "-c", LIST_DISTRIBUTIONS],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FingerprintError(f"{python}: cannot list its distributions: {exc}") from None
    try:
        listed = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (ValueError, IndexError):
        listed = None
    if not isinstance(listed, list):
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise FingerprintError(f"{python}: cannot list its distributions: {why}")
    return [str(x) for x in listed]


def fingerprint(python: str) -> str:
    """sha256 (hex) of the sorted "name==version" of the distributions `python` sees."""
    return of_lines(distributions(python))


def write(prefix: str, python: str) -> str:
    """Write `python`'s fingerprint to <prefix>/.verl-bundle/fingerprint; return it."""
    value = fingerprint(python)
    path = Path(prefix) / FINGERPRINT
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(value + "\n", encoding="ascii")
    tmp.replace(path)
    return value


def read(prefix: str | None) -> str | None:
    """The fingerprint the installer wrote under `prefix`, or None (none there, or no prefix)."""
    if not prefix:
        return None
    try:
        text = (Path(prefix) / FINGERPRINT).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None


def record(prefix: str, python: str) -> str | None:
    """`write`, for the installer's last step: None (nothing written) when `python` cannot
    list its distributions or the prefix is not writable; the fleet report then shows none."""
    try:
        return write(prefix, python)
    except (FingerprintError, OSError):
        return None
