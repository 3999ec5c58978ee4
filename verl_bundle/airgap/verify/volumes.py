"""Split volumes (build --split-size SIZE), written and checked here: the one place that knows a
volume's name, its list and its limits.

The host writes the tarball as NAME.tar.000, .001, ... of at most SIZE bytes each, for media
and portals that cap a file's size (`VolumeWriter`: in the same single pass as the tarball,
each volume hashed on its way out, under a hidden name renamed when complete), with one
NAME.tar.sha256 whose first line is the joined stream's (`-`, the whole tarball's sha256) and
then each volume's (`listing`), so that `sha256sum -c` checks volume by volume and, read from
standard input, as a whole:

    cat NAME.tar.[0-9][0-9][0-9] | sha256sum -c NAME.tar.sha256     # every volume, then the joined stream
    cat NAME.tar.[0-9][0-9][0-9] | tar x                            # the join: no copy of the whole

The server (and the host's verify and inspect) checks a volume set before it is joined: every
volume against the list, the joined stream against its first line; a missing, damaged, stray
or misnamed volume is named, with what to copy again. Each volume is read once: one thread
hashes it, another the joined stream. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import re
import tarfile
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from verl_bundle.airgap.errors import StepError, UsageError
from verl_bundle.airgap.verify.tarread import Keep, Problem, Read, stream_tar

READ = 4 << 20
WHOLE = "-"  # the list's name for the joined stream (sha256sum reads it from standard input)
MAX_VOLUMES = 1000  # three digits: NAME.tar.000 .. NAME.tar.999
MIN_SIZE = 1_000_000
DIGITS = "[0-9][0-9][0-9]"  # a volume's suffix as the shell's glob takes it: three ASCII digits
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
# A volume's name: the joined tarball's, a dot, three ASCII digits (not `\d`, which takes any
# Unicode digit, nor `$`, which takes a trailing newline: only what DIGITS globs).
_VOLUME = re.compile(r"(.+)\.([0-9]{3})")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?)?B?\s*")
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


@dataclass
class VolumeReport:
    """`problems`: (file, what) pairs, one line each; `checked`: volumes that matched."""

    listing: str
    checked: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return ["{}: {}".format(*p) for p in self.problems]


def stray(entry: str, tarball: str) -> bool:
    """Whether a directory entry could be joined in as a volume of `tarball`: what a loose
    `cat NAME.tar.[0-9]*` takes (NAME.tar.0001, NAME.tar.000.orig), not only three digits."""
    rest = entry[len(tarball) + 1 :] if entry.startswith(tarball + ".") else ""
    return rest[:1] != "" and rest[0] in "0123456789"


def parse_size(text: str) -> int:
    """--split-size: `2G`, `4.7G`, `700M`, `1.5GiB`, `123456789`: decimal units (a 4.7G DVD, a
    2G limit that stays under 2**31 bytes), binary with an i (GiB). UsageError for anything
    else, or for less than MIN_SIZE."""
    m = _SIZE.fullmatch(text.upper())
    if m is None:
        raise UsageError(
            f"--split-size {text!r}: give a size such as 2G, 4.7G (a DVD), 700M or 1.5GiB"
        )
    size = int(float(m.group(1)) * _UNITS[m.group(2) or ""])
    if size < MIN_SIZE:
        raise UsageError(f"--split-size {text}: a volume must hold at least 1M")
    return size


def volume_name(tarball: str, index: int) -> str:
    """The name of volume `index` of `tarball`: NAME.tar.000, NAME.tar.001, ..."""
    return f"{tarball}.{index:03d}"


def volumes_glob(tarball: str) -> str:
    """The shell glob that joins `tarball`'s volumes in order, and nothing else beside them."""
    return f"{tarball}.{DIGITS}"


def joined_of(path: str) -> str:
    """The joined tarball's name of what `path` names: a volume list, a volume, or the name
    itself."""
    if path.endswith(".sha256"):
        return path[: -len(".sha256")]
    m = _VOLUME.fullmatch(path)
    return m.group(1) if m else path


def is_volume(entry: str, tarball: str) -> bool:
    """Whether `entry` is a volume's name of `tarball` (what `cat NAME.tar.[0-9][0-9][0-9]`
    joins); `stray` is the looser question, what a careless glob would take in."""
    m = _VOLUME.fullmatch(entry)
    return m is not None and m.group(1) == tarball


def volumes_in(folder: str, tarball: str) -> list[str]:
    """The volumes of `tarball` in `folder`, in join order: what a reader of the set opens, and
    what a build removes before it writes (an earlier build's set, which a smaller one written
    now would otherwise be joined with by the glob)."""
    return sorted(
        os.path.join(folder, e)
        for e in os.listdir(folder)
        if is_volume(e, tarball) and os.path.isfile(os.path.join(folder, e))
    )


