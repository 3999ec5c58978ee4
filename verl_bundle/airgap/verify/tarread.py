"""Reading a bundle tarball once, without extracting it: each member's sha256, the texts of
SHA256SUMS and manifest.json, and the whole file's sha256 for the .sha256 beside it.

A plain tarball is read in large reads (headers found by seeking first) by one thread, while
two others hash: one each member, one the whole file (only when a .sha256 is there), so both
digests, and the bytes of the members kept (the two lists), come from one read of each byte
and both cores hash. Or, asked for the whole file alone (`members=False`: verify with a .sha256,
bundle.py), one thread hashes each byte once. Compressed tarballs are read as a stream.
Unsafe members (absolute paths, '..', links, devices, a name twice) and damage become problems.
"""

from __future__ import annotations

import os
import posixpath
import queue
import re
import subprocess
import tarfile
import threading
from dataclasses import dataclass
from typing import IO, Any, Callable, Dict, Optional, Tuple

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import CHUNK, HashingReader, StreamHash, sha256_file

MANIFEST, SUMS = mf.MANIFEST, mf.SUMS
READ = 4 << 20  # one read of a tarball: large, so the hashing threads get big buffers
GZIP, ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"  # what a compressed tarball starts with
# (member digests by bundle path, the bytes of the members kept: SHA256SUMS and manifest.json
# unless asked for more, whole-file digest). Typing names: a runtime alias on Python 3.8.
Read = Tuple[Dict[str, str], Dict[str, bytes], str]
Keep = Optional[Callable[[str], bool]]  # which members' bytes to keep, by bundle path


def lists(rel: str) -> bool:
    """The members every check keeps: the two lists."""
    return rel in (SUMS, MANIFEST)


@dataclass(frozen=True)
class Problem:
    path: str
    what: str

    def line(self) -> str:
        return f"{self.path}: {self.what}"


def unsafe_member(member: tarfile.TarInfo, top: str | None) -> str | None:
    """Why a member must not be extracted, or None when it is a plain file or directory."""
    name = member.name
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "path with '..'"
    if top is not None and parts[0] != top:
        return f"outside the bundle's top directory {top}/"
    if not (member.isfile() or member.isdir()):
        return "not a plain file or directory (links and devices are refused)"
    return None


def twice(member: tarfile.TarInfo, seen: set[str]) -> str | None:
    """Why a member must not be trusted when its name came before: `tar x` keeps the later
    one, so what is extracted is not what a reader of the first one saw (`seen`: the names so
    far, normalised as tar x writes them)."""
    name = posixpath.normpath(member.name)
    if name in seen:
        return "in the tarball twice (tar x keeps the later one); copy it again"
    seen.add(name)
    return None


class _Hasher:
    """A thread that hashes what it is given, in order: (stream index, bytes) pairs, each
    stream its own sha256. hashlib releases the GIL on large buffers, so it runs beside the
    reading thread; the bounded queue keeps memory at a few reads."""

    def __init__(self, streams: int) -> None:
        self.streams = [StreamHash() for _ in range(streams)]
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=8)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            for i, data in work:
                self.streams[i].update(data)

    def give(self, work: list[tuple[int, Any]]) -> None:
        if work:
            self._queue.put(work)

    def finish(self) -> list[str]:
        self._queue.put(None)
        self._thread.join()
        return [s.hexdigest() for s in self.streams]


def sidecar(path: str) -> str | None:
    """The sha256 the tarball's .sha256 file names, or None when there is none."""
    side = path + ".sha256"
    if not os.path.isfile(side):
        return None
    with open(side, encoding="utf-8", errors="replace") as fh:
        return (fh.read().split() or [""])[0].lower()


def _check_members(
    members: list[tarfile.TarInfo], problems: list[Problem]
) -> tuple[list[tuple[str, tarfile.TarInfo]], str]:
    """The regular files to hash, as (bundle path, member); unsafe members become problems."""
    top = members[0].name.split("/")[0] if members else None
    files = []
    seen: set[str] = set()
    for member in members:
        why = unsafe_member(member, top) or twice(member, seen)
        if why:
            problems.append(Problem(member.name, "unsafe tar member: " + why))
        elif member.isfile():
            files.append((member.name[len(top or "") + 1 :], member))
    return files, top or ""


