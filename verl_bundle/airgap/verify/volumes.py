"""Checking a split bundle (build --split-size) before it is joined: every volume NAME.tar.000,
.001, ... against NAME.tar.sha256, and the joined stream against the list's first line (`-`,
the whole tarball's sha256, as `cat NAME.tar.[0-9][0-9][0-9] | sha256sum -c NAME.tar.sha256` checks
it). A missing, damaged or stray volume is named, with what to copy again.

Each volume is read once: one thread hashes it, another the joined stream. Standard library
only, Python 3.8+.
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
from typing import Any

from verl_bundle.airgap.verify.tarread import Keep, Problem, Read, stream_tar

READ = 4 << 20
WHOLE = "-"
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
_VOLUME = re.compile(r"^(.+)\.(\d{3})$")


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


def listing_of(path: str) -> str | None:
    """The NAME.tar.sha256 of a volume set named by its list, a volume or the joined name."""
    if path.endswith(".sha256"):
        return path
    m = _VOLUME.match(path)
    return (m.group(1) if m else path) + ".sha256"


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
    tarball = base[: -len(".sha256")]
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