def listing(whole: str, volumes: Sequence[tuple[str, str]]) -> str:
    """NAME.tar.sha256 for a volume set ((name, sha256) of each volume, in order): the joined
    stream first, so that the list's first digest is the whole tarball's as for an unsplit
    one, then each volume."""
    lines = [f"{whole}  {WHOLE}"] + [f"{digest}  {name}" for name, digest in volumes]
    return "\n".join(lines) + "\n"


def listing_of(path: str) -> str:
    """The NAME.tar.sha256 of a volume set named by its list, a volume or the joined name."""
    return joined_of(path) + ".sha256"


def parse(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """(the whole stream's sha256, [(volume name, sha256)]) from a volume list."""
    whole: str | None = None
    volumes = []
    for line in text.split("\n"):
        m = _LINE.match(line)
        if not m:
            continue
        digest, name = m.group(1).lower(), m.group(2)
        if name == WHOLE:
            whole = digest
        else:
            volumes.append((name, digest))
    return whole, volumes


class _Hashes:
    """Two sha256 streams fed on their own threads: the current volume's and the whole's."""

    def __init__(self) -> None:
        self.whole = hashlib.sha256()
        self.volume = hashlib.sha256()
        self.queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=4), queue.Queue(maxsize=4)]
        self.digests: list[str] = []
        self.threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(2)
        ]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        while True:
            item = self.queues[i].get()
            if item is None:
                return
            if i == 0:
                self.whole.update(item)
            elif item == b"":
                self.digests.append(self.volume.hexdigest())
                self.volume = hashlib.sha256()
            else:
                self.volume.update(item)

    def give(self, data: bytes) -> None:
        self.queues[0].put(data)
        self.queues[1].put(data)

    def cut(self) -> None:
        self.queues[1].put(b"")

    def finish(self) -> tuple[str, list[str]]:
        for q in self.queues:
            q.put(None)
        for t in self.threads:
            t.join()
        return self.whole.hexdigest(), self.digests


