"""verify: files neither list names are problems, damaged tarballs get one clear line, and every
form of the bundle (directory, .tar, .tar.gz) gives the same verdict."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import NAME
from support.cli import run

from verl_bundle.airgap.verify.bundle import verify, verify_tar

Built = tuple[Path, Path, dict[str, object]]


def _copy(built: Built, tmp_path: Path) -> Path:
    copy = tmp_path / NAME
    shutil.copytree(built[1], copy)
    return copy


def _tar(root: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w") as tf:
        tf.add(root, arcname=NAME)
    return dest


PLANTED = [
    "lib/sitecustomize.py",
    "lib/verl_bundle/airgap/__pycache__/verify.cpython-310.pyc",
    "wheels/evil-1.0-py3-none-any.whl",
    "notes.txt",
]


@pytest.mark.parametrize("planted", PLANTED)
def test_a_file_neither_list_names_is_a_problem(
    built_bundle: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    copy = _copy(built_bundle, tmp_path)
    (copy / planted).parent.mkdir(parents=True, exist_ok=True)
    (copy / planted).write_bytes(b"import os\n")
    for subject in (copy, _tar(copy, tmp_path / "planted.tar")):
        result = run(["verify", str(subject)], capsys)
        assert result.code == 3, subject  # damaged (the one exit table)
        failed = [line for line in result.out.splitlines() if line.startswith("FAILED: ")]
        assert failed == [
            f"FAILED: {planted}: not listed in SHA256SUMS or the manifest; a bundle holds only "
            "what it lists"
        ], (subject, result.out)
        report = verify(str(subject))
        assert report.extra == [planted] and not report.ok


def test_the_same_verdict_from_the_directory_and_each_tarball_form(
    built_bundle: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = _copy(built_bundle, tmp_path)
    req = copy / "requirements" / "01-torch.txt"
    req.write_text(req.read_text() + "evil==1.0\n")
    plain = _tar(copy, tmp_path / "b.tar")
    zipped = tmp_path / "b.tar.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    disguised = tmp_path / "gzip-inside.tar"  # the content decides, not the name
    disguised.write_bytes(zipped.read_bytes())
    verdicts = {}
    for subject in (copy, plain, zipped, disguised):
        report = verify(str(subject))
        verdicts[subject.name] = [p.line().split(":")[0] for p in report.problems]
        assert report.checked > 30
    assert set(map(tuple, verdicts.values())) == {("requirements/01-torch.txt",)}, verdicts


def test_damaged_tarballs_get_one_line(
    built_bundle: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = built_bundle[0]
    data = tarball.read_bytes()
    cases = {
        "cut.tar": data[: len(data) // 2],
        "garbage.tar": data[: len(data) - 1024] + b"junk" + b"\0" * 1020,
        "empty.tar": b"",
        "tiny.tar": data[:100],
    }
    for name, content in cases.items():
        bad = tmp_path / name
        bad.write_bytes(content)
        result = run(["verify", str(bad)], capsys)
        assert result.code == 3, name
        failed = [line for line in result.out.splitlines() if line.startswith("FAILED: ")]
        assert failed and failed[0].startswith(f"FAILED: {name}: damaged tar"), (name, failed)
        assert "Traceback" not in result.out + result.err


def test_large_members_hash_across_read_boundaries(tmp_path: Path) -> None:
    """Members larger than one read, and many small ones between them, each hashed exactly."""
    import hashlib

    root = tmp_path / NAME
    (root / "wheels").mkdir(parents=True)
    blobs = {
        "wheels/a.whl": bytes(range(256)) * (40 << 10),  # 10 MiB
        "wheels/b.whl": b"",
        "wheels/c.whl": b"x" * ((4 << 20) - 1),
        **{f"wheels/s{i}.whl": bytes([i]) * (i * 37) for i in range(1, 40)},
    }
    for rel, content in blobs.items():
        (root / rel).write_bytes(content)
    sums = "".join(f"{hashlib.sha256(c).hexdigest()}  {rel}\n" for rel, c in sorted(blobs.items()))
    (root / "SHA256SUMS").write_text(sums)
    tarball = _tar(root, tmp_path / "big.tar")
    report = verify(str(tarball))
    assert [p.path for p in report.problems] == ["manifest.json"]  # none was made here
    assert report.checked == len(blobs)
    data = bytearray(tarball.read_bytes())
    with tarfile.open(tarball) as tf:
        member = tf.getmember(f"{NAME}/wheels/c.whl")
    data[member.offset_data + member.size - 1] ^= 1  # the last byte of a member past 4 MiB
    (tmp_path / "bad.tar").write_bytes(bytes(data))
    report = verify(str(tmp_path / "bad.tar"))
    assert [p.path for p in report.problems] == ["manifest.json", "wheels/c.whl"]


@pytest.mark.parametrize("mark", [b"\x0b", b"\x0c", b"\x1c", b"\r"])
def test_a_newline_in_sha256sums_damaged_into_another_line_break_is_caught(
    built_bundle: Built, tmp_path: Path, mark: bytes
) -> None:
    """str.splitlines() would still see two lines; SHA256SUMS lines end at a newline alone."""
    copy = _copy(built_bundle, tmp_path)
    sums = copy / "SHA256SUMS"
    data = sums.read_bytes()
    sums.write_bytes(data.replace(b"\n", mark, 1))
    report = verify(str(copy))
    assert [p.path for p in report.problems] == ["SHA256SUMS"], report.problems


def test_a_sha256sums_line_damaged_in_its_separator_names_sha256sums(
    built_bundle: Built, tmp_path: Path
) -> None:
    """'<hash> !manifest.json' is not a sha256sum line: SHA256SUMS is named, not only the file
    it no longer lists."""
    copy = _copy(built_bundle, tmp_path)
    sums = copy / "SHA256SUMS"
    data = sums.read_bytes()
    at = data.index(b"  manifest.json\n") + 1
    sums.write_bytes(data[:at] + b"!" + data[at + 1 :])
    report = verify(str(copy))
    problems = {p.path: p.what for p in report.problems}
    assert "SHA256SUMS" in problems, report.problems
    assert "is not '<sha256>  <path>'" in problems["SHA256SUMS"]


def test_a_tarballs_own_sha256_named_checks_the_tarball_on_both_sides(
    built_bundle: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`verify NAME.tar.sha256` beside its tarball is the tarball's check (one verify,
    airgap/verify/check.py): not a damaged tar (the host's answer before), nor a one-volume set
    (the server's)."""
    sidecar = f"{built_bundle[0]}.sha256"
    host = run(["verify", sidecar], capsys)
    assert host.code == 0, host.out + host.err
    assert (
        host.out.strip()
        .splitlines()[-1]
        .endswith("files match SHA256SUMS and the manifest, through the tarball's .sha256")
    )
    server = subprocess.run(
        [sys.executable, "-I", "-m", "verl_bundle.airgap", "verify", sidecar],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert server.returncode == 0, server.stdout + server.stderr
    assert server.stdout.strip().splitlines()[-1] == host.out.strip().splitlines()[-1]


def _sidecar(tarball: Path) -> None:
    import hashlib

    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (tarball.parent / f"{tarball.name}.sha256").write_text(f"{digest}  {tarball.name}\n")


def test_a_tarball_that_matches_its_sha256_is_hashed_whole_and_each_file_on_request(
    built_bundle: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a .sha256 that matches, the whole tarball is the evidence (each byte hashed once)
    and the line says so; --each-file hashes every member too, on both sides. A tarball whose
    member differs from SHA256SUMS, with a .sha256 made for it (not a build's), passes the
    whole-file check and is named by --each-file: what the default proves is said, not more."""
    tarball = str(built_bundle[0])
    whole, each = verify(tarball), verify_tar(tarball, members=True)
    assert whole.ok and each.ok and whole.checked == each.checked
    assert whole.what.endswith("through the tarball's .sha256") and "through" not in each.what
    copy = _copy(built_bundle, tmp_path)
    wheel = next((copy / "wheels").glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    odd = _tar(copy, tmp_path / "odd.tar")
    _sidecar(odd)
    assert verify(str(odd)).ok  # the whole matches: the tarball is the one its .sha256 names
    for argv in (
        ["verify", "--each-file", str(odd)],
        [sys.executable, "-I", "-m", "verl_bundle.airgap", "verify", "--each-file", str(odd)],
    ):
        if argv[0] == "verify":
            result = run(argv, capsys)
            code, out = result.code, result.out
        else:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            code, out = proc.returncode, proc.stdout
        assert code == 3, out
        assert f"FAILED: wheels/{wheel.name}: altered: sha256" in out, out


def test_a_whole_match_with_a_member_sha256sums_does_not_list_hashes_each_member(
    built_bundle: Built, tmp_path: Path
) -> None:
    """The whole-file shortcut holds only when SHA256SUMS lists every member: a planted file
    (its .sha256 made anew) sends the check member by member, and the file is named."""
    copy = _copy(built_bundle, tmp_path)
    (copy / "lib" / "sitecustomize.py").write_text("import os\n")
    planted = _tar(copy, tmp_path / "planted.tar")
    _sidecar(planted)
    report = verify(str(planted))
    assert report.extra == ["lib/sitecustomize.py"] and not report.ok
    assert "through" not in report.what


def test_a_tarball_that_does_not_match_its_sha256_names_the_changed_file(
    built_bundle: Built, tmp_path: Path
) -> None:
    """The whole does not match: a second read hashes each member and names the one that
    changed, beside the .sha256's own line."""
    data = bytearray(built_bundle[0].read_bytes())
    with tarfile.open(built_bundle[0]) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith(".whl") and m.size)
    data[member.offset_data] ^= 1
    bad = tmp_path / built_bundle[0].name
    bad.write_bytes(bytes(data))
    shutil.copy(f"{built_bundle[0]}.sha256", f"{bad}.sha256")
    report = verify(str(bad))
    rel = member.name.split("/", 1)[1]
    assert sorted(p.path for p in report.problems) == sorted([bad.name, rel]), report.problems
