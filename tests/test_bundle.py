"""The assemble stage: a damaged cache never ships, stale partial tarballs go, locks that put a
package in no phase are refused, and the same lock gives the same tarball byte for byte."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import NAME, Stack
from support.cli import Result, run

from verl_bundle.airgap.contract.manifest import BuildTime
from verl_bundle.bundle.assembly import Entry, bundle_name
from verl_bundle.bundle.early import EarlyTar
from verl_bundle.bundle.tarball import DamagedCacheError, DigestMemo, write_bundle
from verl_bundle.progress import Silent
from verl_bundle.resolve.lock import read_lock

WHEEL = "einops-1.1.0-py3-none-any.whl"


def make_lock(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    lock = tmp_path / "pylock.toml"
    result = run(stack.args("lock", lock, tmp_path / "lock-cache"), capsys)
    assert result.code == 0, result.err
    return lock


def build_lock(
    stack: Stack, lock: Path, out: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> Result:
    return run(stack.args("build", out, cache, "--lock", str(lock)), capsys)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", ["flip", "truncate", "grow"])
def test_a_damaged_cache_blob_is_fetched_again_and_never_ships(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    lock = make_lock(stack, tmp_path, capsys)
    cache = tmp_path / "cache"
    assert build_lock(stack, lock, tmp_path / "a", cache, capsys).code == 0
    locked = next(p.file for p in read_lock(lock).packages if p.file.filename == WHEEL)
    blob = cache / "sha256" / locked.sha256[:2] / locked.sha256
    assert sha256(blob) == locked.sha256
    data = bytearray(blob.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
        blob.write_bytes(bytes(data))
    elif damage == "truncate":
        blob.write_bytes(bytes(data[:-1]))
    else:
        blob.write_bytes(bytes(data) + b"\0")
    stack.reset()
    result = build_lock(stack, lock, tmp_path / "b", cache, capsys)
    assert result.code == 0, result.err
    said = [line for line in result.err.splitlines() if f"wheels/{WHEEL}: the cached copy" in line]
    assert len(said) == 1 and "fetching it again" in said[0], result.err
    fetched = [r.path for s in stack.servers() for r in s.file_requests()]
    assert [p.rsplit("/", 1)[-1] for p in fetched] == [WHEEL]  # that file alone
    assert sha256(blob) == locked.sha256  # the cache holds good bytes again
    tarball = Path(result.last_line)
    assert run(["verify", str(tarball)], capsys).code == 0
    with tarfile.open(tarball) as tf:
        member = tf.extractfile(f"{NAME}/wheels/{WHEEL}")
        assert member is not None and hashlib.sha256(member.read()).hexdigest() == locked.sha256
    assert sorted(p.name for p in tarball.parent.iterdir()) == [
        tarball.name,
        f"{tarball.name}.sha256",
    ]


def test_a_damaged_file_leaves_no_tarball_and_names_itself(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.whl", tmp_path / "bad.whl"
    good.write_bytes(b"g" * 3000)
    bad.write_bytes(b"b" * 3000)
    entries = [
        Entry("wheels/good.whl", sha256(good), 3000, source=str(good)),
        Entry("wheels/bad.whl", hashlib.sha256(b"x" * 3000).hexdigest(), 3000, source=str(bad)),
        Entry("wheels/short.whl", sha256(good), 3001, source=str(good)),
    ]
    out = tmp_path / "out"
    with pytest.raises(DamagedCacheError) as exc:
        write_bundle("b", entries, out, "none", Silent(quiet=True))
    assert [d.entry.arcname for d in exc.value.damaged] == ["wheels/bad.whl", "wheels/short.whl"]
    assert exc.value.damaged[0].got_sha256 == sha256(bad)
    assert exc.value.damaged[1].got_size == 3000
    assert "\n" not in str(exc.value) and "wheels/bad.whl" in str(exc.value)
    assert list(out.iterdir()) == []  # neither the tarball, its .sha256 nor a partial file


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_partial_tarball_left_by_a_killed_build_is_removed(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A build killed with -9 leaves `.NAME.partial-PID` (its process gone); the next build in
    that directory removes it and says so. A live build's partial file is left alone."""
    out = tmp_path / "out"
    out.mkdir()
    dead, alive = (
        _dead_pid(),
        subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE),
    )
    stale = out / f".{NAME}.tar.partial-{dead}"
    stale.write_bytes(b"\0" * 4096)
    stale_side = out / f".{NAME}.tar.sha256.partial-{dead}"
    stale_side.write_text("x")
    busy = out / f".{NAME}.tar.partial-{alive.pid}"
    busy.write_bytes(b"\0")
    keep = out / "notes.partial-1"  # not hidden: not ours
    keep.write_text("mine")
    try:
        result = run(stack.args("build", out, tmp_path / "cache"), capsys)
    finally:
        alive.communicate(b"\n")
    assert result.code == 0, result.err
    assert not stale.exists() and not stale_side.exists()
    assert busy.exists() and keep.exists()
    lines = [line for line in result.err.splitlines() if line.startswith("removed ")]
    assert len(lines) == 2 and f"process {dead} is gone" in lines[0], result.err
    assert str(stale) in "\n".join(lines)


