"""Stopping a host compile as a whole: `uv build -> python (setup.py) -> ninja -> nvcc -> cicc,
ptxas, cc1plus`, and making SIGTERM unwind the build the way Ctrl-C does.

The compile runs in a session of its own (so a terminal's Ctrl-C reaches only the build, which
then stops the compile and keeps its work directory). Killing that session's process group is not
enough: ninja starts every command in a process group of its own, and a command may start a
session of its own and outlive its parent, so a group kill leaves nvcc and its compilers running,
orphaned, for hours. `tree` therefore walks /proc for every process of the compile: the
descendants of its first process, every process of its session, and every process whose
environment carries the compile's mark (MARK=token, inherited by everything it starts, whatever
group, session or parent it ends up with). `stop_tree` first asks them to stop (SIGTERM, which
ninja forwards to its commands and answers by removing half-written outputs), waits a moment,
then freezes whatever is left (SIGSTOP, so nothing forks while it is being killed) and kills it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from verl_bundle.errors import Terminated

PROC = Path("/proc")
GRACE = 10.0  # seconds the compile gets to stop on SIGTERM before it is killed
MARK = "VERL_BUNDLE_COMPILE"  # the environment variable every process of a compile inherits


@dataclass(frozen=True)
class Proc:
    pid: int
    state: str  # "R", "S", "Z" (a zombie: dead, waiting for its parent), ...
    ppid: int
    session: int
    start: int  # clock ticks after boot: a pid reused later has another


def read_proc(pid: int) -> Proc | None:
    """/proc/PID/stat, or None when the process is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or parentheses itself.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return Proc(pid, fields[0].decode(), int(fields[1]), int(fields[3]), int(fields[19]))


def processes() -> list[Proc]:
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (p := read_proc(int(entry.name))) is not None:
            found.append(p)
    return found


def new_mark() -> str:
    """A token for one compile's MARK variable, unique on this machine."""
    return f"{os.getpid()}-{time.monotonic_ns()}"


def _marked(pid: int, mark: bytes) -> bool:
    try:
        return mark in (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def tree(root: int, mark: str | None = None) -> dict[int, Proc]:
    """The live processes of `root`'s compile: `root`, its descendants, every process of the
    session `root` leads (whose parent may be gone already) and, given the compile's `mark`,
    every process whose environment carries it. Zombies are dead: left out."""
    table = processes()
    children: dict[int, list[Proc]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p)
    found = {p.pid: p for p in table if p.session == root}
    if mark is not None:
        marked = f"{MARK}={mark}".encode()
        me = os.getpid()
        found |= {p.pid: p for p in table if p.pid != me and _marked(p.pid, marked)}
    todo = list(found.values())
    start = read_proc(root)
    todo += [start] if start is not None else []
    while todo:
        p = todo.pop()
        found[p.pid] = p
        todo += [c for c in children.get(p.pid, ()) if c.pid not in found]
    return {pid: p for pid, p in found.items() if p.state != "Z"}


def _signal(pids: dict[int, Proc], sig: int) -> None:
    for pid, p in pids.items():
        now = read_proc(pid)
        if now is not None and now.start == p.start:  # still the same process
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def stop_tree(
    root: int, reap: Callable[[], object], mark: str | None = None, grace: float = GRACE
) -> None:
    """Stop `root` (a child of this process, started in a session of its own with `mark` in its
    environment) and everything it started. `reap` collects `root`'s exit status without
    blocking (Popen.poll)."""
    left = tree(root, mark)
    _signal(left, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        reap()
        left = tree(root, mark)
    for _ in range(100):  # freeze what is left until no new process appears, then kill it all
        if not left:
            break
        _signal(left, signal.SIGSTOP)
        frozen = tree(root, mark)
        if set(frozen) <= set(left):
            _signal(frozen, signal.SIGKILL)
            time.sleep(0.05)
        reap()
        left = tree(root, mark)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While inside: SIGTERM raises Terminated in the main thread (elsewhere, nothing changes:
    Python lets only the main thread set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """While inside: SIGINT and SIGTERM are ignored (a second Ctrl-C must not cut the stopping
    of a compile short and leave half of it running); main thread only, as above."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
