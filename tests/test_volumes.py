"""Split volumes (build --split-size): at most SIZE each, one NAME.tar.sha256 that the real
sha256sum -c checks volume by volume and as a joined stream, a join that `tar x` reads, and the
server's check (airgap/verify/volumes.py) naming a damaged, missing or stray volume."""

from __future__ import annotations

import fnmatch
import hashlib
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import Stack, shared_build
from support.crossing import NAME, Pair, result, verl_bundle
from support.shared import Value

from verl_bundle.airgap.errors import UsageError
from verl_bundle.airgap.verify.volumes import is_volume, parse_size, verify_volumes, volumes_glob

SIZE = 4_000_000


@pytest.fixture(scope="module")
def split(
    pinned_pair: Pair, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, object]]:
    """Bundle B as volumes of at most 4 MB, once per run (read-only): its folder and JSON."""

    def build(stack: Stack, out: Path) -> Value:
        proc = verl_bundle(
            *stack.args(
                "build",
                out,
                pinned_pair.cache,
                "--profile",
                str(pinned_pair.new_profile),
                "--lock",
                str(lock_of(pinned_pair, out)),
            ),
            "--split-size",
            "4M",
            "--json",
        )
        assert proc.returncode == 0, proc.stderr
        return {"out": str(out), "result": result(proc)}

    built = shared_build(tmp_path_factory, "volumes.split", build)
    assert isinstance(built, dict) and isinstance(built["result"], dict)
    return Path(str(built["out"])), built["result"]


def lock_of(pair: Pair, out: Path) -> Path:
    """B's own lock, taken out of B: the split bundle is then byte for byte B."""
    with tarfile.open(pair.new) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/pylock.toml"))
        data = tf.extractfile(member).read()  # type: ignore[union-attr]
    path = out / "pylock.toml"
    path.write_bytes(data)
    return path


