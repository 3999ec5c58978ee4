"""A bundle's own server program (its lib/), run here by an installed environment's python.

`verl-bundle readiness` and rehearse's dry run check an environment with the program the bundle
carries, started as install.sh starts it: isolated (`python -I -B -c BOOT LIB ...`: no
PYTHONPATH, no user site, no current directory, no bytecode written), so nothing of the host
tool's own site-packages is on the checked environment's path and the bundle's tables judge it.
`--python` is first asked to prove it is a Python 3.8+ (a bounded probe: anything else is one
line, exit 2); the program's JSON envelope is read back (bounded), never its text.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_bundle.airgap.checks import Verdict
from verl_bundle.airgap.install.steps import BOOT, ISOLATED
from verl_bundle.errors import BundleError, UsageError

PROBE = "import sys; print('vb-probe', sys.version_info >= (3, 8))"
PROBE_BYTES = 4096
PROBE_SECONDS = 30.0
ENVELOPE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ServerResult:
    """What the server program answered: its envelope (result and verdict) and exit code."""

    envelope: dict[str, Any]
    verdict: Verdict
    code: int

    @property
    def result(self) -> Any:
        return self.envelope.get("result")


def _shown(data: bytes) -> str:
    """A line of what a program printed, for an error message: short, printable."""
    text = data.decode("utf-8", "replace").strip().splitlines()
    first = text[0] if text else ""
    first = "".join(ch if ch.isprintable() else "?" for ch in first)
    return first[:80] + ("..." if len(first) > 80 else "")


def _bounded(
    cmd: Sequence[str], limit: int, timeout: float | None
) -> tuple[int | None, bytes, bool]:
    """Run `cmd`, keep at most `limit` bytes of its stdout (stderr goes to ours): (exit code,
    output, whether it printed more and was stopped). A timeout kills it (code None)."""
    with subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None  # noqa: S101 - stdout=PIPE sets it
        try:
            data = _read(proc, limit, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None, b"", False
        more = len(data) > limit
        if more:
            proc.kill()
        code = proc.wait()
    return code, data[:limit], more


def _read(proc: subprocess.Popen[bytes], limit: int, timeout: float | None) -> bytes:
    """Up to `limit` + 1 bytes of its stdout, until it closes it or `timeout` passes."""
    assert proc.stdout is not None  # noqa: S101 - stdout=PIPE sets it
    fd = proc.stdout.fileno()
    chunks: list[bytes] = []
    got = 0
    end = None if timeout is None else time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while got <= limit:
            wait = None if end is None else end - time.monotonic()
            if wait is not None and wait <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout or 0)
            if not sel.select(wait):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    return b"".join(chunks)


def check_python(python: str) -> str:
    """`python` if it runs as a Python 3.8+ (the server program's floor); otherwise a usage
    error in one line, whatever the file does (exits 0 silently, prints megabytes, is not a
    program at all)."""
    cmd = [python, "-I", "-c", PROBE]
    try:
        code, out, more = _bounded(cmd, PROBE_BYTES, PROBE_SECONDS)
    except OSError as exc:
        raise UsageError(
            f"--python {python}: cannot run it ({exc.strerror or exc}); give the installed "
            "environment's python, e.g. /opt/verl/bin/python"
        ) from None
    if code == 0 and not more and out.strip() == b"vb-probe True":
        return python
    said = f"'{_shown(out)}'" if out.strip() else "nothing"
    if code is None:
        ran = f"it did not finish in {PROBE_SECONDS:.0f} s"
    elif more:
        ran = f"it printed more than {PROBE_BYTES} bytes, starting '{_shown(out)}'"
    else:
        ran = f"exit {code}, it printed {said}"
    raise UsageError(
        f"--python {python}: not a Python 3.8+ interpreter ({ran}); give the installed "
        "environment's python, e.g. /opt/verl/bin/python"
    )


def command(python: str, root: Path, argv: Sequence[str]) -> list[str]:
    """The server program of the bundle at `root`, isolated, by `python`."""
    return [python, *ISOLATED, "-c", BOOT, str(root / "lib"), *argv]


def run_server(python: str, root: Path, argv: Sequence[str], what: str) -> ServerResult:
    """Run `what` (a command of the server program, its argv ending in --json) with the
    bundle's lib/ and read its envelope back; no envelope is a failure naming the exit code."""
    if not (root / "lib" / "verl_bundle" / "airgap").is_dir():
        raise UsageError(
            f"--bundle {root}: no lib/verl_bundle/airgap there (the server program every "
            "bundle carries): give the extracted bundle's directory"
        )
    try:
        code, out, more = _bounded(command(python, root, argv), ENVELOPE_BYTES, None)
    except OSError as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc.strerror or exc})") from None
    try:
        if more:
            raise ValueError("more than 16 MiB")
        doc = json.loads(out)
        if not isinstance(doc, dict) or doc.get("command") != what:
            raise ValueError(f"not the envelope of {what}")
        verdict = Verdict.from_dict(doc.get("verdict") or {})
    except ValueError as exc:
        raise BundleError(
            f"{what} by {python} gave no result (exit {code}: {exc}); its messages are above"
        ) from None
    return ServerResult(doc, verdict, -1 if code is None else code)
