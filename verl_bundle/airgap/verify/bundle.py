"""Checking a bundle (a directory or the tarball itself) against SHA256SUMS and the manifest.

Both lists hold every file's hash, so a change can be pinned on the file that changed: a file
that matches the manifest but not SHA256SUMS means SHA256SUMS itself was altered. A file that
neither lists (a planted lib/sitecustomize.py, a __pycache__/*.pyc) is a problem too: a bundle
holds only what it lists, and the installer refuses to run code it does not.

Reads are large and every byte is hashed once: in a directory each file once, by as many
threads as there are cores; a tarball is read once by airgap/verify/tarread.py, hashed whole
when a .sha256 is beside it (its members then are the bytes the build hashed), else member by
member; only a tarball that does not match its .sha256 is read again, to name the file.
"""

from __future__ import annotations

import os
import re
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.airgap.verify.tarread import (
    Keep,
    Problem,
    is_plain,
    read_tarball,
    sidecar,
    unsafe_member,
)

__all__ = [
    "Problem",
    "Report",
    "judge",
    "parse_sums",
    "scan",
    "unsafe_member",
    "verify",
    "verify_dir",
    "verify_tar",
]

MANIFEST, SUMS = mf.MANIFEST, mf.SUMS


@dataclass
class Report:
    subject: str
    checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # files neither list names (each a problem)
    what: str = "files match SHA256SUMS and the manifest"  # what `checked` counts, when ok
    kept: dict[str, bytes] = field(default_factory=dict)  # bytes of the members asked for

    @property
    def ok(self) -> bool:
        return not self.problems


_SUMS_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def parse_sums(text: str) -> dict[str, str]:
    """`sha256sum` lines: '<64 hex>  <path>' (or ' *<path>' in binary mode)."""
    sums: dict[str, str] = {}
    # Lines end at "\n" alone: splitlines() also breaks at \v, \f, \x1c.. and U+2028, so a
    # damaged newline would read as intact.
    for line in text.split("\n"):
        m = _SUMS_LINE.match(line)
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
    # A line that is not '<sha256>  <path>' is damage to SHA256SUMS itself, never skipped: a
    # flipped byte in a separator would otherwise only show as a file "not listed". The list
    # is then blamed alone: what it fails to list follows from that.
    bad = [
        Problem(SUMS, f"altered: line {number} is not '<sha256>  <path>': {line[:80]!r}")
        for number, line in enumerate(sums_text.split("\n"), start=1)
        if line and not _SUMS_LINE.match(line)
    ]
    if bad:
        report.problems.extend(bad)
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


def scan(root: str, problems: list[Problem]) -> tuple[dict[str, str], dict[str, str]]:
    """Every regular file under `root` (bundle path -> full path), and the text of the two
    lists; a symbolic link is a problem (a bundle holds none)."""
    # Here, not at the top: served.py brings http.client and urllib, which a tarball's check
    # (most of verify's runs) never needs.
    from verl_bundle.airgap.verify.served import STATE as FETCH_STATE

    texts: dict[str, str] = {}
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:  # a served copy's fetch state (verify/served.py), not the bundle's
            dirnames[:] = [d for d in dirnames if d != FETCH_STATE]
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if os.path.islink(full):
                problems.append(Problem(rel, "is a symbolic link; a bundle holds none"))
                continue
            if name in filenames and os.path.isfile(full):
                files[rel] = full
                if rel in (SUMS, MANIFEST):
                    with open(full, encoding="utf-8", errors="replace", newline="") as fh:
                        texts[rel] = fh.read()
    return files, texts


def judge(report: Report, actual: dict[str, str], texts: dict[str, str]) -> None:
    """Judge every file's digest (`actual`, bundle path -> sha256) against both lists."""
    _judge(report, actual, texts.get(SUMS), texts.get(MANIFEST))


def workers() -> int:
    """Hashing threads: hashlib releases the GIL on large buffers, so one per core."""
    return max(1, min(8, os.cpu_count() or 1))


def verify_dir(path: str) -> Report:
    root = mf.find_root(path)
    report = Report(root)
    files, texts = scan(root, report.problems)
    with ThreadPoolExecutor(max_workers=workers()) as pool:
        digests = dict(zip(files, pool.map(sha256_file, files.values())))
    judge(report, digests, texts)
    return report


# What `checked` counts when the tarball was hashed whole (each byte once) and matched.
BY_WHOLE = "files match SHA256SUMS and the manifest, through the tarball's .sha256"


def verify_tar(
    path: str, expected: str | None = None, keep: Keep = None, members: bool = False
) -> Report:
    """Check a tarball without extracting it (plain, gzip, or zstd through the zstd command):
    the whole file against `expected` (default: the sha256 its .sha256 beside it names), every
    member against both lists. `keep`: members whose bytes go into `report.kept`.

    A plain tarball with an expected sha256 is hashed whole, each byte once (the members'
    headers, names and lists are still checked): when the whole matches, the tarball is byte
    for byte the one the build wrote, whose every member it hashed against the lock, so each
    member's digest is its SHA256SUMS line. When it does not, a second read hashes each member,
    to name the file that changed. `members=True` hashes them in the first read anyway."""
    report = Report(path)
    base = os.path.basename(path)
    if expected is None:
        expected = sidecar(path)
    whole_only = expected is not None and not members
    try:
        whole_only = whole_only and is_plain(path)
        done = read_tarball(path, report.problems, expected is not None, keep, not whole_only)
        if (
            done is not None
            and expected is not None
            and whole_only
            and not _implied(done, expected)
        ):
            # Not the tarball built (or a member its SHA256SUMS does not list): each member
            # hashed, to name what differs; the header problems are found again.
            whole_hex = done[2]
            report.problems.clear()
            done = read_tarball(path, report.problems, False, keep)
            done = done and (done[0], done[1], whole_hex)
            whole_only = False
    except FileNotFoundError as exc:
        report.problems.append(Problem(base, f"cannot read it ({exc})"))
        return report
    except (tarfile.TarError, EOFError, OSError) as exc:
        report.problems.append(Problem(base, f"damaged tar ({exc}); copy it again"))
        return report
    if done is None:
        return report
    actual, kept, whole_hex = done
    report.kept = kept
    texts = decoded(kept)
    if whole_only:  # the whole matched: each member is what SHA256SUMS lists for it
        sums = parse_sums(texts[SUMS])
        actual = {rel: sums[rel] for rel in actual if rel != SUMS}
        report.what = BY_WHOLE
    if expected is not None and expected != whole_hex:
        report.problems.append(Problem(base, f"does not match {base}.sha256"))
    judge(report, actual, texts)
    return report


def _implied(done: tuple[dict[str, str], dict[str, bytes], str], expected: str) -> bool:
    """The whole matched its .sha256 and SHA256SUMS lists every member: each member's digest
    is then its line there."""
    actual, kept, whole_hex = done
    sums = parse_sums(decoded(kept).get(SUMS, ""))
    return whole_hex == expected and all(rel in sums for rel in actual if rel != SUMS)


def decoded(kept: dict[str, bytes]) -> dict[str, str]:
    """The two lists' texts, from the kept members' bytes."""
    return {
        k: v.decode("utf-8", errors="replace") for k, v in kept.items() if k in (SUMS, MANIFEST)
    }


def verify(path: str) -> Report:
    return verify_dir(path) if os.path.isdir(path) else verify_tar(path)
