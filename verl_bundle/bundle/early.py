"""The tarball written while the downloads run.

The files the lock names as they are (every wheel that is never built here) lead the tarball,
in an order known from the lock alone (`plan.locked_entries`), so the place of each of their
bytes is known before anything is fetched. `EarlyTar` makes the hidden partial tarball at the
start of the fetch, writes their headers and padding, and copies each file to its place as its
download ends (in the kernel where it can: copy_file_range), while the other downloads go on.
A second thread hashes the tarball's written front as it fills, for the .sha256.

When the plan is made, `take` checks that the planned tarball starts with exactly these pieces
(`layout`'s, byte for byte): then only the rest is written after them. Otherwise (a file the
plan left out, a lock without sizes) the partial is dropped and the tarball is written whole, as
before. Either way the bytes are the ones `layout` gives, so a cold build and a warm rebuild of
one lock write the same tarball.

What holds for a tarball written whole holds here: a file fetched and hashed in this run is
trusted for its digest and checked for its size; a file found in the cache is hashed as it is
copied; a damaged one fails the write (`Copied`), and the partial never gets the final name.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_bundle.bundle.entries import Entry
from verl_bundle.bundle.tarstream import Copied, Piece, layout

CHUNK = 4 << 20  # one read or copy: large, so hashlib and the kernel get big buffers
_STOP = None  # the copier's queue: no more files


@dataclass
class _Slot:
    """One region of the tarball's front: made bytes (written at once) or a file's place."""

    offset: int
    size: int
    entry: Entry | None = None  # None: made bytes
    done: bool = False
    copied: Copied | None = None


@dataclass(frozen=True)
class Taken:
    """The front handed to the tarball writer: written, hashed (`hash` holds its `size` bytes),
    its files as they were copied; `rest` is what the writer adds after it."""

    path: Path
    size: int
    hash: Any  # a hashlib sha256
    copied: list[Copied]
    rest: list[Piece]
    files: int  # files of the front handed over as their downloads ended (the rest at `take`)


@dataclass
class _State:
    cursor: int = 0  # the slot the hasher is at
    error: BaseException | None = None
    stopped: bool = False
    handed: set[str] = field(default_factory=set)  # sha256s `fetched` was told of
    taken: bool = False
    lock: threading.Condition = field(default_factory=threading.Condition)


class EarlyTar:
    """The partial tarball `final`'s hidden name while the fetch runs (see the module text).
    `fetched` is safe from any thread; `take` and `close` are the caller's."""

    def __init__(self, top: str, final: Path, entries: Sequence[Entry]) -> None:
        self.path = final.with_name(f".{final.name}.partial-{os.getpid()}")
        self.pieces: list[Piece] = layout(top, entries)[:-1]  # without the end blocks
        self.slots: list[_Slot] = []
        self._by_sha: dict[str, list[_Slot]] = {}
        offset = 0
        for p in self.pieces:
            size = len(p) if isinstance(p, bytes) else p.size
            slot = _Slot(offset, size, None if isinstance(p, bytes) else p)
            self.slots.append(slot)
            if slot.entry is not None:
                self._by_sha.setdefault(slot.entry.sha256, []).append(slot)
            offset += size
        self.size = offset
        self._state = _State()
        self._queue: queue.SimpleQueue[tuple[str, str, bool] | None] = queue.SimpleQueue()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(self._fd, self.size)  # sparse: the files fill it
            for slot, p in zip(self.slots, self.pieces, strict=True):
                if isinstance(p, bytes):
                    os.pwrite(self._fd, p, slot.offset)
                    slot.done = True
            self._read = os.open(self.path, os.O_RDONLY)
        except BaseException:
            os.close(self._fd)
            self.path.unlink(missing_ok=True)
            raise
        self._hash = hashlib.sha256()
        self._copier = threading.Thread(target=self._copy_all, daemon=True)
        self._hasher = threading.Thread(target=self._hash_front, daemon=True)
        self._copier.start()
        self._hasher.start()

    # -- while the downloads run -----------------------------------------------------------

    def fetched(self, sha256: str, path: str, fresh: bool) -> None:
        """A file of the lock is in the cache (`fresh`: downloaded and hashed in this run)."""
        if sha256 in self._by_sha:
            with self._state.lock:
                self._state.handed.add(sha256)
            self._queue.put((sha256, path, fresh))

    def _copy_all(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            sha256, path, fresh = item
            for slot in self._by_sha.get(sha256, []):
                with self._state.lock:
                    if slot.done or self._state.stopped:
                        continue
                try:
                    copied = self._copy(slot, path, fresh)
                except OSError as exc:
                    with self._state.lock:
                        self._state.error = OSError(exc.errno, exc.strerror, str(self.path))
                        self._state.stopped = True
                        self._state.lock.notify_all()
                    return
                with self._state.lock:
                    slot.copied, slot.done = copied, True
                    self._state.lock.notify_all()

    def _copy(self, slot: _Slot, path: str, fresh: bool) -> Copied:
        """The file into its place: exactly its locked size (zeros if it is short). A fresh one
        in the kernel (its digest was taken as it downloaded), else read and hashed."""
        e = slot.entry
        assert e is not None  # noqa: S101 - only file slots are queued
        try:
            src = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return Copied(e, -1, None if fresh else "")
        try:
            done = self._kernel_copy(src, slot) if fresh else 0
            h = None if fresh else hashlib.sha256()
            while done < e.size and not self._state.stopped:
                chunk = os.pread(src, min(CHUNK, e.size - done), done)
                if not chunk:
                    break
                os.pwrite(self._fd, chunk, slot.offset + done)
                if h is not None:
                    h.update(chunk)
                done += len(chunk)
            had = done + len(os.pread(src, 1, done))
        finally:
            os.close(src)
        if done < e.size:  # short: zeros keep the tar well formed; the write fails on it
            os.pwrite(self._fd, b"\0" * (e.size - done), slot.offset + done)
        return Copied(e, had, None if h is None else h.hexdigest())

    def _kernel_copy(self, src: int, slot: _Slot) -> int:
        """As much of the file as copy_file_range moves (0 where the kernel or the filesystems
        cannot: the caller reads the rest)."""
        done = 0
        try:
            while done < slot.size:
                n = os.copy_file_range(
                    src, self._fd, min(CHUNK * 16, slot.size - done), done, slot.offset + done
                )
                if n == 0 or self._state.stopped:
                    break
                done += n
        except (AttributeError, OSError):
            pass  # another filesystem, an old kernel: read and write from `done` on
        return done

    def _hash_front(self) -> None:
        """Hash each region once it is written and all before it are (the front, in order)."""
        state = self._state
        while True:
            with state.lock:
                while (
                    not state.stopped
                    and state.cursor < len(self.slots)
                    and not self.slots[state.cursor].done
                ):
                    state.lock.wait()
                if state.stopped or state.cursor >= len(self.slots):
                    return
                slot = self.slots[state.cursor]
            pos, end = slot.offset, slot.offset + slot.size
            while pos < end:
                chunk = os.pread(self._read, min(CHUNK, end - pos), pos)
                if not chunk:
                    break
                self._hash.update(chunk)
                pos += len(chunk)
            with state.lock:
                state.cursor += 1
                state.lock.notify_all()

    # -- when the plan is made ---------------------------------------------------------------

    def take(self, pieces: Sequence[Piece]) -> Taken | None:
        """The written front, when `pieces` (the planned tarball) start with it; else None,
        and the partial is gone (the caller writes the tarball whole). A file the downloads did
        not hand over is copied now; a failure to write the front is raised."""
        if not self._matches(pieces):
            self.close()
            return None
        with self._state.lock:
            self._state.taken = True
        for slot, planned in zip(self.slots, pieces, strict=False):  # pieces: longer
            if slot.entry is not None and isinstance(planned, Entry):
                with self._state.lock:
                    late = slot.entry.sha256 not in self._state.handed
                if late:  # never handed over: copied now, from the plan's source
                    self._queue.put((slot.entry.sha256, planned.source or "", planned.verified))
        self._queue.put(_STOP)
        self._copier.join()
        with self._state.lock:
            while self._state.error is None and self._state.cursor < len(self.slots):
                self._state.lock.wait()
            error = self._state.error
        self._hasher.join()
        if error is not None:
            self.close()
            raise error
        self._close_fds()
        # Each as the plan names it (its cached source: a damaged one is removed and fetched again).
        copied = [
            Copied(planned, s.copied.had, s.copied.sha256)
            for s, planned in zip(self.slots, pieces, strict=False)
            if s.copied is not None and isinstance(planned, Entry)
        ]
        return Taken(
            self.path,
            self.size,
            self._hash,
            copied,
            list(pieces[len(self.pieces) :]),
            sum(len(self._by_sha[sha]) for sha in self._state.handed),
        )

    def _matches(self, pieces: Sequence[Piece]) -> bool:
        if len(pieces) <= len(self.pieces):
            return False
        for mine, planned in zip(self.pieces, pieces, strict=False):  # pieces: longer
            if isinstance(mine, bytes):
                if mine != planned:
                    return False
            elif not (
                isinstance(planned, Entry)
                and (planned.arcname, planned.sha256, planned.size)
                == (mine.arcname, mine.sha256, mine.size)
            ):
                return False
        return True

    def close(self) -> None:
        """Stop both threads and remove the partial, unless `take` handed it on. Safe twice."""
        with self._state.lock:
            handed = self._state.taken and self._state.error is None and self._fd < 0
            self._state.stopped = True
            self._state.lock.notify_all()
        self._queue.put(_STOP)
        self._copier.join()
        self._hasher.join()
        self._close_fds()
        if not handed:
            self.path.unlink(missing_ok=True)

    def _close_fds(self) -> None:
        for name in ("_fd", "_read"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
