"""Writing the planned bundle: one pax tarball streamed from the cache (no second copy on disk),
optionally compressed, under a hidden temporary name renamed only when complete and checked.

Every payload byte is read once. While it is copied, two threads hash it, one per concern: the
whole output for the tarball's .sha256, and each cached file against the lock's sha256, so a
damaged cache blob is caught before the tarball gets its final name.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import queue
import re
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from verl_bundle.airgap import manifest as mf
from verl_bundle.bundle.plan import Entry
from verl_bundle.errors import AssembleError
from verl_bundle.progress import Reporter

Compression = Literal["none", "gz", "zstd"]
SUFFIX: dict[str, str] = {"none": ".tar", "gz": ".tar.gz", "zstd": ".tar.zst"}
CHUNK = 1 << 20
# Files in a bundle get one fixed time, so that the same inputs give the same tarball.
MTIME = int(os.environ.get("SOURCE_DATE_EPOCH", "315619200"))  # 1980-01-02
EXECUTABLE = {mf.INSTALL, mf.DOCTOR, "install-assets.sh"}  # the last: asset bundles
_PARTIAL = re.compile(r"^\..+\.partial-(\d+)$")


@dataclass(frozen=True)
class Bundle:
    name: str
    path: Path
    sha256: str
    size: int
    files: int
    payload_bytes: int


@dataclass(frozen=True)
class Damaged:
    """A cached file whose bytes are not the ones the lock names."""

    entry: Entry
    got_sha256: str | None  # None: the file could not be read
    got_size: int

    def line(self) -> str:
        e = self.entry
        if self.got_sha256 is None:
            return f"{e.arcname}: the cached copy {e.source} is gone"
        if self.got_size != e.size:
            return (
                f"{e.arcname}: the cached copy {e.source} has {self.got_size} bytes, not {e.size}"
            )
        return (
            f"{e.arcname}: the cached copy {e.source} has sha256 {self.got_sha256}, not {e.sha256}"
        )


class DamagedCacheError(AssembleError):
    """Cached files did not hash to the lock's sha256 while they were copied; no tarball was
    left behind. The caller evicts them and fetches them again."""

    def __init__(self, damaged: Sequence[Damaged]) -> None:
        self.damaged = tuple(damaged)
        super().__init__(
            "; ".join(d.line() for d in self.damaged)
            + ". Remove the damaged files from the cache (--cache-dir) and build again"
        )


_CUT = object()  # queue marker: the digest of everything since the last cut is complete


class _HashThread:
    """One long-lived thread hashing chunks in the order given (hashlib releases the GIL on
    large buffers, so it runs beside the copying); `cut` closes one digest and starts the
    next. A bounded queue keeps memory at a few chunks."""

    def __init__(self) -> None:
        self.digests: list[str] = []
        self._queue: queue.Queue[object] = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._finished = False

    def _run(self) -> None:
        h = hashlib.sha256()
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


class _HashingWriter(io.RawIOBase):
    """Counts and hashes (on its own thread) every byte on its way to the file."""

    def __init__(self, fh: IO[bytes]) -> None:
        super().__init__()
        self.fh = fh
        self.size = 0
        self.hasher = _HashThread()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        buf = bytes(data)
        self.fh.write(buf)
        self.size += len(buf)
        self.hasher.update(buf)
        return len(buf)

    def finish(self) -> str:
        return self.hasher.finish()[-1]


def _header(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size if kind == tarfile.REGTYPE else 0
    info.mode = mode
    info.mtime = MTIME
    info.type = kind
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _copy(e: Entry, out: IO[bytes], files: _HashThread, reporter: Reporter, handle: object) -> int:
    """Copy a cached file's bytes (exactly e.size of them, zero-filled if it is short, so the
    tar stays well formed); its digest is cut on `files`. Returns the bytes the file had, or
    -1 when it could not be opened."""
    assert e.source is not None  # noqa: S101 - an Entry has data or a source
    remaining, had = e.size, 0
    try:
        src = open(e.source, "rb")  # noqa: SIM115 - closed below, after the padding is written
    except FileNotFoundError:
        had = -1
    else:
        with src:
            while remaining > 0 and (chunk := src.read(min(CHUNK, remaining))):
                out.write(chunk)
                files.update(chunk)
                remaining -= len(chunk)
                reporter.advance(handle, len(chunk))
            had = e.size - remaining + len(src.read(1))
    if remaining:
        out.write(b"\0" * remaining)
    files.cut()
    return had


def _write_tar(out: IO[bytes], top: str, entries: Sequence[Entry], reporter: Reporter) -> None:
    """A POSIX (pax) tar written by hand: headers from tarfile, data copied in 1 MiB chunks.
    DamagedCacheError when a cached file's bytes are not the planned ones."""
    dirs: set[str] = {top}
    out.write(_header(top, 0, 0o755, tarfile.DIRTYPE))
    handle = reporter.start("writing bundle", sum(e.size for e in entries))
    files = _HashThread()
    copied: list[tuple[Entry, int]] = []
    try:
        for e in entries:
            parent = e.arcname.rsplit("/", 1)[0] if "/" in e.arcname else ""
            if parent:
                parts = parent.split("/")
                for i in range(1, len(parts) + 1):
                    d = f"{top}/{'/'.join(parts[:i])}"
                    if d not in dirs:
                        dirs.add(d)
                        out.write(_header(d, 0, 0o755, tarfile.DIRTYPE))
            mode = 0o755 if e.arcname in EXECUTABLE else 0o644
            out.write(_header(f"{top}/{e.arcname}", e.size, mode))
            if e.data is not None:
                out.write(e.data)
            else:
                copied.append((e, _copy(e, out, files, reporter, handle)))
            pad = (-e.size) % tarfile.BLOCKSIZE
            if pad:
                out.write(b"\0" * pad)
        out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    finally:
        digests = files.finish()
        reporter.done(handle)
    damaged = [
        Damaged(e, None if had < 0 else digest, had)
        for (e, had), digest in zip(copied, digests[: len(copied)], strict=True)
        if had != e.size or digest != e.sha256
    ]
    if damaged:
        raise DamagedCacheError(damaged)


