"""Writing the planned bundle: one pax tarball streamed from the cache (no second copy on disk),
optionally compressed, under a hidden temporary name renamed only when complete and checked.

Every cached file is hashed once against the lock's sha256 (in the download that fetched it, or
while it is copied), so a damaged cache blob is caught before the tarball gets its final name.
The tarball's own .sha256 is hashed while it is written, or, when an earlier build already
hashed the very same bytes (same layout, same files by hash), taken from the `DigestMemo`; either
way each cached file is read once, and hashed and written from that one read
(bundle/tarstream.py).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from verl_bundle.airgap.verify.signature import SUFFIXES, Signer
from verl_bundle.airgap.verify.volumes import VolumeWriter, listing, volume_name, volumes_in
from verl_bundle.bundle.early import EarlyTar
from verl_bundle.bundle.entries import Entry
from verl_bundle.bundle.tarstream import (
    EXECUTABLE,
    MTIME,
    Copied,
    HashingWriter,
    layout,
    recipe,
    stream,
)
from verl_bundle.errors import AssembleError, UsageError
from verl_bundle.leftovers import alive
from verl_bundle.progress import Reporter

__all__ = ["EXECUTABLE", "Bundle", "Damaged", "DamagedCacheError", "DigestMemo", "write_bundle"]

Compression = Literal["none", "gz", "zstd"]
SUFFIX: dict[str, str] = {"none": ".tar", "gz": ".tar.gz", "zstd": ".tar.zst"}
CHUNK = 1 << 20
_PARTIAL = re.compile(r"^\..+\.partial-(\d+)$")


@dataclass(frozen=True)
class Volume:
    """A volume written (build --split-size): its file, sha256 and size."""

    path: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class Bundle:
    """A written bundle. Split (build --split-size): `path` is the joined tarball's name (not
    on disk) and `volumes` are the files. `signature`: the .sha256 list's (build --sign)."""

    name: str
    path: Path
    sha256: str
    size: int
    files: int
    payload_bytes: int
    volumes: tuple[Volume, ...] = ()
    signature: Path | None = None
    early_files: int = 0  # files written into the tarball as their downloads ended

    @property
    def sidecar(self) -> Path:
        return self.path.with_name(self.path.name + ".sha256")


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


