"""Checking a bundle (a directory or the tarball itself) against SHA256SUMS and the manifest.

Both lists hold every file's hash, so a change can be pinned on the file that changed: a file
that matches the manifest but not SHA256SUMS means SHA256SUMS itself was altered. A file that
neither lists (a planted lib/sitecustomize.py, a __pycache__/*.pyc) is a problem too: a bundle
holds only what it lists, and the installer refuses to run code it does not.

Reads are large and every byte is hashed once per question: in a directory each file once, by
as many threads as there are cores; in a tarball each member once on one thread while the
other hashes the whole file for its .sha256 (only when that file is there).
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

from verl_bundle.airgap import manifest as mf
from verl_bundle.airgap.hashing import CHUNK, HashingReader, StreamHash, sha256_file

MANIFEST, SUMS = mf.MANIFEST, mf.SUMS
READ = 4 << 20
_GZIP, _ZSTD = (
    b"\x1f\x8b",
    b"\x28\xb5\x2f\xfd",
)  # what a compressed tarball starts with  # one read of a tarball: large, so the hashing threads get big buffers


@dataclass(frozen=True)
class Problem:
    path: str
    what: str

    def line(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass
class Report:
    subject: str
    checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # files neither list names (each a problem)

    @property
    def ok(self) -> bool:
        return not self.problems


def parse_sums(text: str) -> dict[str, str]:
    """`sha256sum` lines: '<64 hex>  <path>' (or ' *<path>' in binary mode)."""
    sums: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([0-9a-fA-F]{64}) [ *](.+)$", line)
        if m:
            sums[m.group(2)] = m.group(1).lower()
    return sums


def _judge(
    report: Report,
    actual: dict[str, str],
    sums_text: str | None,
    manifest_text: str | None,
) -> None:
    """Compare the files found with both lists, and blame the one thing that changed.

    A file that disagrees with SHA256SUMS but agrees with the manifest means SHA256SUMS was
    altered; manifest.json itself is checked through its line in SHA256SUMS.
    """
    if sums_text is None:
        report.problems.append(Problem(SUMS, "missing: nothing can be checked without it"))
        return
    sums = parse_sums(sums_text)
    if not sums:
        report.problems.append(Problem(SUMS, "altered: it lists no file"))
        return
    listed: dict[str, str] = {}
    if manifest_text is None:
        report.problems.append(Problem(MANIFEST, "missing"))
    else:
        try:
            parsed: dict[str, str] | None = mf.loads(manifest_text).hashes()
        except mf.ManifestError:
            parsed = None
        if parsed is None:
            report.problems.append(Problem(MANIFEST, "altered: not a readable manifest"))
        elif actual.get(MANIFEST) == sums.get(MANIFEST):
            listed = parsed  # an altered manifest's listing is not evidence of anything
    sums_blamed: list[str] = []
    for path in sorted(set(sums) | set(listed)):
        report.checked += 1
        got, s, m = actual.get(path), sums.get(path), listed.get(path)
        if s is not None and got == s:
            continue  # intact; a stale manifest entry is caught through manifest.json's hash
        if path == MANIFEST:
            what = "missing" if got is None else f"altered: sha256 does not match {SUMS}"
            report.problems.append(Problem(MANIFEST, what))
        elif got is not None and m is not None and got == m:
            sums_blamed.append(path)  # the file is what the manifest says: the list is wrong
        elif got is None and m is None and listed:
            sums_blamed.append(path)  # a name only SHA256SUMS knows: the list is wrong
        elif got is None:
            report.problems.append(Problem(path, "missing"))
        else:
            report.problems.append(Problem(path, f"altered: sha256 {got}, expected {s or m}"))
    if sums_blamed:
        report.problems.append(
            Problem(
                SUMS,
                "altered: its entries for {} do not match the bundle".format(
                    ", ".join(sums_blamed)
                ),
            )
        )
    report.extra = sorted(p for p in actual if p not in sums and p not in listed and p != SUMS)
    for path in report.extra:
        report.problems.append(
            Problem(
                path, f"not listed in {SUMS} or the manifest; a bundle holds only what it lists"
            )
        )


def verify_dir(path: str) -> Report:
    root = mf.find_root(path)
    report = Report(root)
    texts: dict[str, str] = {}
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if os.path.islink(full):
                report.problems.append(Problem(rel, "is a symbolic link; a bundle holds none"))
                continue
            if name in filenames and os.path.isfile(full):
                files[rel] = full
                if rel in (SUMS, MANIFEST):
                    with open(full, encoding="utf-8", errors="replace") as fh:
                        texts[rel] = fh.read()
    # hashlib releases the GIL on large buffers, so files hash in parallel on every core.
    workers = max(1, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = dict(zip(files, pool.map(sha256_file, files.values())))
    _judge(report, digests, texts.get(SUMS), texts.get(MANIFEST))
    return report


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


def _sidecar(path: str) -> str | None:
    """The sha256 the tarball's .sha256 file names, or None when there is none."""
    sidecar = path + ".sha256"
    if not os.path.isfile(sidecar):
        return None
    with open(sidecar, encoding="utf-8", errors="replace") as fh:
        return (fh.read().split() or [""])[0].lower()


