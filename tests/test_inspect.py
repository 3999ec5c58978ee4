"""`verl-bundle inspect`: what an approver asks, read from a real bundle without extracting it
(a tarball, a volume set, a directory), and what changed since the bundle approved before."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import Stack
from support.airgap import extract
from support.crossing import NAME, Pair, allowed_signers, ssh_key, verl_bundle

from verl_bundle.airgap.contract import manifest as mf


def inspect(*args: str) -> tuple[int, str, dict[str, object]]:
    text = verl_bundle("inspect", *args)
    doc = verl_bundle("inspect", *args, "--json")
    assert text.returncode == doc.returncode, text.stderr + doc.stderr
    envelope = json.loads(doc.stdout)
    assert envelope["command"] == "inspect" and envelope["schema"] == 1
    return text.returncode, text.stdout, envelope["result"]


def test_inspect_says_what_an_approver_asks_and_what_changed(pinned_pair: Pair) -> None:
    code, text, doc = inspect(str(pinned_pair.new), "--base", str(pinned_pair.old))
    assert code == 0
    with tarfile.open(pinned_pair.new) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/" + mf.MANIFEST))
        m = mf.loads(tf.extractfile(member).read().decode())  # type: ignore[union-attr]
    lock = next(g.sha256 for g in m.generated if g.path == mf.LOCK)
    assert doc["name"] == NAME and doc["profile"] == "pinned"
    assert doc["lock_sha256"] == lock and f"pylock.toml sha256 {lock}" in text
    assert doc["files"] == len(m.files) and doc["size"] == pinned_pair.new.stat().st_size
    assert doc["changes"] == [{"name": "einops", "old": "1.0.0", "new": "1.1.0"}]
    assert "changes against " + NAME + ": 1 changed, 0 added, 0 removed" in text
    assert "  ~ einops 1.0.0 -> 1.1.0" in text
    assert "target:    Python 3.10 (cp310), manylinux_2_17_x86_64, CUDA 11.8" in text
    # The bundle's date and the lock's, each named: the lock may be days older than the build.
    # The bundle's is its file's time, so that one lock still builds one tarball, byte for byte.
    import os

    os.utime(pinned_pair.new, (1764859800, 1764859800))
    code, text, doc = inspect(str(pinned_pair.new), "--base", str(pinned_pair.old))
    assert f"written:   2025-12-04T14:50:00Z by {m.created_by} (the bundle file's time)" in text
    assert f"locked:    {m.created} (when the lock was resolved)" in text
    assert "made:" not in text
    assert doc["written"] == "2025-12-04T14:50:00Z" and doc["created"] == m.created
    assert "signer:    not signed" in text
    groups = doc["licences"]
    assert isinstance(groups, list)
    review = [g for g in groups if not g["open"]]
    assert review[0]["licence"] in ("unknown", "NVIDIA Proprietary Software")
    assert any(g["licence"] == "NVIDIA Proprietary Software" for g in review)
    assert (
        "NVIDIA Proprietary Software (1; NVIDIA's own licence: read its terms): cupy-cuda11x 12.1.0"
        in text
    )
    assert text.strip().splitlines()[-1] == str(pinned_pair.new)


def test_inspect_reads_a_volume_set_a_directory_and_a_delta(
    stack: Stack, pinned_pair: Pair, tmp_path: Path
) -> None:
    args = stack.args(
        "build", tmp_path, pinned_pair.cache, "--profile", str(pinned_pair.new_profile)
    )
    proc = verl_bundle(*args, "--base", str(pinned_pair.old), "--split-size", "1M")
    assert proc.returncode == 0, proc.stderr
    code, text, doc = inspect(str(tmp_path / f"{NAME}-delta.tar.sha256"))
    assert code == 0, text
    assert doc["delta"] == {"base": NAME, "omitted": int(str(doc["files"])) - 1}
    assert doc["volumes"] and f"(a delta of {NAME})" in text.splitlines()[0]
    with tarfile.open(pinned_pair.old) as tf:
        tf.extractall(tmp_path / "x", filter="data")
    code, _, doc = inspect(str(tmp_path / "x" / NAME))
    assert code == 0 and doc["size"] == 0 and doc["name"] == NAME


def test_inspect_names_the_signer_and_checks_it_when_asked(
    stack: Stack, pinned_pair: Pair, tmp_path: Path
) -> None:
    key = ssh_key(tmp_path, "alice")
    args = stack.args(
        "build", tmp_path / "out", pinned_pair.cache, "--profile", str(pinned_pair.new_profile)
    )
    assert verl_bundle(*args, "--sign", str(key)).returncode == 0
    tarball = tmp_path / "out" / f"{NAME}.tar"
    code, text, doc = inspect(str(tarball))
    assert code == 0 and doc["signer"]["state"] == "unchecked"  # type: ignore[index]
    assert "signer:    signed with ED25519 key SHA256:" in text
    good = allowed_signers(tmp_path, ("alice", key))
    code, text, doc = inspect(str(tarball), "--allowed-signers", str(good))
    assert code == 0 and "signer:    manifest.json signed by alice" in text
    other = tmp_path / "other"
    other.mkdir()
    bad = allowed_signers(other, ("mallory", ssh_key(other, "mallory")))
    code, text, doc = inspect(str(tarball), "--allowed-signers", str(bad))
    assert code == 3 and doc["signer"]["state"] == "refused"  # type: ignore[index]


@pytest.mark.parametrize("what", ["missing", "not-a-bundle"])
def test_a_path_that_is_no_bundle_is_one_line(tmp_path: Path, what: str) -> None:
    path = tmp_path / "thing.tar"
    if what == "not-a-bundle":
        with tarfile.open(path, "w") as tf:
            tf.add(shutil.which("sh") or "/bin/sh", arcname="top/sh")
    proc = verl_bundle("inspect", str(path))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert str(path) in line


def _append(tarball: Path, dest: Path, member: str, data: bytes) -> Path:
    """A copy of `tarball` with one more member (as `tar rf` appends it)."""
    import io

    shutil.copy(tarball, dest)
    with tarfile.open(dest, "a") as tf:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return dest


def test_a_member_named_twice_is_refused_by_inspect_and_by_both_verifies(
    pinned_pair: Pair, tmp_path: Path
) -> None:
    """A second NAME/manifest.json appended: inspect read the first (and called it signed),
    `tar x` keeps the second. inspect, the host's verify and the server's verify refuse it,
    each in one line naming the member, exit 3; also when SHA256SUMS is re-made to match."""
    import hashlib

    from support.crossing import python_lib

    with tarfile.open(pinned_pair.new) as tf:
        manifest = tf.extractfile(f"{NAME}/{mf.MANIFEST}").read()  # type: ignore[union-attr]
        sums = tf.extractfile(f"{NAME}/{mf.SUMS}").read().decode()  # type: ignore[union-attr]
    other = manifest.replace(b'"purpose": "', b'"purpose": "APPENDED ')
    twice = _append(pinned_pair.new, tmp_path / f"{NAME}.tar", f"{NAME}/{mf.MANIFEST}", other)
    proc = verl_bundle("inspect", str(twice))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"{mf.MANIFEST} is in the tarball twice (tar x keeps the later one)" in line
    # SHA256SUMS re-made for the appended manifest and appended too: no list can tell
    resummed = "\n".join(
        f"{hashlib.sha256(other).hexdigest()}  {mf.MANIFEST}"
        if row.endswith(f"  {mf.MANIFEST}")
        else row
        for row in sums.split("\n")
    )
    both = _append(twice, tmp_path / "both.tar", f"{NAME}/{mf.SUMS}", resummed.encode())
    assert verl_bundle("inspect", str(both)).returncode == 3
    host = verl_bundle("verify", str(both))
    assert host.returncode == 3
    assert f"FAILED: {NAME}/{mf.MANIFEST}: unsafe tar member: in the tarball twice" in host.stdout
    extracted = tmp_path / "x"
    with tarfile.open(pinned_pair.new) as tf:
        tf.extractall(extracted, filter="data")
    server = python_lib(extracted / NAME, "verify", str(both))
    assert server.returncode == 3, server.stdout + server.stderr
    assert f"FAILED: {NAME}/{mf.SUMS}: unsafe tar member: in the tarball twice" in server.stdout


@pytest.mark.parametrize("cut", ["in-a-member", "at-a-member"])
def test_a_tarball_cut_short_is_refused_by_inspect(
    pinned_pair: Pair, tmp_path: Path, cut: str
) -> None:
    """inspect read only the headers before the payload: a copy cut short showed its contents
    and exited 0 while verify said it is damaged. Now exit 3, one line; also when the cut falls
    exactly between two members (tarfile then reads it as complete)."""
    data = pinned_pair.new.read_bytes()
    with tarfile.open(pinned_pair.new) as tf:
        members = tf.getmembers()
    big = max(members, key=lambda m: m.size)
    at = big.offset_data + big.size // 2 if cut == "in-a-member" else big.offset
    short = tmp_path / f"{NAME}.tar"
    short.write_bytes(data[:at])
    proc = verl_bundle("inspect", str(short))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "cut short" in line and str(short) in line, line
    json_doc = verl_bundle("inspect", str(short), "--json")
    assert json_doc.returncode == 3


def test_an_empty_signature_is_checked_and_refused_as_install_sh_refuses_it(
    pinned_pair: Pair, tmp_path: Path
) -> None:
    """A manifest.json.sig that is there but empty is a signature that fails, not no
    signature: inspect refuses it as install.sh --allowed-signers and the installed verifier
    do (one lookup, airgap/verify/signature.py's `signature_in`)."""
    root = extract(pinned_pair.old, tmp_path / "x")
    (root / mf.SIGNATURE).write_bytes(b"")
    good = allowed_signers(tmp_path, ("alice", ssh_key(tmp_path, "alice")))
    code, text, doc = inspect(str(root), "--allowed-signers", str(good))
    assert code == 3, text
    assert doc["signer"]["state"] == "refused"  # type: ignore[index]
