"""Reading a written bundle without extracting it: its manifest and the small files an approver
or a delta build asks about (SHA256SUMS, the signature, LICENSES.txt), from a tarball (plain,
gzip or zstd), a volume set (NAME.tar.000 ... read as one file), an extracted directory, or a
manifest.json alone.

A plain tarball or volume set is read by seeking from header to header, so a 4.6 GB bundle is
opened in milliseconds; a compressed one is read as a stream to its end. Every header is read,
so a member named twice or a tar cut short is refused (exit 3, as `verify` refuses it).
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.delta import left_out
from verl_bundle.airgap.verify.volumes import joined_of, volumes_in
from verl_bundle.errors import DamagedError, UsageError

# The small files read, besides manifest.json.
SMALL = (mf.SUMS, mf.SIGNATURE, mf.SIGNATURE_GPG, mf.LICENSES, mf.SBOM, mf.LOCK)
# The folders of a bundle's files: in a tarball they come before its lists (bundle/early.py).
PAYLOAD = (f"{mf.WHEELS}/", f"{mf.BOOTSTRAP}/", f"{mf.SOURCES}/")
GZIP, ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"  # what a compressed tarball starts with


@dataclass(frozen=True)
class Opened:
    """What a written bundle says about itself. `texts`: bundle path -> bytes of the small
    files found; `volumes`: the files of a split bundle, in order; `tarball`: the file (or the
    joined name of a volume set) when one was read."""

    where: str
    manifest: mf.Manifest
    manifest_sha256: str
    texts: dict[str, bytes] = field(default_factory=dict)
    tarball: Path | None = None
    volumes: tuple[Path, ...] = ()
    size: int = 0  # of the tarball or the volume set; 0 for a directory or a manifest

    @property
    def sidecar(self) -> Path | None:
        if self.tarball is None:
            return None
        return self.tarball.with_name(self.tarball.name + ".sha256")


class Joined(io.RawIOBase):
    """Volumes read as one seekable file (what `cat NAME.tar.[0-9][0-9][0-9]` would give)."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.files = [p.open("rb") for p in paths]
        self.starts: list[int] = []
        total = 0
        for fh in self.files:
            self.starts.append(total)
            total += os.fstat(fh.fileno()).st_size
        self.total = total
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.total}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self.pos < self.total:
            i = max(k for k, start in enumerate(self.starts) if start <= self.pos)
            fh = self.files[i]
            fh.seek(self.pos - self.starts[i])
            data = fh.read(len(view) - done)
            if not data:
                break
            view[done : done + len(data)] = data
            done += len(data)
            self.pos += len(data)
        return done

    def close(self) -> None:
        for fh in self.files:
            fh.close()
        super().close()


def volumes_of(path: Path) -> tuple[Path, list[Path]] | None:
    """(the joined tarball's name, its volumes) when `path` names a volume set: its .sha256
    list, one of its volumes, or the tarball name whose volumes lie beside it."""
    tarball = path.with_name(joined_of(path.name))
    found = [Path(p) for p in volumes_in(str(path.parent), tarball.name)]
    if not found or (tarball.is_file() and path == tarball):
        return None
    return tarball, found


@contextmanager
def _tar_stream(path: Path, raw: IO[bytes]) -> Iterator[tarfile.TarFile]:
    """A tar reader over `raw`: by seeking when it is a plain tar, else as a stream (zstd
    through the zstd command)."""
    magic = raw.read(4)
    raw.seek(0)
    if magic == ZSTD:
        proc = subprocess.Popen(["zstd", "-dcq"], stdin=raw, stdout=subprocess.PIPE)
        assert proc.stdout is not None  # noqa: S101 - PIPE sets it
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tf:
                yield tf
        finally:
            proc.stdout.close()
            proc.kill()
            proc.wait()
    else:
        mode = "r|gz" if magic[:2] == GZIP else "r:"
        with tarfile.open(fileobj=raw, mode=mode) as tf:  # type: ignore[call-overload]
            yield tf


@dataclass
class _Walk:
    """What one walk over every header found: the small files' bytes, each member's bundle
    path, and whether any header was read (a file that is no tar at all has none)."""

    texts: dict[str, bytes] = field(default_factory=dict)
    members: set[str] = field(default_factory=set)
    read_any: bool = False


