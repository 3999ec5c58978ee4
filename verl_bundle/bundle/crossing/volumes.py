"""Split volumes (build --split-size SIZE): the tarball written as NAME.tar.000, .001, ... of at
most SIZE bytes each, for media and portals that cap a file's size, with one NAME.tar.sha256
that `sha256sum -c` checks volume by volume and, read from standard input, as a whole:

    cat NAME.tar.[0-9][0-9][0-9] | sha256sum -c NAME.tar.sha256     # every volume, then the joined stream
    cat NAME.tar.[0-9][0-9][0-9] | tar x                            # the join: no copy of the whole

The volumes are written in the same single pass as the tarball (each hashed on its way out),
under hidden names renamed when complete; the list's first line is the whole tarball's, so a
joined NAME.tar still verifies as a tarball does.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_bundle.bundle.tarstream import HashThread
from verl_bundle.errors import AssembleError, UsageError

MAX_VOLUMES = 1000  # three digits: NAME.tar.000 .. NAME.tar.999
MIN_SIZE = 1_000_000
WHOLE = "-"  # the list's name for the joined stream (sha256sum reads it from standard input)
_UNITS = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "KI": 2**10,
    "MI": 2**20,
    "GI": 2**30,
    "TI": 2**40,
}


def parse_size(text: str) -> int:
    """`2G`, `4.7G`, `700M`, `1.5GiB`, `123456789`: decimal units (a 4.7G DVD, a 2G limit that
    stays under 2**31 bytes), binary with an i (GiB). UsageError for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?)?B?\s*", text.upper())
    if m is None:
        raise UsageError(
            f"--split-size {text!r}: give a size such as 2G, 4.7G (a DVD), 700M or 1.5GiB"
        )
    size = int(float(m.group(1)) * _UNITS[m.group(2) or ""])
    if size < MIN_SIZE:
        raise UsageError(f"--split-size {text}: a volume must hold at least 1M")
    return size


@dataclass(frozen=True)
class Volume:
    path: Path
    sha256: str
    size: int


def volume_name(tarball: str, index: int) -> str:
    return f"{tarball}.{index:03d}"


class VolumeWriter(io.RawIOBase):
    """A file that is a series of volumes of at most `size` bytes, each hashed on one thread
    as it is written; `finish` closes the last and returns them under their hidden names."""

    def __init__(self, output: Path, tarball: str, size: int) -> None:
        super().__init__()
        self.output, self.tarball, self.size = output, tarball, size
        self.paths: list[Path] = []
        self.sizes: list[int] = []
        self._fh: Any = None
        self._hasher = HashThread()

    def hidden(self, index: int) -> Path:
        return self.output / f".{volume_name(self.tarball, index)}.partial-{os.getpid()}"

    def writable(self) -> bool:
        return True

    def _next(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._hasher.cut()
        if len(self.paths) == MAX_VOLUMES:
            raise AssembleError(
                f"--split-size {self.size} makes more than {MAX_VOLUMES} volumes; give a larger size"
            )
        path = self.hidden(len(self.paths))
        self._fh = path.open("wb")
        self.paths.append(path)
        self.sizes.append(0)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            if self._fh is None or self.sizes[-1] == self.size:
                self._next()
            n = min(len(view) - done, self.size - self.sizes[-1])
            piece = bytes(view[done : done + n])
            self._fh.write(piece)
            self._hasher.update(piece)
            self.sizes[-1] += n
            done += n
        return done

    def finish(self) -> list[tuple[Path, str, int]]:
        """(hidden path, sha256, size) of each volume; also stops the thread after a failure."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        digests = self._hasher.finish()
        return list(zip(self.paths, digests, self.sizes, strict=False))

    def discard(self) -> None:
        self.finish()
        for path in self.paths:
            path.unlink(missing_ok=True)


def stale(output: Path, tarball: str) -> list[Path]:
    """Volumes of an earlier build of the same name (NAME.tar.000 ...): a smaller set written
    now would otherwise be joined with their tail by `cat NAME.tar.[0-9][0-9][0-9]`."""
    pattern = re.compile(re.escape(tarball) + r"\.\d{3}$")
    return sorted(p for p in output.iterdir() if pattern.match(p.name) and p.is_file())


def listing(whole: str, volumes: list[Volume]) -> str:
    """NAME.tar.sha256 for a volume set: the joined stream first (so that the list's first
    digest is the whole tarball's, as for an unsplit one), then each volume."""
    lines = [f"{whole}  {WHOLE}"] + [f"{v.sha256}  {v.path.name}" for v in volumes]
    return "\n".join(lines) + "\n"
