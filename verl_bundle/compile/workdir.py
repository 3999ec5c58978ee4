"""A host compile's work directory, and resuming one that was stopped.

flash-attn compiles 73 objects for one GPU architecture, hours on a small host. A compile killed
at object 60 (Ctrl-C, a lost SSH session, SIGKILL, the machine's end of day) must not start over
from zero: its directory `<cache>/compiled/.tmp-<key>-<pid>` (build venv, unpacked sdist, the
objects ninja finished) is kept, and the next build of the same cache key takes it over where it
stands. The package's own build then skips what is done: torch's ninja build compares each
object's command line, which holds the directory's absolute paths, so the directory keeps its
name when it is taken over.

Who owns a directory is an exclusive `flock` on its `.owner` file, held for the compile's whole
life: the kernel drops it when the process dies, however it dies, so a lock that can be taken
means the compile is gone. (A directory from before the lock file: the pid in its name.) Nothing
here is under a final name: the wheel is renamed into the cache only when complete.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.leftovers import alive

OWNER = ".owner"
PREPARED = ".prepared"  # written once the build venv and the unpacked sdist are complete
ELAPSED = ".elapsed"  # the compile's seconds so far, rewritten as it runs


@dataclass(frozen=True)
class WorkDir:
    """A compile's directory, held (`fd` is the lock) by this process; `resumed` when it was a
    stopped compile's, prepared before."""

    path: Path
    fd: int
    resumed: bool

    @property
    def prepared(self) -> bool:
        return (self.path / PREPARED).is_file()

    @property
    def earlier(self) -> float:
        """Seconds the stopped compile had run (0 for a new one)."""
        try:
            return float((self.path / ELAPSED).read_text()) if self.resumed else 0.0
        except (OSError, ValueError):
            return 0.0

    def mark_prepared(self) -> None:
        (self.path / PREPARED).write_text("build venv and sources complete\n")

    def release(self) -> None:
        os.close(self.fd)


def _take(directory: Path) -> int | None:
    """The lock of a stopped compile's directory, or None while its compile still runs."""
    owner = directory / OWNER
    if not owner.exists():
        pid = directory.name.rsplit("-", 1)[-1]
        if pid.isdigit() and alive(int(pid)):
            return None
    try:
        fd = os.open(owner, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim(root: Path, key: str) -> WorkDir:
    """A stopped compile of `key` to resume, else a new directory; either is held by this
    process until `release`. Stopped compiles of other keys are removed (they would be resumed
    only by a build of exactly their inputs, and hold a whole build venv)."""
    root.mkdir(parents=True, exist_ok=True)
    resumable: WorkDir | None = None
    for directory in sorted(root.glob(".tmp-*")):
        fd = _take(directory)
        if fd is None:
            continue  # its compile still runs
        mine = directory.name.startswith(f".tmp-{key}-")
        if mine and resumable is None and (directory / PREPARED).is_file():
            resumable = WorkDir(directory, fd, resumed=True)
            continue
        shutil.rmtree(directory, ignore_errors=True)
        os.close(fd)
    if resumable is not None:
        return resumable
    fresh = root / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    fd = os.open(fresh / OWNER, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return WorkDir(fresh, fd, resumed=False)
