"""Partial copies of a placed asset that never collide and never outlive their writer: each is
`.<commit>.partial-<host>-<random>` beside the final directory, held by an flock on its
`.lock` for as long as its writer runs (the kernel releases it when the writer is killed), so a
later run on any node sharing the directory removes exactly what a dead writer left.
Standard library only, Python 3.8+."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import socket

PARTIAL = ".partial-"


def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"


def sweep_partials(parent: str, commit: str) -> None:
    """Remove what a killed placement of `commit` left in `parent`: partial directories whose
    lock no process holds (on this node or another sharing the directory), and an older
    installer's `.partial-<pid>` and `.old-<pid>` directories."""
    start = f".{commit}{PARTIAL}"
    for name in os.listdir(parent):
        full = os.path.join(parent, name)
        if re.fullmatch(re.escape(f".{commit}.") + r"(partial|old)-\d+", name):
            shutil.rmtree(full, ignore_errors=True)
            continue
        if not name.startswith(start) or name.endswith(".lock"):
            continue
        lock = (full[: -len("-old")] if name.endswith("-old") else full) + ".lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            shutil.rmtree(full, ignore_errors=True)  # its lock went first: a finished swap
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live placement is writing it
        shutil.rmtree(full, ignore_errors=True)
        if not name.endswith("-old"):
            with contextlib.suppress(OSError):
                os.unlink(lock)
        os.close(fd)


def claim_partial(parent: str, commit: str) -> tuple[int, str]:
    """A new partial directory `.<commit>.partial-<host>-<random>` and the held flock on its
    `.lock` (released by the kernel if this process is killed)."""
    while True:
        tmp = os.path.join(parent, f".{commit}{PARTIAL}{host_name()}-{secrets.token_hex(8)}")
        try:
            fd = os.open(tmp + ".lock", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.mkdir(tmp)
        return fd, tmp
