"""The wheel check at its two depths (structure; whole), and the pool that runs it beside the
downloads: a damaged wheel is named and evicted, a pass is remembered at its depth."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest
from support.pkgindex import build_wheel

from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.errors import FetchError
from verl_bundle.fetch.wheelchecks import WheelCheck, WheelChecks
from verl_bundle.net.cache import Cache
from verl_bundle.wheel.integrity import passed, recorded, structure_problem, wheel_problem


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return build_wheel(
        tmp_path / "src", "pkg", "1.0", modules={"pkg": "VALUE = 'original'\n"}, payload_bytes=4096
    )


def _copy(src: Path, tmp_path: Path, label: str) -> Path:
    dest = tmp_path / label / src.name
    dest.parent.mkdir()
    shutil.copyfile(src, dest)
    return dest


def _local_header_at(path: Path, member: str) -> int:
    with zipfile.ZipFile(path) as zf:
        return zf.getinfo(member).header_offset


def test_the_structure_check_finds_a_broken_zip_and_a_wheel_that_lacks_what_record_lists(
    tmp_path: Path, good: Path
) -> None:
    assert structure_problem(good) is None
    truncated = _copy(good, tmp_path, "truncated")
    truncated.write_bytes(good.read_bytes()[:-30])
    assert "the zip is damaged" in (structure_problem(truncated) or "")
    lacking = _copy(good, tmp_path, "lacking")
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(lacking, "w") as zout:
        for info in zin.infolist():
            if info.filename != "pkg/__init__.py":
                zout.writestr(info, zin.read(info))
    assert structure_problem(lacking) == "its RECORD lists pkg/__init__.py, which the wheel lacks"
    norecord = _copy(good, tmp_path, "norecord")
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(norecord, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("/RECORD"):
                zout.writestr(info, zin.read(info))
    assert structure_problem(norecord) == "it has no single .dist-info/RECORD"


def test_the_structure_check_reads_every_local_header_the_directory_points_at(
    tmp_path: Path, good: Path
) -> None:
    """The central directory can be intact while what it points at is not: a local header
    overwritten, or naming another file. Installers unpack from the local headers."""
    at = _local_header_at(good, "pkg/__init__.py")
    gone = _copy(good, tmp_path, "gone")
    raw = bytearray(gone.read_bytes())
    raw[at : at + 4] = b"XXXX"
    gone.write_bytes(bytes(raw))
    assert structure_problem(gone) == (
        "the local header of pkg/__init__.py is missing (the zip is damaged)"
    )
    renamed = _copy(good, tmp_path, "renamed")
    raw = bytearray(renamed.read_bytes())
    raw[at + 30] = ord("q")  # "pkg/..." -> "qkg/..." in the local header only
    renamed.write_bytes(bytes(raw))
    assert structure_problem(renamed) == (
        "the local header of pkg/__init__.py names another file (the zip is damaged)"
    )
    assert "damaged" in (wheel_problem(renamed) or "")  # the whole check implies the structure


def test_a_changed_member_passes_the_structure_check_and_fails_the_whole_one(
    tmp_path: Path, good: Path
) -> None:
    """The depth the structure check leaves to the hash: a byte changed inside a member. A
    wheel whose sha256 its source published cannot differ so (its hash would not match);
    one nobody published a hash for is checked whole."""
    flipped = _copy(good, tmp_path, "flipped")
    raw = bytearray(flipped.read_bytes())
    raw[raw.index(b"original")] ^= 0x20
    flipped.write_bytes(bytes(raw))
    assert structure_problem(flipped) is None
    assert wheel_problem(flipped) == "pkg/__init__.py does not match the hash in its RECORD"


def _blob(cache: Cache, wheel: Path) -> tuple[Path, str]:
    digest = sha256_file(wheel)
    tmp = cache.root / "incoming"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, tmp)
    return cache.store(tmp, digest), digest


def _check(path: Path, digest: str, whole: bool) -> WheelCheck:
    return WheelCheck(path, digest, path.stat().st_size, whole, "pkg", "pkg-1.0.whl", "http://x/p")


def test_the_pool_evicts_a_damaged_wheel_and_remembers_each_pass_at_its_depth(
    tmp_path: Path, good: Path
) -> None:
    cache = Cache(tmp_path / "cache")
    bad_wheel = _copy(good, tmp_path, "bad")
    raw = bytearray(bad_wheel.read_bytes())
    raw[raw.index(b"original")] ^= 0x20
    bad_wheel.write_bytes(bytes(raw))
    other = build_wheel(
        tmp_path / "other",
        "other",
        "2.0",
        payload_bytes=1 << 20,
        metadata=("License-Expression: MIT",),
    )
    (good_blob, good_sha), (bad_blob, bad_sha) = _blob(cache, good), _blob(cache, bad_wheel)
    other_blob, other_sha = _blob(cache, other)
    checks = WheelChecks(cache, workers=2)
    try:
        checks.submit(_check(good_blob, good_sha, whole=False))
        checks.submit(_check(other_blob, other_sha, whole=True))
        checks.wait()
        checks.submit(_check(bad_blob, bad_sha, whole=True))
        with pytest.raises(FetchError) as exc:
            checks.wait()
    finally:
        checks.close()
    message = str(exc.value)
    assert message.startswith("pkg: pkg-1.0.whl (http://x/p) is a damaged wheel: pkg/__init__.py")
    assert "removed it from the cache" in message and "\n" not in message
    assert not bad_blob.exists()  # evicted: the next build fetches it again
    assert passed(cache, good_sha, whole=False) and not passed(cache, good_sha, whole=True)
    assert passed(cache, other_sha, whole=True) and passed(cache, other_sha, whole=False)
    with zipfile.ZipFile(other) as zf:  # what the plan reads from the marker, not the wheel
        facts = recorded(cache, other_sha)
        assert facts is not None and facts.unpacked == sum(i.file_size for i in zf.infolist())
        assert facts.license == "MIT"
    assert recorded(cache, bad_sha) is None
    again = WheelChecks(cache)
    again.submit(_check(good_blob, good_sha, whole=False))
    again.submit(_check(other_blob, other_sha, whole=True))
    again.wait()  # both passed before: nothing runs, no worker starts
    assert again.checked == 0
    again.close()


def test_a_pool_closed_before_its_checks_ran_returns_at_once(tmp_path: Path, good: Path) -> None:
    cache = Cache(tmp_path / "cache")
    path, digest = _blob(cache, good)
    checks = WheelChecks(cache, workers=1)
    checks.submit(_check(path, digest, whole=True))
    checks.close()
    checks.submit(_check(path, digest, whole=False))  # after close: dropped
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as zf:
        assert zf.testzip() is None  # the wheel itself untouched