def _check_members(
    members: list[tarfile.TarInfo], report: Report
) -> tuple[list[tuple[str, tarfile.TarInfo]], str]:
    """The regular files to hash, as (bundle path, member); unsafe members become problems."""
    top = members[0].name.split("/")[0] if members else None
    files = []
    for member in members:
        why = unsafe_member(member, top)
        if why:
            report.problems.append(Problem(member.name, "unsafe tar member: " + why))
        elif member.isfile():
            files.append((member.name[len(top or "") + 1 :], member))
    return files, top or ""


def _plain_tar(path: str, report: Report) -> tuple[dict[str, str], dict[str, str], str] | None:
    """An uncompressed tarball: headers read by seeking, then one pass of large reads; each
    member's bytes go to one hashing thread, the whole file to another when a .sha256 is
    beside it. Returns (member digests, texts of the two lists, whole digest) or None when
    the tar is damaged (the problem is in the report)."""
    base = os.path.basename(path)
    expected = _sidecar(path)
    with tarfile.open(path, "r:") as tf:
        members = tf.getmembers()
    files, _ = _check_members(members, report)
    size = os.path.getsize(path)
    end = 0
    if members:
        last = members[-1]
        end = last.offset_data + (last.size if last.isfile() else 0)
    if end > size:
        report.problems.append(
            Problem(base, f"damaged tar: cut short in {members[-1].name}; copy it again")
        )
        return None
    spans = [(m.offset_data, m.offset_data + m.size) for _, m in files]
    members_hasher = _Hasher(len(files))
    whole = _Hasher(1) if expected is not None else None
    leftover = False
    texts: dict[str, list[bytes]] = {rel: [] for rel, _ in files if rel in (SUMS, MANIFEST)}
    index = {rel: i for i, (rel, _) in enumerate(files)}
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
                        work.append((j, view[lo - pos : hi - pos]))
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
        report.problems.append(
            Problem(
                base,
                "damaged tar: unreadable after %s; copy it again"
                % (members[-1].name if members else "its start"),
            )
        )
        return None
    for rel in texts:
        m = files[index[rel]][1]
        with open(path, "rb") as fh:
            fh.seek(m.offset_data)
            texts[rel] = [fh.read(m.size)]
    actual = {rel: digests[i] for i, (rel, _) in enumerate(files)}
    return (
        actual,
        {k: b"".join(v).decode("utf-8", errors="replace") for k, v in texts.items()},
        whole_hex or "",
    )