def sha256sum(folder: Path, listing: str) -> subprocess.CompletedProcess[str]:
    # the documented command, as an operator types it
    return subprocess.run(
        ["sh", "-c", f"cat {NAME}.tar.[0-9][0-9][0-9] | sha256sum -c {shlex.quote(listing)}"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_volumes_are_at_most_the_size_and_join_to_the_same_tarball(
    split: tuple[Path, dict[str, object]], pinned_pair: Pair, tmp_path: Path
) -> None:
    out, doc = split
    volumes = sorted(out.glob(f"{NAME}.tar.[0-9][0-9][0-9]"))
    assert [v.name for v in volumes] == [f"{NAME}.tar.{i:03d}" for i in range(len(volumes))]
    assert len(volumes) >= 3 and all(v.stat().st_size <= SIZE for v in volumes)
    assert all(v.stat().st_size == SIZE for v in volumes[:-1])
    assert not (out / f"{NAME}.tar").exists()
    joined = b"".join(v.read_bytes() for v in volumes)
    assert joined == pinned_pair.new.read_bytes()  # the same lock: the same bytes
    listed = doc["volumes"]
    assert isinstance(listed, list) and [v["path"] for v in listed] == [str(v) for v in volumes]
    listing = (out / f"{NAME}.tar.sha256").read_text().splitlines()
    assert (
        listing[0]
        == pinned_pair.new.with_name(pinned_pair.new.name + ".sha256").read_text().split()[0]
        + "  -"
    )
    check = sha256sum(out, f"{NAME}.tar.sha256")
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines() == ["-: OK"] + [f"{v.name}: OK" for v in volumes]
    # the join as the docs show it
    (tmp_path / "x").mkdir()
    join = f"cat {shlex.quote(str(out))}/{NAME}.tar.[0-9][0-9][0-9] | tar x -C {shlex.quote(str(tmp_path / 'x'))}"
    untar = subprocess.run(["sh", "-c", join], timeout=120)
    assert untar.returncode == 0 and (tmp_path / "x" / NAME / "install.sh").is_file()


def test_the_text_ends_with_the_list_and_says_how_to_check(
    stack: Stack, pinned_pair: Pair, tmp_path: Path
) -> None:
    proc = verl_bundle(
        *stack.args(
            "build",
            tmp_path,
            pinned_pair.cache,
            "--profile",
            str(pinned_pair.new_profile),
            "--lock",
            str(lock_of(pinned_pair, tmp_path)),
        ),
        "--split-size",
        "8M",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == str(tmp_path / f"{NAME}.tar.sha256")
    assert f"`cat {NAME}.tar.[0-9][0-9][0-9] | sha256sum -c {NAME}.tar.sha256`" in proc.stdout


def copy_set(out: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in out.glob(f"{NAME}.tar*"):
        shutil.copy(f, dest)
    return dest


def test_a_damaged_or_missing_volume_is_named(
    split: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    folder = copy_set(split[0], tmp_path / "copy")
    assert verify_volumes(str(folder / f"{NAME}.tar.sha256")).ok
    second = folder / f"{NAME}.tar.001"
    data = bytearray(second.read_bytes())
    data[100] ^= 1
    second.write_bytes(bytes(data))
    (folder / f"{NAME}.tar.002").unlink()
    report = verify_volumes(str(folder / f"{NAME}.tar.000"))
    assert [p for p, _ in report.problems] == [f"{NAME}.tar.001", f"{NAME}.tar.002"]
    assert report.problems[0][1].startswith("damaged: sha256 ")
    assert report.problems[1][1] == "missing: copy this volume again"
    # sha256sum names them too
    check = sha256sum(folder, f"{NAME}.tar.sha256")
    assert check.returncode == 1
    assert (
        f"{NAME}.tar.001: FAILED" in check.stdout
        and f"{NAME}.tar.002: FAILED open or read" in check.stdout
    )


def test_a_stray_volume_is_named_and_the_host_verify_takes_a_volume_set(
    split: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    folder = copy_set(split[0], tmp_path / "copy")
    proc = verl_bundle("verify", str(folder / f"{NAME}.tar.sha256"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    volumes = len(list(folder.glob(f"{NAME}.tar.[0-9][0-9][0-9]")))
    assert f"OK: {volumes} volumes match their list" in proc.stdout  # not "files"
    (folder / f"{NAME}.tar.999").write_bytes(b"left from another build")
    listing = str(folder / f"{NAME}.tar.sha256")
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "verl_bundle.airgap", "verify", listing],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3
    assert f"FAILED: {NAME}.tar.999: not in {NAME}.tar.sha256: remove it" in proc.stdout


@pytest.mark.parametrize("stray", [".0001", ".000.orig", ".1"])
def test_a_stray_that_a_loose_glob_would_join_is_named_too(
    split: tuple[Path, dict[str, object]], tmp_path: Path, stray: str
) -> None:
    """NAME.tar.0001 or NAME.tar.000.orig is no volume, but `cat NAME.tar.[0-9]*` (the glob
    the docs once showed) would join it in: named on both sides; the three-digit glob every
    printed command now uses leaves it out, so the gate itself still passes."""
    folder = copy_set(split[0], tmp_path / "copy")
    (folder / f"{NAME}.tar{stray}").write_bytes(b"a copy left beside the set")
    report = verify_volumes(str(folder / f"{NAME}.tar.sha256"))
    assert report.problems == [
        (f"{NAME}.tar{stray}", f"not in {NAME}.tar.sha256: remove it (the join would take it in)")
    ]
    proc = verl_bundle("verify", str(folder / f"{NAME}.tar.sha256"))
    assert proc.returncode == 3 and f"{NAME}.tar{stray}: not in" in proc.stdout
    assert sha256sum(folder, f"{NAME}.tar.sha256").returncode == 0


def test_a_delta_splits_too(stack: Stack, pinned_pair: Pair, tmp_path: Path) -> None:
    proc = verl_bundle(
        *stack.args(
            "build", tmp_path, pinned_pair.cache, "--profile", str(pinned_pair.new_profile)
        ),
        "--base",
        str(pinned_pair.old),
        "--split-size",
        "1M",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = result(proc)
    volumes = doc["volumes"]
    assert isinstance(volumes, list) and volumes
    assert all(v["path"].startswith(str(tmp_path / f"{NAME}-delta.tar.")) for v in volumes)
    assert doc["delta"]["carried_files"] == 1  # type: ignore[index]
    assert verify_volumes(str(tmp_path / f"{NAME}-delta.tar.sha256")).ok


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2G", 2_000_000_000),
        ("4.7G", 4_700_000_000),
        ("700M", 700_000_000),
        ("1.5GiB", 1_610_612_736),
        ("2000000", 2_000_000),
    ],
)
def test_sizes_are_decimal_unless_binary_is_asked(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["two gigs", "1K", "-3G", ""])
def test_a_bad_size_is_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"--split-size"):
        parse_size(text)


def _relisted(folder: Path, edit: str) -> Path:
    """The set's list re-made as a careless (or hostile) signer could: every volume's digest
    still right, the `-` line the digest of the join in the list's own order."""
    listing = folder / f"{NAME}.tar.sha256"
    lines = listing.read_text().splitlines()[1:]
    if edit == "swapped":
        lines[0], lines[1] = lines[1], lines[0]
    else:  # a file beside the set, listed as a volume
        other = folder / "other.bin"
        other.write_bytes(b"not a volume")
        lines.append(f"{hashlib.sha256(other.read_bytes()).hexdigest()}  other.bin")
    joined = hashlib.sha256()
    for line in lines:
        joined.update((folder / line.split()[1]).read_bytes())
    listing.write_text("\n".join([f"{joined.hexdigest()}  -", *lines]) + "\n")
    return listing


@pytest.mark.parametrize("edit", ["swapped", "foreign"])
def test_a_list_that_names_other_than_the_volumes_in_order_is_refused(
    split: tuple[Path, dict[str, object]], tmp_path: Path, edit: str
) -> None:
    """The list is read in its own order; the printed join, `cat NAME.tar.[0-9][0-9][0-9]`, in
    name order, and only three-digit names. A list naming the volumes out of order, or a file
    that is no volume, would have the server check one stream while the operator extracts
    another (the gate's `sha256sum -c` fails on `-`): the server refuses it as build never
    writes it (airgap/verify/volumes.py: one naming, written and read)."""
    folder = copy_set(split[0], tmp_path / "copy")
    listing = _relisted(folder, edit)
    report = verify_volumes(str(listing))
    assert not report.ok
    ((what, line),) = report.problems
    assert what == listing.name and "belongs: a volume set is" in line, line
    assert sha256sum(folder, listing.name).returncode == 1  # the gate disagrees with such a list
    proc = verl_bundle("verify", str(listing))
    assert proc.returncode == 3 and "belongs" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("entry", "volume"),
    [
        (f"{NAME}.tar.000", True),
        (f"{NAME}.tar.999", True),
        (f"{NAME}.tar.000\n", False),  # `$` would take a trailing newline
        (f"{NAME}.tar.\u0660\u0660\u0661", False),  # `\d` would take Arabic-Indic digits
        (f"{NAME}.tar.0001", False),
        ("other.tar.000", False),
    ],
)
def test_a_volume_is_what_the_three_digit_glob_joins(entry: str, volume: bool) -> None:
    assert is_volume(entry, f"{NAME}.tar") is volume
    assert fnmatch.fnmatchcase(entry, volumes_glob(f"{NAME}.tar")) is volume