def _listing(
    side: str, text: str | None, report: VolumeReport
) -> tuple[str | None, list[tuple[str, str]]]:
    """The list's whole digest and volumes (read from `side` unless its `text` is given), and
    every stray beside it; problems go into the report (no volume: nothing to check)."""
    base = os.path.basename(side)
    if text is None:
        try:
            with open(side, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            report.problems.append((base, "cannot read it (%s)" % (exc.strerror or exc)))
            return None, []
    whole, listed = parse(text)
    if not listed:
        report.problems.append((base, "lists no volume: is this a split bundle's list?"))
        return whole, []
    odd = [n for n, _ in listed if "/" in n or n.startswith(".")]
    if odd:
        report.problems.append((base, f"names {odd[0]!r}, not a volume beside it"))
        return whole, []
    folder = os.path.dirname(os.path.abspath(side))
    tarball = joined_of(base)
    # The list is read in its order, the shell's glob joins in name order: only the names
    # build writes (NAME.tar.000, .001, ...) make the two the same stream.
    misnamed = [(i, n) for i, (n, _) in enumerate(listed) if n != volume_name(tarball, i)]
    if misnamed:
        i, name = misnamed[0]
        report.problems.append(
            (
                base,
                f"names {name!r} where {volume_name(tarball, i)!r} belongs: a volume set is "
                f"{volume_name(tarball, 0)}, .001, ... in order, as `cat "
                f"{volumes_glob(tarball)}` joins it",
            )
        )
        return whole, []
    names = {n for n, _ in listed}
    for extra in sorted(os.listdir(folder)):
        if stray(extra, tarball) and extra not in names:
            report.problems.append((extra, f"not in {base}: remove it (the join would take it in)"))
    return whole, listed


def _judge(
    report: VolumeReport,
    listed: list[tuple[str, str]],
    got: list[str],
    whole: str | None,
    whole_got: str,
    complete: bool,
) -> None:
    folder = os.path.dirname(os.path.abspath(report.listing))
    for (name, want), have in zip(listed, got):
        if not os.path.isfile(os.path.join(folder, name)):
            report.problems.append((name, "missing: copy this volume again"))
        elif have != want:
            report.problems.append(
                (name, f"damaged: sha256 {have}, expected {want}; copy this volume again")
            )
        else:
            report.checked += 1
    if complete and report.ok and whole is not None and whole_got != whole:
        base = os.path.basename(report.listing)
        report.problems.append((base, "the joined volumes do not match its first line (-)"))


def verify_volumes(path: str, text: str | None = None) -> VolumeReport:
    """Check a volume set (`path`: its list, one of its volumes, or the joined name; `text`:
    the list's content when the caller read it already, e.g. to check its signature)."""
    side = listing_of(path) or path
    report = VolumeReport(side)
    whole, listed = _listing(side, text, report)
    if not listed:
        return report
    folder = os.path.dirname(os.path.abspath(side))
    hashes = _Hashes()
    complete = True
    try:
        for name, _ in listed:
            full = os.path.join(folder, name)
            try:
                with open(full, "rb", buffering=0) as fh:
                    while True:
                        data = fh.read(READ)
                        if not data:
                            break
                        hashes.give(data)
            except OSError:
                complete = False
            hashes.cut()
    finally:
        whole_got, got = hashes.finish()
    _judge(report, listed, got, whole, whole_got, complete)
    return report


class _Joined(io.RawIOBase):
    """The volumes read in order as one stream (what `cat NAME.tar.[0-9][0-9][0-9]` gives),
    every byte handed to the volume and whole hashes as it is read; a volume that cannot be
    opened ends the stream there."""

    def __init__(self, folder: str, names: list[str], hashes: _Hashes) -> None:
        super().__init__()
        self.paths = [os.path.join(folder, n) for n in names]
        self.hashes = hashes
        self.fh: Any = None
        self.complete = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self.paths or self.fh is not None:
            if self.fh is None:
                try:
                    self.fh = open(self.paths.pop(0), "rb", buffering=0)  # noqa: SIM115
                except OSError:
                    self.complete = False
                    self.hashes.cut()
                    continue
            data = self.fh.read(len(buffer))
            if data:
                self.hashes.give(data)
                buffer[: len(data)] = data
                return len(data)
            self.fh.close()
            self.fh = None
            self.hashes.cut()
        return 0

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
        super().close()


def read_volumes(
    path: str, text: str | None, keep: Keep = None
) -> tuple[VolumeReport, Read | None, list[Problem]]:
    """One read of a volume set: each volume and the joined stream hashed against the list,
    and the joined tar read as a stream, each member hashed (tarread's checks: unsafe or
    repeated members, damage). Returns the volumes' report, the tar's (member digests, kept
    members' bytes, last member) or None, and the tar's problems."""
    side = listing_of(path) or path
    report = VolumeReport(side)
    problems: list[Problem] = []
    whole, listed = _listing(side, text, report)
    if not listed:
        return report, None, problems
    hashes = _Hashes()
    joined = _Joined(os.path.dirname(os.path.abspath(side)), [n for n, _ in listed], hashes)
    done: Read | None = None
    try:
        with io.BufferedReader(joined, READ) as stream:
            try:
                done = stream_tar(stream, problems, keep)
            except (tarfile.TarError, EOFError) as exc:
                tarball = os.path.basename(side)[: -len(".sha256")]
                problems.append(Problem(tarball, f"damaged tar ({exc}); copy the volumes again"))
            while stream.read(READ):  # the end-of-archive blocks: the whole is hashed to its end
                pass
    finally:
        whole_got, got = hashes.finish()
    _judge(report, listed, got, whole, whole_got, joined.complete)
    return report, done, problems


# -- writing (the host's build --split-size) ---------------------------------------------------


class VolumeWriter(io.RawIOBase):
    """A file that is a series of volumes of at most `size` bytes in `folder`, each hashed as
    it is written (the same two hashing threads that check them); `finish` closes the last and
    returns them under their hidden names."""

    def __init__(self, folder: str, tarball: str, size: int) -> None:
        super().__init__()
        self.folder, self.tarball, self.size = os.fspath(folder), tarball, size
        self.paths: list[str] = []
        self.sizes: list[int] = []
        self._fh: Any = None
        self._hashes = _Hashes()
        self._done: tuple[str, list[str]] | None = None

    def hidden(self, index: int) -> str:
        return os.path.join(
            self.folder, f".{volume_name(self.tarball, index)}.partial-{os.getpid()}"
        )

    def writable(self) -> bool:
        return True

    def _close_volume(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            self._hashes.cut()

    def _next(self) -> None:
        self._close_volume()
        if len(self.paths) == MAX_VOLUMES:
            raise StepError(
                f"--split-size {self.size} makes more than {MAX_VOLUMES} volumes; give a larger size"
            )
        path = self.hidden(len(self.paths))
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by _close_volume
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
            self._hashes.give(piece)
            self.sizes[-1] += n
            done += n
        return done

    def finish(self) -> tuple[str, list[tuple[str, str, int]]]:
        """(the joined stream's sha256, [(hidden path, sha256, size)] of each volume); also
        stops the threads after a failure."""
        self._close_volume()
        if self._done is None:
            self._done = self._hashes.finish()
        whole, digests = self._done
        return whole, list(zip(self.paths, digests, self.sizes))

    def discard(self) -> None:
        self.finish()
        for path in self.paths:
            if os.path.lexists(path):
                os.unlink(path)
