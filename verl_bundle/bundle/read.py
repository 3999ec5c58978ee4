"""Reading a written bundle without extracting it: its manifest and the small files an approver
or a delta build asks about (SHA256SUMS, the signature, LICENSES.txt), from a tarball (plain,
gzip or zstd), a volume set (NAME.tar.000 ... read as one file), an extracted directory, or a
manifest.json alone.

A plain tarball or volume set is read by seeking from header to header, so a 4.6 GB bundle is
opened in milliseconds; a compressed one is read as a stream up to its last small file (they
come before the payload).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.errors import UsageError

# The small files read, besides manifest.json.
SMALL = (mf.SUMS, mf.SIGNATURE, mf.SIGNATURE_GPG, mf.LICENSES, mf.SBOM, mf.LOCK)
_VOLUME = re.compile(r"^(?P<tar>.+)\.(\d{3})$")


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
    name = path.name
    if name.endswith(".sha256"):
        name = name[: -len(".sha256")]
    m = _VOLUME.match(name)
    if m:
        name = m.group("tar")
    tarball = path.with_name(name)
    found = sorted(path.parent.glob(f"{glob_escape(name)}.[0-9][0-9][0-9]"))
    if not found or (tarball.is_file() and path == tarball):
        return None
    return tarball, found


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


@contextmanager
def _tar_stream(path: Path, raw: IO[bytes]) -> Iterator[tarfile.TarFile]:
    """A tar reader over `raw`: by seeking when it is a plain tar, else as a stream (zstd
    through the zstd command)."""
    magic = raw.read(4)
    raw.seek(0)
    if magic == b"\x28\xb5\x2f\xfd":
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
        mode = "r|gz" if magic[:2] == b"\x1f\x8b" else "r:"
        with tarfile.open(fileobj=raw, mode=mode) as tf:  # type: ignore[call-overload]
            yield tf


def _from_tar(path: Path, raw: IO[bytes]) -> dict[str, bytes]:
    wanted = {mf.MANIFEST, *SMALL}
    texts: dict[str, bytes] = {}
    with _tar_stream(path, raw) as tf:
        for member in tf:
            rel = member.name.split("/", 1)[1] if "/" in member.name else ""
            if rel.startswith((f"{mf.WHEELS}/", f"{mf.SOURCES}/", f"{mf.BOOTSTRAP}/")):
                break  # the payload: every small file came before it
            if rel in wanted and member.isfile():
                fh = tf.extractfile(member)
                if fh is not None:
                    texts[rel] = fh.read()
    return texts


def open_bundle(path: Path) -> Opened:
    """A bundle as written by `build` (or extracted), read without extracting; UsageError in
    one line when it is none."""
    where = str(path)
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
                texts = _from_tar(tarball, io.BufferedReader(joined, 4 << 20))
        elif path.is_file():
            tarball, size = path, path.stat().st_size
            with path.open("rb") as fh:
                texts = _from_tar(path, fh)
        else:
            raise UsageError(f"{path}: no such bundle (a tarball, its volumes, a directory)")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise UsageError(f"{path}: cannot read it as a bundle ({exc})") from None
    text = texts.get(mf.MANIFEST)
    if text is None:
        raise UsageError(f"{path}: no manifest.json in it; is it a verl-bundle bundle?")
    try:
        manifest = mf.loads(text.decode("utf-8", errors="replace"))
    except mf.ManifestError as exc:
        raise UsageError(f"{path}: {exc}") from None
    return Opened(
        where,
        manifest,
        hashlib.sha256(text).hexdigest(),
        texts,
        tarball,
        tuple(volumes),
        size,
    )
