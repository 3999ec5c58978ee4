"""Checking a bundle (a directory or the tarball itself) against SHA256SUMS and the manifest.

Both lists hold every artifact's hash, so a change can be pinned on the file that changed: a
file that matches the manifest but not SHA256SUMS means SHA256SUMS itself was altered.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO

from verl_bundle.airgap.layout import MANIFEST, SUMS, find_root

CHUNK = 1 << 20


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
    extra: list[str] = field(default_factory=list)

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


def manifest_hashes(manifest_text: str) -> dict[str, str] | None:
    try:
        data = json.loads(manifest_text)
        out = {}
        for entry in list(data.get("files", [])) + list(data.get("generated", [])):
            out[str(entry["path"])] = str(entry["sha256"])
        return out
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


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
        parsed = manifest_hashes(manifest_text)
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


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def verify_dir(path: str) -> Report:
    root = find_root(path)
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
                if rel.startswith("__pycache__/") or "/__pycache__/" in rel:
                    continue
                files[rel] = full
                if rel in (SUMS, MANIFEST):
                    with open(full, encoding="utf-8", errors="replace") as fh:
                        texts[rel] = fh.read()
    # hashlib releases the GIL on large buffers, so files hash in parallel on every core.
    workers = max(1, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = dict(zip(files, pool.map(_sha256_file, files.values())))
    _judge(report, digests, texts.get(SUMS), texts.get(MANIFEST))
    return report


class _HashingReader:
    """Reads a file while hashing every byte, so the whole tarball is hashed in the same pass."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.hash.update(data)
        return data

    def drain(self) -> bool:
        """Read to the end; True when anything but zero padding was left unread."""
        leftover = False
        while True:
            chunk = self.read(CHUNK)
            if not chunk:
                return leftover
            leftover = leftover or chunk.strip(b"\0") != b""


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


def _members(
    stream: IO[bytes], report: Report, actual: dict[str, str], texts: dict[str, str]
) -> str:
    """Hash every member of a tar read as a stream; note unsafe members instead of using them.
    Returns the name of the last member read."""
    top: str | None = None
    last = ""
    with tarfile.open(fileobj=stream, mode="r|*") as tf:
        for member in tf:
            last = member.name
            if top is None:
                top = member.name.split("/")[0]
            why = unsafe_member(member, top)
            if why:
                report.problems.append(Problem(member.name, "unsafe tar member: " + why))
                continue
            if not member.isfile():
                continue
            rel = member.name[len(top) + 1 :]
            fh = tf.extractfile(member)
            if fh is None:
                continue
            h = hashlib.sha256()
            keep = rel in (SUMS, MANIFEST)
            kept = []
            while True:
                chunk = fh.read(CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                if keep:
                    kept.append(chunk)
            actual[rel] = h.hexdigest()
            if keep:
                texts[rel] = b"".join(kept).decode("utf-8", errors="replace")
    return last


def verify_tar(path: str) -> Report:
    """Stream the tarball once (no extraction); a .tar.zst goes through the zstd command."""
    report = Report(path)
    actual: dict[str, str] = {}
    texts: dict[str, str] = {}
    whole = hashlib.sha256()
    try:
        if path.endswith((".zst", ".zstd")):
            whole_hex = _sha256_file(path)
            proc = subprocess.Popen(["zstd", "-dcq", path], stdout=subprocess.PIPE)
            assert proc.stdout is not None
            try:
                _members(proc.stdout, report, actual, texts)
                proc.stdout.read()
            finally:
                proc.stdout.close()
                if proc.wait() != 0:
                    raise OSError("zstd could not decompress it")
        else:
            with open(path, "rb") as raw:
                reader = _HashingReader(raw)
                last = _members(reader, report, actual, texts)  # type: ignore[arg-type]
                if reader.drain():
                    # tarfile stops quietly at a header it cannot read: say so once, rather
                    # than calling every later file missing.
                    report.problems.append(
                        Problem(
                            os.path.basename(path),
                            "damaged tar: unreadable after %s; copy it again"
                            % (last or "its start"),
                        )
                    )
                    return report
                whole = reader.hash
            whole_hex = whole.hexdigest()
    except FileNotFoundError as exc:
        report.problems.append(Problem(os.path.basename(path), f"cannot read it ({exc})"))
        return report
    except (tarfile.TarError, EOFError, OSError) as exc:
        report.problems.append(
            Problem(os.path.basename(path), f"damaged tar ({exc}); copy it again")
        )
        return report
    sidecar = path + ".sha256"
    if os.path.isfile(sidecar):
        with open(sidecar, encoding="utf-8", errors="replace") as fh:
            expected = (fh.read().split() or [""])[0].lower()
        if expected != whole_hex:
            report.problems.append(
                Problem(os.path.basename(path), f"does not match {os.path.basename(sidecar)}")
            )
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