def _stream_tar(stream: IO[bytes], report: Report) -> tuple[dict[str, str], dict[str, str], str]:
    """A compressed tarball read as a stream: each member hashed as it goes by."""
    actual: dict[str, str] = {}
    texts: dict[str, str] = {}
    last = ""
    with tarfile.open(fileobj=stream, mode="r|*") as tf:
        top: str | None = None
        for member in tf:
            last = member.name
            if top is None:
                top = member.name.split("/")[0]
            why = unsafe_member(member, top)
            if why:
                report.problems.append(Problem(member.name, "unsafe tar member: " + why))
                continue
            fh = tf.extractfile(member) if member.isfile() else None
            if fh is None:
                continue
            rel = member.name[len(top) + 1 :]
            h, kept = StreamHash(), []
            while True:
                data = fh.read(CHUNK)
                if not data:
                    break
                h.update(data)
                if rel in (SUMS, MANIFEST):
                    kept.append(data)
            actual[rel] = h.hexdigest()
            if kept or rel in (SUMS, MANIFEST):
                texts[rel] = b"".join(kept).decode("utf-8", errors="replace")
    return actual, texts, last


def _zstd_tar(path: str, report: Report) -> tuple[dict[str, str], dict[str, str], str]:
    """A .tar.zst: the file hashed for its .sha256, the tar read from the zstd command."""
    whole_hex = sha256_file(path) if _sidecar(path) is not None else ""
    proc = subprocess.Popen(["zstd", "-dcq", path], stdout=subprocess.PIPE)
    assert proc.stdout is not None  # PIPE sets it
    try:
        actual, texts, _ = _stream_tar(proc.stdout, report)
        proc.stdout.read()
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise OSError("zstd could not decompress it")
    return actual, texts, whole_hex


def _gzip_tar(path: str, report: Report) -> tuple[dict[str, str], dict[str, str], str] | None:
    """A .tar.gz read once: the compressed bytes hashed as they are read and unpacked."""
    with open(path, "rb") as fh:
        raw = HashingReader(fh)
        actual, texts, last = _stream_tar(raw, report)  # type: ignore[arg-type]
        if raw.drain():
            report.problems.append(
                Problem(
                    os.path.basename(path),
                    f"damaged tar: unreadable after {last or 'its start'}; copy it again",
                )
            )
            return None
    return actual, texts, raw.hexdigest()


def verify_tar(path: str) -> Report:
    """Check a tarball without extracting it (plain, gzip, or zstd through the zstd command)."""
    report = Report(path)
    base = os.path.basename(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
        if magic == _ZSTD:
            done: tuple[dict[str, str], dict[str, str], str] | None = _zstd_tar(path, report)
        elif magic[:2] == _GZIP:
            done = _gzip_tar(path, report)
        else:
            done = _plain_tar(path, report)
    except FileNotFoundError as exc:
        report.problems.append(Problem(base, f"cannot read it ({exc})"))
        return report
    except (tarfile.TarError, EOFError, OSError) as exc:
        report.problems.append(Problem(base, f"damaged tar ({exc}); copy it again"))
        return report
    if done is None:
        return report
    actual, texts, whole_hex = done
    expected = _sidecar(path)
    if expected is not None and expected != whole_hex:
        report.problems.append(Problem(base, f"does not match {base}.sha256"))
    _judge(report, actual, texts.get(SUMS), texts.get(MANIFEST))
    return report


def verify(path: str) -> Report:
    return verify_dir(path) if os.path.isdir(path) else verify_tar(path)


def split_tar_name(path: str) -> tuple[str, str]:
    base = os.path.basename(path)
    for suffix in (".tar.zst", ".tar.gz", ".tgz", ".tar"):
        if base.endswith(suffix):
            return base[: -len(suffix)], suffix
    return base, ""


def main(argv: list[str]) -> int:
    """`verify PATH`: print each problem; exit 0 when intact, 1 otherwise, 2 on bad usage."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: verify BUNDLE_DIR|TARBALL", file=sys.stderr)
        return 2
    if not os.path.exists(argv[0]):
        print(f"verify: {argv[0]}: no such file or directory", file=sys.stderr)
        return 2
    report = verify(argv[0])
    for problem in report.problems:
        print("FAILED: " + problem.line())
    if report.ok:
        print(f"OK: {report.checked} files match {SUMS} and the manifest")
        return 0
    return 1