def _from_tar(path: Path, raw: IO[bytes], size: int | None, walk: _Walk) -> None:
    """Every header, by seeking for a plain tar (`size`: its length), else as a stream to its
    end: the small files are kept; a name twice, or a tar cut short, is damage (what `tar x`
    would make of it is not the bundle that was built)."""
    wanted = {mf.MANIFEST, *SMALL}
    last: tarfile.TarInfo | None = None
    if raw.read(2) in (GZIP, ZSTD[:2]):
        size = None  # offsets are the stream's, not the file's: it is read to its end
    raw.seek(0)
    with _tar_stream(path, raw) as tf:
        for member in tf:
            walk.read_any = True
            rel = posixpath.normpath(member.name).split("/", 1)[1] if "/" in member.name else ""
            if rel in walk.members:
                raise DamagedError(
                    f"{path}: {rel} is in the tarball twice (tar x keeps the later one); it is "
                    "not the bundle that was built: copy it again from the approved copy"
                )
            walk.members.add(rel)
            last = member
            if rel in wanted and member.isfile():
                fh = tf.extractfile(member)
                if fh is not None:
                    walk.texts[rel] = fh.read()
    if size is not None and last is not None:
        _check_end(path, raw, size, last)


def _check_end(path: Path, raw: IO[bytes], size: int, last: tarfile.TarInfo) -> None:
    """A plain tar read by seeking: the last member's data must lie within the file, and only
    the end-of-archive zeros after it (tarfile stops quietly at a header it cannot read)."""
    end = last.offset_data + (last.size if last.isfile() else 0)
    if end > size:
        raise DamagedError(f"{path}: cut short in {last.name}; copy it again")
    raw.seek(end + (-end) % tarfile.BLOCKSIZE)
    while True:
        chunk = raw.read(1 << 20)
        if not chunk:
            return
        if chunk.strip(b"\0"):
            raise DamagedError(f"{path}: damaged after {last.name} (unreadable); copy it again")


def _missing(path: Path, walk: _Walk, m: mf.Manifest) -> None:
    """A tar cut at a member's boundary reads as complete: what SHA256SUMS lists must be there
    (less what a delta leaves to its base)."""
    sums = walk.texts.get(mf.SUMS)
    if sums is None:
        raise DamagedError(f"{path}: no {mf.SUMS} in it; copy it again")
    left = left_out(m)
    listed = [
        line.split(None, 1)[1].lstrip("*")
        for line in sums.decode("utf-8", errors="replace").split("\n")
        if len(line.split(None, 1)) == 2
    ]
    gone = [p for p in listed if p not in walk.members and p not in left]
    if gone:
        raise DamagedError(
            f"{path}: cut short: {len(gone)} file(s) {mf.SUMS} lists are not in it ({gone[0]}"
            f"{', ...' if len(gone) > 1 else ''}); copy it again"
        )


def open_bundle(path: Path) -> Opened:
    """A bundle as written by `build` (or extracted), read without extracting; UsageError in
    one line when it is none."""
    where = str(path)
    walk = _Walk()
    tarball: Path | None = None
    volumes: list[Path] = []
    size = 0
    try:
        if path.is_dir():
            root = Path(mf.find_root(where))
            texts = {
                n: (root / n).read_bytes() for n in (mf.MANIFEST, *SMALL) if (root / n).is_file()
            }
        elif path.name == mf.MANIFEST:
            texts = {mf.MANIFEST: path.read_bytes()}
        elif (split := volumes_of(path)) is not None:
            tarball, volumes = split
            with Joined(volumes) as joined:
                size = joined.total
                # small reads: every header is visited by seeking
                _from_tar(tarball, io.BufferedReader(joined, 64 << 10), size, walk)
            texts = walk.texts
        elif path.is_file():
            tarball, size = path, path.stat().st_size
            with path.open("rb") as fh:
                _from_tar(path, fh, size, walk)
            texts = walk.texts
        else:
            raise UsageError(f"{path}: no such bundle (a tarball, its volumes, a directory)")
    except (OSError, tarfile.TarError, EOFError) as exc:
        if walk.read_any:  # a tar that began well and broke off: damage, as verify says
            short = "cut short, " if "end of data" in str(exc) else ""
            raise DamagedError(f"{path}: damaged tar ({short}{exc}); copy it again") from None
        raise UsageError(f"{path}: cannot read it as a bundle ({exc})") from None
    text = texts.get(mf.MANIFEST)
    if text is None and any(m.startswith(PAYLOAD) for m in walk.members):
        # A bundle's lists come after its files: a copy cut before them has files and no list.
        raise DamagedError(
            f"{path}: cut short: {len(walk.members)} members and no {mf.MANIFEST} after its "
            "files; copy it again"
        )
    if text is None:
        raise UsageError(f"{path}: no manifest.json in it; is it a verl-bundle bundle?")
    try:
        manifest = mf.loads(text.decode("utf-8", errors="replace"))
    except mf.ManifestError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if tarball is not None:
        _missing(path, walk, manifest)
    return Opened(
        where,
        manifest,
        hashlib.sha256(text).hexdigest(),
        texts,
        tarball,
        tuple(volumes),
        size,
    )