def test_a_lock_with_a_package_in_an_unknown_phase_is_refused(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = make_lock(stack, tmp_path, capsys)
    text = lock.read_text()
    needle = 'role = "requirement", phase = "wheels"'
    assert needle in text
    lock.write_text(text.replace(needle, 'role = "requirement", phase = "later"', 1))
    stack.reset()
    result = build_lock(stack, lock, tmp_path / "out", tmp_path / "cache", capsys)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "phase 'later'" in lines[0] and str(lock) in lines[0], result.err
    assert "verl-bundle lock" in lines[0]
    assert not (tmp_path / "out").exists()
    assert [r for s in stack.servers() for r in s.requests] == []  # refused before fetching


def test_two_cold_builds_of_one_lock_give_the_same_tarball(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = make_lock(stack, tmp_path, capsys)
    one = build_lock(stack, lock, tmp_path / "a", tmp_path / "cache-a", capsys)
    two = build_lock(stack, lock, tmp_path / "b", tmp_path / "cache-b", capsys)
    assert one.code == 0 and two.code == 0, one.err + two.err
    name = f"{bundle_name(read_lock(lock))}.tar"
    a, b = tmp_path / "a" / name, tmp_path / "b" / name
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "a" / f"{name}.sha256").read_text() == (
        tmp_path / "b" / f"{name}.sha256"
    ).read_text()


def _entries(tmp_path: Path, verified: bool = False) -> list[Entry]:
    files = []
    for name, size in (("a.whl", 5 << 20), ("b.whl", 1000), ("c.whl", 0)):
        path = tmp_path / name
        path.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        files.append(
            Entry(f"wheels/{name}", sha256(path), size, source=str(path), verified=verified)
        )
    return [Entry("SHA256SUMS", hashlib.sha256(b"sums\n").hexdigest(), 5, data=b"sums\n"), *files]


def test_a_rebuild_takes_the_tarball_digest_from_the_memo_and_still_hashes_every_file(
    tmp_path: Path,
) -> None:
    """The second write of the same layout copies in the kernel and takes the .sha256 an
    earlier write hashed: the bytes and the digest are the same; a damaged file still fails."""
    entries = _entries(tmp_path)
    memo = DigestMemo(tmp_path / "memo")
    first = write_bundle("b", entries, tmp_path / "one", "none", Silent(quiet=True), memo)
    assert [p.read_text().strip() for p in (tmp_path / "memo").iterdir()] == [first.sha256]
    second = write_bundle("b", entries, tmp_path / "two", "none", Silent(quiet=True), memo)
    assert first.path.read_bytes() == second.path.read_bytes()
    assert second.sha256 == first.sha256 == sha256(second.path)
    assert (tmp_path / "two" / "b.tar.sha256").read_text() == f"{sha256(second.path)}  b.tar\n"
    assert second.size == second.path.stat().st_size
    with tarfile.open(second.path) as tf:
        assert [m.name for m in tf.getmembers() if m.isfile()] == [
            "b/SHA256SUMS",
            "b/wheels/a.whl",
            "b/wheels/b.whl",
            "b/wheels/c.whl",
        ]
    data = bytearray(Path(tmp_path / "a.whl").read_bytes())
    data[3 << 20] ^= 1  # in place, past the first read
    (tmp_path / "a.whl").write_bytes(bytes(data))
    with pytest.raises(DamagedCacheError) as exc:
        write_bundle("b", entries, tmp_path / "three", "none", Silent(quiet=True), memo)
    assert [d.entry.arcname for d in exc.value.damaged] == ["wheels/a.whl"]
    assert list((tmp_path / "three").iterdir()) == []


@pytest.mark.parametrize("memo", [False, True])
def test_a_file_verified_in_this_run_is_still_checked_for_its_size(
    tmp_path: Path, memo: bool
) -> None:
    """A fresh download is not hashed again, but a file that is gone or changed size still
    leaves no tarball, in both ways of writing it."""
    entries = _entries(tmp_path, verified=True)
    store = DigestMemo(tmp_path / "memo")
    if memo:
        write_bundle("b", entries, tmp_path / "one", "none", Silent(quiet=True), store)
    (tmp_path / "b.whl").write_bytes(b"short")
    (tmp_path / "c.whl").unlink()
    with pytest.raises(DamagedCacheError) as exc:
        write_bundle("b", entries, tmp_path / "two", "none", Silent(quiet=True), store)
    lines = [d.line() for d in exc.value.damaged]
    assert len(lines) == 2 and "has 5 bytes, not 1000" in lines[0] and "is gone" in lines[1]
    assert list((tmp_path / "two").iterdir()) == []


def test_the_manifest_carries_the_hosts_build_time_figure() -> None:
    """The host's measured CPU-core-minutes per architecture reach the server (its doctor and
    installer say how long the build will take there); archs the profile names win."""
    from verl_bundle.bundle.plan import build_time_of
    from verl_bundle.compile.compiler import CORE_MINUTES_PER_ARCH
    from verl_bundle.profile.model import SourceBuild

    flash = SourceBuild("flash-attn", ("torch",))
    took = build_time_of(flash)
    assert took is not None
    assert took.core_minutes_per_arch == CORE_MINUTES_PER_ARCH["flash-attn"]
    assert took.archs == ("8.0", "9.0")  # flash-attn's setup.py: sm80, and sm90 on CUDA >= 11.8
    named = SourceBuild("flash-attn", ("torch",), env={"TORCH_CUDA_ARCH_LIST": "8.0;8.6;9.0"})
    assert build_time_of(named) == BuildTime(took.core_minutes_per_arch, ("8.0", "8.6", "9.0"))
    assert build_time_of(SourceBuild("apex", ("torch",))) is None


def _early(tmp_path: Path, entries: list[Entry], folder: str = "early") -> EarlyTar:
    """The front of `entries`' tarball (its files without data), as build makes it."""
    front = [Entry(e.arcname, e.sha256, e.size) for e in entries if e.source is not None]
    (tmp_path / folder).mkdir(exist_ok=True)
    return EarlyTar("b", tmp_path / folder / "b.tar", front)


def _payload_first(entries: list[Entry]) -> list[Entry]:
    return [*(e for e in entries if e.source), *(e for e in entries if e.source is None)]


@pytest.mark.parametrize("handed", ["all", "reversed", "none"])
def test_the_front_written_as_files_arrive_gives_the_bytes_of_a_whole_write(
    tmp_path: Path, handed: str
) -> None:
    """Files handed over in any order (or not at all: copied when the plan is made), fresh ones
    copied in the kernel and cached ones hashed as they are copied: the tarball and its digest
    are the ones written whole, and nothing but it and its .sha256 is left."""
    entries = _payload_first(_entries(tmp_path))
    whole = write_bundle("b", entries, tmp_path / "whole", "none", Silent(quiet=True))
    early = _early(tmp_path, entries)
    files = [e for e in entries if e.source is not None]
    order = {"all": files, "reversed": files[::-1], "none": []}[handed]
    for i, e in enumerate(order):
        early.fetched(e.sha256, str(e.source), fresh=i % 2 == 0)
    try:
        front = write_bundle(
            "b", entries, tmp_path / "early", "none", Silent(quiet=True), early=early
        )
    finally:
        early.close()
    assert front.path.read_bytes() == whole.path.read_bytes()
    assert front.sha256 == whole.sha256 == sha256(front.path)
    assert front.early_files == len(order)
    assert sorted(p.name for p in (tmp_path / "early").iterdir()) == ["b.tar", "b.tar.sha256"]


def test_a_damaged_cached_file_in_the_front_leaves_nothing_and_names_its_source(
    tmp_path: Path,
) -> None:
    entries = _payload_first(_entries(tmp_path))
    a = next(e for e in entries if e.arcname == "wheels/a.whl")
    data = bytearray(Path(str(a.source)).read_bytes())
    data[4 << 20] ^= 1  # past the first read
    Path(str(a.source)).write_bytes(bytes(data))
    early = _early(tmp_path, entries)
    early.fetched(a.sha256, str(a.source), fresh=False)  # a cache hit: hashed as it is copied
    try:
        with pytest.raises(DamagedCacheError) as exc:
            write_bundle("b", entries, tmp_path / "early", "none", Silent(quiet=True), early=early)
    finally:
        early.close()
    assert [(d.entry.arcname, d.entry.source) for d in exc.value.damaged] == [
        ("wheels/a.whl", a.source)  # its cached source: removed and fetched again
    ]
    assert list((tmp_path / "early").iterdir()) == []


def test_a_plan_that_does_not_start_with_the_front_is_written_whole(tmp_path: Path) -> None:
    """A front made for other files (a wheel the plan replaced) is dropped, and the tarball is
    written whole, as without one; closing a front never taken removes its partial file."""
    entries = _payload_first(_entries(tmp_path))
    whole = write_bundle("b", entries, tmp_path / "whole", "none", Silent(quiet=True))
    other = [Entry("wheels/other.whl", "0" * 64, 1000, source="x"), *entries]
    early = _early(tmp_path, other)
    try:
        written = write_bundle(
            "b", entries, tmp_path / "early", "none", Silent(quiet=True), early=early
        )
    finally:
        early.close()
    assert written.path.read_bytes() == whole.path.read_bytes() and written.early_files == 0
    assert sorted(p.name for p in (tmp_path / "early").iterdir()) == ["b.tar", "b.tar.sha256"]
    unused = _early(tmp_path, entries, "unused")
    assert unused.path.exists()
    unused.close()
    unused.close()
    assert list((tmp_path / "unused").iterdir()) == []