def _plain_tar(
    path: str, problems: list[Problem], hash_whole: bool, keep: Keep, each: bool = True
) -> Read | None:
    """An uncompressed tarball: headers read by seeking, then one pass of large reads; each
    member's bytes go to one hashing thread, the whole file to another when asked, and the
    kept members' bytes are copied from the same buffers (so the bytes kept are the bytes
    hashed). Returns (member digests, the kept members' bytes, whole digest) or None when the
    tar is damaged (the problem is in the report). `each=False`: the members are not
    hashed (each digest is ""), the whole file only: one hash of each byte."""
    base = os.path.basename(path)
    with tarfile.open(path, "r:") as tf:
        members = tf.getmembers()
    files, _ = _check_members(members, problems)
    size = os.path.getsize(path)
    end = 0
    if members:
        last = members[-1]
        end = last.offset_data + (last.size if last.isfile() else 0)
    if end > size:
        problems.append(
            Problem(base, f"damaged tar: cut short in {members[-1].name}; copy it again")
        )
        return None
    spans = [(m.offset_data, m.offset_data + m.size) for _, m in files]
    members_hasher = _Hasher(len(files) if each else 0)
    whole = _Hasher(1) if hash_whole else None
    leftover = False
    wanted = keep or lists
    kept: dict[int, list[bytes]] = {i: [] for i, (rel, _) in enumerate(files) if wanted(rel)}
    try:
        with open(path, "rb", buffering=0) as raw:
            pos, k = 0, 0  # k: the first member whose data may still lie ahead
            while True:
                chunk = raw.read(READ)
                if not chunk:
                    break
                view = memoryview(chunk)
                stop = pos + len(chunk)
                if whole is not None:
                    whole.give([(0, chunk)])
                work = []
                j = k
                while j < len(spans) and spans[j][0] < stop:
                    lo, hi = max(spans[j][0], pos), min(spans[j][1], stop)
                    if lo < hi:
                        if each:
                            work.append((j, view[lo - pos : hi - pos]))
                        if j in kept:
                            kept[j].append(bytes(view[lo - pos : hi - pos]))
                    if spans[j][1] <= stop:
                        k = j + 1
                    j += 1
                members_hasher.give(work)
                if stop > end and not leftover:
                    leftover = bytes(view[max(0, end - pos) :]).strip(b"\0") != b""
                pos = stop
    finally:
        digests = members_hasher.finish()
        whole_hex = whole.finish()[0] if whole is not None else None
    if leftover:
        # tarfile stops quietly at a header it cannot read: say so once, rather than calling
        # every later file missing.
        problems.append(
            Problem(
                base,
                "damaged tar: unreadable after %s; copy it again"
                % (members[-1].name if members else "its start"),
            )
        )
        return None
    actual = {rel: digests[i] if each else "" for i, (rel, _) in enumerate(files)}
    texts = {files[i][0]: b"".join(parts) for i, parts in kept.items()}
    return actual, texts, whole_hex or ""


def stream_tar(stream: IO[bytes], problems: list[Problem], keep: Keep = None) -> Read:
    """A tarball read as a stream (compressed, or joined from volumes): each member hashed as
    it goes by, the kept ones' bytes kept from that same read. The last element is the last
    member's name (the caller hashes the whole)."""
    actual: dict[str, str] = {}
    texts: dict[str, bytes] = {}
    wanted = keep or lists
    last = ""
    seen: set[str] = set()
    with tarfile.open(fileobj=stream, mode="r|*") as tf:
        top: str | None = None
        for member in tf:
            last = member.name
            if top is None:
                top = member.name.split("/")[0]
            why = unsafe_member(member, top) or twice(member, seen)
            if why:
                problems.append(Problem(member.name, "unsafe tar member: " + why))
                continue
            fh = tf.extractfile(member) if member.isfile() else None
            if fh is None:
                continue
            rel = member.name[len(top) + 1 :]
            h, kept, keeping = StreamHash(), [], wanted(rel)
            while True:
                data = fh.read(CHUNK)
                if not data:
                    break
                h.update(data)
                if keeping:
                    kept.append(data)
            actual[rel] = h.hexdigest()
            if keeping:
                texts[rel] = b"".join(kept)
    return actual, texts, last


def _zstd_tar(path: str, problems: list[Problem], hash_whole: bool, keep: Keep) -> Read:
    """A .tar.zst: the file hashed for its .sha256, the tar read from the zstd command."""
    whole_hex = sha256_file(path) if hash_whole else ""
    proc = subprocess.Popen(["zstd", "-dcq", path], stdout=subprocess.PIPE)
    assert proc.stdout is not None  # PIPE sets it
    try:
        actual, texts, _ = stream_tar(proc.stdout, problems, keep)
        proc.stdout.read()
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise OSError("zstd could not decompress it")
    return actual, texts, whole_hex


def _gzip_tar(path: str, problems: list[Problem], keep: Keep) -> Read | None:
    """A .tar.gz read once: the compressed bytes hashed as they are read and unpacked."""
    with open(path, "rb") as fh:
        raw = HashingReader(fh)
        actual, texts, last = stream_tar(raw, problems, keep)  # type: ignore[arg-type]
        if raw.drain():
            problems.append(
                Problem(
                    os.path.basename(path),
                    f"damaged tar: unreadable after {last or 'its start'}; copy it again",
                )
            )
            return None
    return actual, texts, raw.hexdigest()


def is_plain(path: str) -> bool:
    """An uncompressed tarball (not gzip, not zstd), by its first bytes."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    return magic != ZSTD and magic[:2] != GZIP


def read_tarball(
    path: str,
    problems: list[Problem],
    hash_whole: bool | None = None,
    keep: Keep = None,
    members: bool = True,
) -> Read | None:
    """Read a tarball by its content (plain, gzip, or zstd through the zstd command); None
    when it is damaged (the problem is in `problems`). `hash_whole`: also the whole file's
    sha256 (default: when a .sha256 is beside it); `keep`: the members whose bytes to return
    (default: the two lists); `members=False` (a plain tarball, with hash_whole): the whole
    file hashed alone, each member's digest "". Raises OSError, tarfile.TarError and EOFError
    for a file that cannot be read as a tarball at all."""
    whole = sidecar(path) is not None if hash_whole is None else hash_whole
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == ZSTD:
        return _zstd_tar(path, problems, whole, keep)
    if magic[:2] == GZIP:
        return _gzip_tar(path, problems, keep)
    return _plain_tar(path, problems, whole, keep, members or not whole)
