"""External commands with a deadline, and Python probes that answer one JSON line.

Every command the doctor runs goes through `run`: a hung driver or tool costs one timeout and
becomes a finding (`Run.problem`), never a hang or a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any, Sequence

TIMEOUT = 10.0  # seconds any one external command may take
MAX_OUTPUT = 4 << 20  # bytes of each stream kept; a command printing more is stopped


@dataclass(frozen=True)
class Run:
    """What one external command did; `problem` says why it did not run to completion."""

    argv: tuple[str, ...]
    returncode: int | None = None
    out: str = ""
    err: str = ""
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and self.returncode == 0

    def why(self) -> str:
        if self.problem:
            return self.problem
        last = (self.err.strip() or self.out.strip()).splitlines()
        return f"exited with status {self.returncode}" + (f": {last[-1]}" if last else "")


def run(argv: Sequence[str], timeout: float = TIMEOUT) -> Run:
    """Run a command with a deadline; its whole process group is killed when it runs over."""
    env = dict(os.environ, LC_ALL="C")
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        return Run(tuple(argv), problem="not found")
    except OSError as exc:
        return Run(tuple(argv), problem=f"cannot run: {exc.strerror or exc}")
    over = threading.Event()
    bufs = (bytearray(), bytearray())
    readers = [
        threading.Thread(target=_drain, args=(stream, buf, over, proc.pid), daemon=True)
        for stream, buf in zip((proc.stdout, proc.stderr), bufs)
    ]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        # A process stuck inside the kernel (a hung driver) cannot be reaped: leave it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        return Run(tuple(argv), problem=f"did not answer within {timeout:g} s")
    for t in readers:
        t.join(timeout=2)
    if over.is_set():
        return Run(tuple(argv), problem=f"printed more than {MAX_OUTPUT >> 20} MiB: stopped")
    return Run(
        tuple(argv),
        proc.returncode,
        bytes(bufs[0]).decode("utf-8", "replace"),
        bytes(bufs[1]).decode("utf-8", "replace"),
    )


def _drain(stream: Any, buf: bytearray, over: threading.Event, pid: int) -> None:
    """Read `stream` into `buf`, at most MAX_OUTPUT bytes; past that, stop the command."""
    with stream:
        for chunk in iter(lambda: stream.read1(1 << 16), b""):
            if len(buf) + len(chunk) > MAX_OUTPUT:
                over.set()
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                return
            buf += chunk


def probe(code: str, *args: str, python: str | None = None) -> tuple[dict[str, Any] | None, Run]:
    """Run `code` in a child interpreter (isolated, no bytecode written) and read the JSON
    object on its last line. None with the Run when it did not answer one."""
    r = run([python or sys.executable, "-I", "-B", "-c", code, *args])
    if not r.ok:
        return None, r
    lines = r.out.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return None, Run(r.argv, r.returncode, r.out, r.err, "answered something that is not JSON")
    return data, r


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