class DigestMemo:
    """Tarball digests remembered by `recipe` (one small file each, under the cache): a warm
    rebuild of the same layout from the same files (by hash) writes the same bytes, so their
    sha256 is the one an earlier build computed while writing them. A memo is only written
    after a write in which every cached file matched its hash, and only read for a write in
    which every cached file is hashed again: a damaged blob still fails the build."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> str | None:
        try:
            text = self._path(key).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if re.fullmatch(r"[0-9a-f]{64}", text) else None

    def put(self, key: str, digest: str) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(digest + "\n", encoding="ascii")
            os.replace(tmp, self._path(key))
        except OSError:
            pass  # a memo is an optimisation: the next build hashes the tarball again


def _damaged(copied: Sequence[Copied]) -> None:
    bad = [
        Damaged(c.entry, None if c.had < 0 else (c.sha256 or c.entry.sha256), c.had)
        for c in copied
        if c.damaged
    ]
    if bad:
        raise DamagedCacheError(bad)


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
            "--compress zstd needs the zstd command or `pip install zstandard`; "
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


def remove_stale_partials(output: Path, reporter: Reporter) -> None:
    """A build killed while writing (kill -9) leaves its hidden .NAME.partial-PID file; the
    next build in the same directory removes those whose process is gone."""
    for path in sorted(output.iterdir()):
        m = _PARTIAL.match(path.name)
        if m and path.is_file() and not path.is_symlink() and not alive(int(m.group(1))):
            size = path.stat().st_size
            path.unlink(missing_ok=True)
            reporter.note(
                f"removed {path}, a partial bundle ({size} bytes) left by an interrupted build "
                f"(process {m.group(1)} is gone)"
            )


def check_output_dir(output: Path) -> None:
    """-o names the directory the tarball goes in: a file (or anything else) already there is
    a usage error, said before anything is fetched or written."""
    for part in (output, *output.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                raise UsageError(
                    f"-o {output}: {part} exists and is not a directory; -o names the "
                    "directory for the tarball (made when missing): give another path"
                )
            return


def prepare_output(output: Path, reporter: Reporter) -> None:
    """The directory for the tarball, made; the partial files of killed builds removed."""
    check_output_dir(output)
    output.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(output, reporter)


def write_bundle(
    name: str,
    entries: Sequence[Entry],
    output: Path,
    compress: Compression,
    reporter: Reporter,
    memo: DigestMemo | None = None,
    split: int | None = None,
    signer: Signer | None = None,
    early: EarlyTar | None = None,
) -> Bundle:
    """Write the tarball (or its volumes, `split` bytes at most each) and its .sha256 beside
    it, then the list's signature (`signer`); each appears under its final name only when
    everything was written and every cached file matched its hash. `early`: the tarball's
    front, written while the downloads ran (bundle/early.py), used when the plan starts
    with it."""
    prepare_output(output, reporter)
    final = output / f"{name}{SUFFIX[compress]}"
    sidecar = output / f"{final.name}.sha256"
    side_tmp = output / f".{sidecar.name}.partial-{os.getpid()}"
    pieces = layout(name, entries)
    try:
        if split is None:
            digest, size, early_files = _write_whole(final, pieces, compress, reporter, memo, early)
            volumes: list[Volume] = []
            side_tmp.write_text(f"{digest}  {final.name}\n")
        else:
            digest, size, volumes = _write_volumes(final, pieces, compress, reporter, split)
            early_files = 0
            side_tmp.write_text(listing(digest, [(v.path.name, v.sha256) for v in volumes]))
        os.replace(side_tmp, sidecar)
    finally:
        side_tmp.unlink(missing_ok=True)
    for old in (sidecar.with_name(sidecar.name + s) for s in SUFFIXES):
        old.unlink(missing_ok=True)  # an earlier build's signature of another list
    return Bundle(
        name=name,
        path=final,
        sha256=digest,
        size=size,
        files=len(entries),
        payload_bytes=sum(e.size for e in entries),
        volumes=tuple(volumes),
        signature=Path(signer.sign_file(str(sidecar))) if signer is not None else None,
        early_files=early_files,
    )


def _write_whole(
    final: Path,
    pieces: list[bytes | Entry],
    compress: Compression,
    reporter: Reporter,
    memo: DigestMemo | None,
    early: EarlyTar | None = None,
) -> tuple[str, int, int]:
    """The tarball under a hidden name, renamed to `final` once complete and checked; an
    earlier build's volumes of the same name are removed then. With `early`'s front taken,
    only the rest is written after it. (sha256, size, files written while fetching)."""
    tmp = final.with_name(f".{final.name}.partial-{os.getpid()}")
    taken = early.take(pieces) if early is not None and compress == "none" else None
    if early is not None and taken is None:
        early.close()
    key = recipe(pieces) if compress == "none" and memo is not None else None
    known = memo.get(key) if memo is not None and key is not None else None
    writer: HashingWriter | None = None
    try:
        with tmp.open("r+b" if taken is not None else "wb") as raw:
            if taken is not None:  # the front is written and hashed: the rest after it
                raw.seek(taken.size)
                writer = HashingWriter(raw, taken.hash, taken.size)
                copied = taken.copied + stream(taken.rest, writer, reporter)  # type: ignore[arg-type]  # it writes
                digest, size = writer.finish(), writer.size
            elif known is not None:  # the same bytes as before: only the cached files hashed
                copied = stream(pieces, raw, reporter)
                raw.flush()
                digest, size = known, os.fstat(raw.fileno()).st_size
            else:
                writer = HashingWriter(raw)
                with _compressed(writer, compress) as out:  # type: ignore[arg-type]
                    copied = stream(pieces, out, reporter)
                digest, size = writer.finish(), writer.size
        _damaged(copied)
        # Not fsync'ed: the rename below already keeps a partial tarball from ever having the
        # final name, and the .sha256 beside it catches a file torn by a power loss.
        os.replace(tmp, final)
    except BaseException:
        if writer is not None:
            writer.finish()
        tmp.unlink(missing_ok=True)
        raise
    for old in volumes_in(str(final.parent), final.name):
        os.unlink(old)
    if memo is not None and key is not None and known is None:
        memo.put(key, digest)
    return digest, size, taken.files if taken is not None else 0


def _write_volumes(
    final: Path,
    pieces: list[bytes | Entry],
    compress: Compression,
    reporter: Reporter,
    split: int,
) -> tuple[str, int, list[Volume]]:
    """The tarball as volumes of at most `split` bytes, written in one pass (each volume and
    the whole hashed on the way), renamed when complete; an earlier build's volumes and an
    unsplit tarball of the same name are removed. (whole sha256, size, volumes)."""
    volumes = VolumeWriter(str(final.parent), final.name, split)
    try:
        with _compressed(volumes, compress) as out:  # type: ignore[arg-type]  # it writes
            copied = stream(pieces, out, reporter)
        digest, written = volumes.finish()
        _damaged(copied)
    except BaseException:
        volumes.discard()
        raise
    for old in [*volumes_in(str(final.parent), final.name), str(final)]:
        Path(old).unlink(missing_ok=True)
    done = []
    for index, (hidden, sha256, vsize) in enumerate(written):
        path = final.with_name(volume_name(final.name, index))
        os.replace(hidden, path)
        done.append(Volume(path, sha256, vsize))
    return digest, sum(v.size for v in done), done
