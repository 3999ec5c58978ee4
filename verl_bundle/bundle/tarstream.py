"""The tarball's bytes: its layout (pax headers, data, padding, in order) and the one way of
writing it.

`stream`: every payload byte is read once into memory, and that same buffer is written out and
hashed: a thread hashes each cached file against the lock's sha256 as it goes by (a file fetched
and hashed in this very run, `Entry.verified`, is not hashed a second time), and, unless an
earlier build hashed the exact same bytes (`recipe` names them), the caller's `HashingWriter`
hashes the whole output for the tarball's .sha256 on another. No check is dropped on a warm
rebuild: every cached file is still hashed once, from the read that copies it.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import tarfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.bundle.entries import Entry
from verl_bundle.progress import Reporter

CHUNK = 1 << 20  # reads: large enough for hashlib to release the GIL, small enough for the caches
QUEUED = 8  # chunks waiting per hashing thread: memory stays at a few MiB
# Files in a bundle get one fixed time, so that the same inputs give the same tarball.
MTIME = int(os.environ.get("SOURCE_DATE_EPOCH", "315619200"))  # 1980-01-02
EXECUTABLE = {mf.INSTALL, mf.DOCTOR, "install-assets.sh"}  # the last: asset bundles
# Bump when the layout changes: a remembered digest then no longer applies.
LAYOUT_VERSION = b"verl-bundle tar layout 2\n"  # 2: the files as locked first

Piece = bytes | Entry  # bytes made here, or a cached file's content


@dataclass(frozen=True)
class Copied:
    """A cached file as it was copied: how many bytes it had (-1: it could not be opened) and
    their sha256 (None when it was not hashed again: fetched and hashed in this run)."""

    entry: Entry
    had: int
    sha256: str | None

    @property
    def damaged(self) -> bool:
        return self.had != self.entry.size or (
            self.sha256 is not None and self.sha256 != self.entry.sha256
        )


def _header(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size if kind == tarfile.REGTYPE else 0
    info.mode = mode
    info.mtime = MTIME
    info.type = kind
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT)


def layout(top: str, entries: Sequence[Entry]) -> list[Piece]:
    """The tar as a list of pieces: a POSIX (pax) tar whose headers come from tarfile."""
    dirs: set[str] = {top}
    pieces: list[Piece] = [_header(top, 0, 0o755, tarfile.DIRTYPE)]
    for e in entries:
        parent = e.arcname.rsplit("/", 1)[0] if "/" in e.arcname else ""
        if parent:
            parts = parent.split("/")
            for i in range(1, len(parts) + 1):
                d = f"{top}/{'/'.join(parts[:i])}"
                if d not in dirs:
                    dirs.add(d)
                    pieces.append(_header(d, 0, 0o755, tarfile.DIRTYPE))
        mode = 0o755 if e.arcname in EXECUTABLE else 0o644
        pieces.append(_header(f"{top}/{e.arcname}", e.size, mode))
        pieces.append(e.data if e.data is not None else e)
        pad = (-e.size) % tarfile.BLOCKSIZE
        if pad:
            pieces.append(b"\0" * pad)
    pieces.append(b"\0" * (2 * tarfile.BLOCKSIZE))
    return pieces


def recipe(pieces: Sequence[Piece]) -> str:
    """A digest naming the tarball's exact bytes: every made byte, and each cached file by the
    lock's sha256 and size (length-prefixed, so no two layouts share one). A tar written from
    this layout with every cached file matching its hash is always the same bytes."""
    h = hashlib.sha256(LAYOUT_VERSION)
    for p in pieces:
        if isinstance(p, bytes):
            h.update(b"B%d\n" % len(p))
            h.update(p)
        else:
            h.update(f"F{p.size} {p.sha256}\n".encode())
    return h.hexdigest()


_CUT = object()  # queue marker: the digest of everything since the last cut is complete


class HashThread:
    """One long-lived thread hashing chunks in the order given (hashlib releases the GIL on
    large buffers, so it runs beside the copying); `cut` closes one digest and starts the
    next. A bounded queue keeps memory at a few chunks."""

    def __init__(self, start: Any = None) -> None:
        self.digests: list[str] = []
        self._start = start  # a sha256 that already holds what came before (bundle/early.py)
        self._queue: queue.Queue[object] = queue.Queue(maxsize=QUEUED)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._finished = False

    def _run(self) -> None:
        h = self._start if self._start is not None else hashlib.sha256()
        while (item := self._queue.get()) is not None:
            if item is _CUT:
                self.digests.append(h.hexdigest())
                h = hashlib.sha256()
            else:
                h.update(item)  # type: ignore[arg-type]
        self.digests.append(h.hexdigest())

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def cut(self) -> None:
        self._queue.put(_CUT)

    def finish(self) -> list[str]:
        """Stop the thread (also after a failure); the digests, the last one unclosed."""
        if not self._finished:
            self._finished = True
            self._queue.put(None)
            self._thread.join()
        return self.digests


class HashingWriter(io.RawIOBase):
    """Counts and hashes (on its own thread) every byte on its way to the file."""

    def __init__(self, fh: IO[bytes], start: Any = None, size: int = 0) -> None:
        super().__init__()
        self.fh = fh
        self.size = size  # with `start`: the bytes it already hashed
        self.hasher = HashThread(start)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        buf = data if isinstance(data, bytes) else bytes(data)
        self.fh.write(buf)
        self.size += len(buf)
        self.hasher.update(buf)
        return len(buf)

    def finish(self) -> str:
        return self.hasher.finish()[-1]


def stream(pieces: Sequence[Piece], out: IO[bytes], reporter: Reporter) -> list[Copied]:
    """Write the pieces to `out`, reading each cached file once in large chunks; files not
    verified in this run are hashed on a second thread as they go by."""
    handle = reporter.start("writing bundle", sum(p.size for p in pieces if isinstance(p, Entry)))
    files = HashThread()
    copied: list[tuple[Entry, int]] = []
    try:
        for p in pieces:
            if isinstance(p, bytes):
                out.write(p)
                continue
            hasher = None if p.verified else files
            copied.append((p, _stream_file(p, out, hasher, reporter, handle)))
    finally:
        digests = iter(files.finish())
        reporter.done(handle)
    return [Copied(e, had, None if e.verified else next(digests)) for e, had in copied]


def _stream_file(
    e: Entry, out: IO[bytes], files: HashThread | None, reporter: Reporter, handle: object
) -> int:
    """Copy exactly e.size bytes of a cached file (zero-filled if it is short, so the tar stays
    well formed), its digest cut on `files`. The bytes the file had, or -1 when it is gone."""
    assert e.source is not None  # noqa: S101 - an Entry has data or a source
    remaining, had = e.size, 0
    try:
        src = open(e.source, "rb", buffering=0)  # noqa: SIM115 - closed below
    except FileNotFoundError:
        had = -1
    else:
        with src:
            while remaining > 0 and (chunk := src.read(min(CHUNK, remaining))):
                out.write(chunk)
                if files is not None:
                    files.update(chunk)
                remaining -= len(chunk)
                reporter.advance(handle, len(chunk))
            had = e.size - remaining + len(src.read(1))
    if remaining:
        out.write(b"\0" * remaining)
    if files is not None:
        files.cut()
    return had