@contextmanager
def _compressed(raw: IO[bytes], compress: Compression) -> Iterator[IO[bytes]]:
    if compress == "none":
        yield raw
    elif compress == "gz":
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=MTIME) as gz:
            yield gz  # type: ignore[misc]
    else:
        try:
            import zstandard
        except ImportError:
            zstandard = None
        if zstandard is not None:
            with zstandard.ZstdCompressor(level=3, threads=-1).stream_writer(
                raw, closefd=False
            ) as z:
                yield z
        else:
            with _zstd_command(raw) as z:
                yield z


@contextmanager
def _zstd_command(raw: IO[bytes]) -> Iterator[IO[bytes]]:
    exe = shutil.which("zstd")
    if exe is None:
        raise AssembleError(
            "--compress zstd needs the zstd command or `pip install verl-bundle[zstd]`; "
            "or use --compress gz"
        )
    proc = subprocess.Popen(
        [exe, "-q", "-T0", "-3", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None  # noqa: S101 - PIPE sets them
    out = proc.stdout

    def pump() -> None:  # compressed bytes go through the hashing writer
        while chunk := out.read(CHUNK):
            raw.write(chunk)

    copier = threading.Thread(target=pump)
    copier.start()
    try:
        yield proc.stdin
    finally:
        proc.stdin.close()
        copier.join()
        out.close()
        if proc.wait() != 0:
            raise AssembleError("zstd failed while compressing the bundle")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_stale_partials(output: Path, reporter: Reporter) -> None:
    """A build killed while writing (kill -9) leaves its hidden .NAME.partial-PID file; the
    next build in the same directory removes those whose process is gone."""
    for path in sorted(output.iterdir()):
        m = _PARTIAL.match(path.name)
        if m and path.is_file() and not path.is_symlink() and not _alive(int(m.group(1))):
            size = path.stat().st_size
            path.unlink(missing_ok=True)
            reporter.note(
                f"removed {path}, a partial bundle ({size} bytes) left by an interrupted build "
                f"(process {m.group(1)} is gone)"
            )


def write_bundle(
    name: str,
    entries: Sequence[Entry],
    output: Path,
    compress: Compression,
    reporter: Reporter,
) -> Bundle:
    """Write the tarball and its .sha256 beside it; both appear under their final names only
    when everything was written and every cached file matched its hash."""
    output.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(output, reporter)
    final = output / f"{name}{SUFFIX[compress]}"
    sidecar = output / f"{final.name}.sha256"
    tmp = output / f".{final.name}.partial-{os.getpid()}"
    side_tmp = output / f".{sidecar.name}.partial-{os.getpid()}"
    writer: _HashingWriter | None = None
    try:
        with tmp.open("wb") as raw:
            writer = _HashingWriter(raw)
            with _compressed(writer, compress) as out:  # type: ignore[arg-type]
                _write_tar(out, name, entries, reporter)
            digest = writer.finish()
        # Not fsync'ed: the rename below already keeps a partial tarball from ever having the
        # final name, and the .sha256 beside it catches a file torn by a power loss.
        side_tmp.write_text(f"{digest}  {final.name}\n")
        os.replace(tmp, final)
        os.replace(side_tmp, sidecar)
    except BaseException:
        if writer is not None:
            writer.finish()
        tmp.unlink(missing_ok=True)
        side_tmp.unlink(missing_ok=True)
        raise
    return Bundle(
        name=name,
        path=final,
        sha256=digest,
        size=writer.size,
        files=len(entries),
        payload_bytes=sum(e.size for e in entries),
    )
