"""Building whole bundles of the cu118 profile from local indexes, and checking them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import NAME, Stack
from support.cli import Result, run
from support.stack import derived_profile

from verl_bundle.airgap.verify.bundle import unsafe_member
from verl_bundle.resolve.lock import read_lock


def build(
    stack: Stack, out: Path, cache: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> Result:
    result = run(stack.args("build", out, cache, *extra), capsys)
    assert result.code == 0, result.err
    return result


@pytest.fixture
def built(
    built_bundle: tuple[Path, Path, dict[str, object]],
) -> tuple[Path, Path, dict[str, object]]:
    return built_bundle


def test_build_writes_the_named_tarball_and_its_sha256(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = build(stack, tmp_path / "out", tmp_path / "cache", capsys)
    tarball = tmp_path / "out" / f"{NAME}.tar"
    assert result.last_line == str(tarball)
    assert tarball.is_file()
    side = (tmp_path / "out" / f"{NAME}.tar.sha256").read_text().split()
    assert side[1] == f"{NAME}.tar" and len(side[0]) == 64
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"{NAME}.tar",
        f"{NAME}.tar.sha256",
    ]
    assert "Known limit: not ready to train" in result.err  # the profile's limit is printed
    assert run(["verify", str(tarball)], capsys).code == 0


def test_manifest_lists_exactly_the_lock(built: tuple[Path, Path, dict[str, object]]) -> None:
    _, root, _ = built
    manifest = json.loads((root / "manifest.json").read_text())
    lock = read_lock(root / "pylock.toml")
    by_name = {f["name"]: f for f in manifest["files"]}
    assert sorted(by_name) == sorted(p.name for p in lock.packages)
    for pkg in lock.packages:
        entry = by_name[pkg.name]
        assert entry["location"] == pkg.location and entry["phase"] == pkg.phase
        if pkg.kind == "host-build":
            assert entry["built_from"] == {"file": pkg.file.filename, "sha256": pkg.file.sha256}
            assert entry["path"].endswith("-py3-none-any.whl")
        else:
            assert entry["sha256"] == pkg.file.sha256 and entry["size"] == pkg.file.size
            assert entry["path"].rsplit("/", 1)[1] == pkg.file.filename
        assert (root / entry["path"]).is_file()
    torch = by_name["torch"]
    assert torch["version"] == "2.1.2+cu118" and torch["location"] == "pytorch-cu118"
    assert torch["kind"] == "wheel" and torch["path"].startswith("wheels/")
    assert by_name["pip"]["kind"] == "bootstrap" and by_name["pip"]["path"].startswith("bootstrap/")
    assert manifest["target"] == {
        "python": "3.10",
        "python_tag": "cp310",
        "platform": "manylinux_2_17_x86_64",
        "arch": "x86_64",
        "glibc": "2.17",
        "cuda": "11.8",
    }
    assert [p["name"] for p in manifest["phases"]] == ["torch", "wheels", "flash-attn", "verl"]


def test_requirements_per_phase_are_hash_pinned(
    built: tuple[Path, Path, dict[str, object]],
) -> None:
    _, root, _ = built
    torch_req = (root / "requirements" / "01-torch.txt").read_text().splitlines()
    assert [line.split(" ")[0] for line in torch_req] == ["torch==2.1.2+cu118", "triton==2.1.0"]
    for req in (root / "requirements").iterdir():
        for line in req.read_text().splitlines():
            assert " --hash=sha256:" in line
    assert (root / "requirements" / "04-verl.txt").read_text().startswith("verl==0.2.0.post2 ")


def test_sha256sums_is_sha256sum_format(built: tuple[Path, Path, dict[str, object]]) -> None:
    _, root, _ = built
    proc = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_tar_has_one_top_directory_and_no_unsafe_names(
    built: tuple[Path, Path, dict[str, object]],
) -> None:
    tarball, _, _ = built
    with tarfile.open(tarball) as tf:
        members = tf.getmembers()
    assert members[0].name == NAME and members[0].isdir()
    # The payload leads (its place is known from the lock: bundle/early.py), then the two lists.
    names = [m.name for m in members if m.isfile()]
    lists = names.index(f"{NAME}/SHA256SUMS")
    assert names[lists + 1] == f"{NAME}/manifest.json"
    assert {n.split("/")[1] for n in names[:lists]} == {"bootstrap", "wheels"}
    assert all(n.split("/")[1] not in ("bootstrap", "wheels") for n in names[lists:])
    for m in members:
        assert unsafe_member(m, NAME) is None, m.name
        assert m.uid == 0 and m.uname == ""
    assert {m.name.split("/")[1] for m in members[1:]} >= {
        "wheels",
        "bootstrap",
        "install.sh",
        "lib",
    }


def test_verify_names_the_one_file_with_a_changed_byte(
    built: tuple[Path, Path, dict[str, object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, root, _ = built
    copy = tmp_path / NAME
    shutil.copytree(root, copy)
    assert run(["verify", str(copy)], capsys).code == 0
    files = sorted(p for p in copy.rglob("*") if p.is_file())
    assert len(files) > 30
    for path in files:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        result = run(["verify", str(copy)], capsys)
        rel = path.relative_to(copy).as_posix()
        assert result.code == 3, rel  # damaged
        failed = [line for line in result.out.splitlines() if line.startswith("FAILED: ")]
        assert failed and all(line.startswith(f"FAILED: {rel}:") for line in failed), (rel, failed)
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    assert run(["verify", str(copy)], capsys).code == 0


def test_verify_of_a_missing_file_and_of_the_tarball(
    built: tuple[Path, Path, dict[str, object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball, root, _ = built
    copy = tmp_path / NAME
    shutil.copytree(root, copy)
    (copy / "requirements" / "01-torch.txt").unlink()
    result = run(["verify", str(copy), "--json"], capsys)
    assert result.code == 3
    doc = json.loads(result.out)
    assert doc["ok"] is False and doc["result"]["ok"] is False
    assert doc["result"]["problems"] == [
        {"path": "requirements/01-torch.txt", "problem": "missing"}
    ]
    # One flipped byte inside a wheel inside the tarball: verify names that member.
    name = "torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl"
    with tarfile.open(tarball) as tf:
        member = tf.getmember(f"{NAME}/wheels/{name}")
    data = bytearray(tarball.read_bytes())
    data[member.offset_data + member.size // 2] ^= 0x01
    bad = tmp_path / f"{NAME}.tar"
    bad.write_bytes(bytes(data))
    result = run(["verify", str(bad)], capsys)
    assert result.code == 3
    failed = [line for line in result.out.splitlines() if line.startswith("FAILED")]
    assert failed[0].startswith(f"FAILED: wheels/{name}: altered"), failed
    # ... and the tarball no longer matches its .sha256 file when that is beside it.
    shutil.copy(f"{tarball}.sha256", f"{bad}.sha256")
    result = run(["verify", str(bad)], capsys)
    assert f"FAILED: {bad.name}: does not match {bad.name}.sha256" in result.out
    # A byte flipped in a member's header makes the rest unreadable: one clear line.
    data[member.offset_data - 400] ^= 0x40
    bad.write_bytes(bytes(data))
    result = run(["verify", str(bad)], capsys)
    assert result.code == 3
    assert "damaged tar" in result.out


def test_cached_rebuild_downloads_nothing(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    first = json.loads(build(stack, tmp_path / "a", cache, capsys, "--json").out)["result"]
    assert first["downloaded"]["files"] == first["packages"]
    lock_path = tmp_path / "a.toml"
    assert (
        run(
            [
                "lock",
                "--profile",
                "cu118-legacy",
                *stack.mirrors(),
                "-o",
                str(lock_path),
                "--cache-dir",
                str(cache),
            ],
            capsys,
        ).code
        == 0
    )
    stack.reset()
    again = json.loads(
        build(stack, tmp_path / "b", cache, capsys, "--json", "--lock", str(lock_path)).out
    )["result"]
    assert again["downloaded"] == {"files": 0, "bytes": 0}
    assert again["cached_files"] == again["packages"]
    assert again["written_as_fetched"] == 0  # nothing to wait for: written after the plan
    assert again["lock"] == str(lock_path)
    assert [r for s in stack.servers() for r in s.requests] == []  # not even an index page
    # The same build as its own process imports no HTTP client: nothing is fetched.
    proc = subprocess.run(
        [
            *(sys.executable, "-X", "importtime", "-m", "verl_bundle"),
            *stack.args("build", tmp_path / "c", cache, "--lock", str(lock_path)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert "verl_bundle.pipeline" in imported
    assert not imported & {"requests", "urllib3"}
    a = (tmp_path / "a" / f"{NAME}.tar").read_bytes()
    b = (tmp_path / "b" / f"{NAME}.tar").read_bytes()
    assert len(a) == len(b)


def test_rebuild_with_one_pin_changed_downloads_only_that_file(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    one = derived_profile(
        tmp_path, "requirements = [\n", 'requirements = [\n    "einops==1.0.0",\n'
    )
    build(stack, tmp_path / "a", cache, capsys, "--profile", str(one))
    two = derived_profile(
        tmp_path, "requirements = [\n", 'requirements = [\n    "einops==1.1.0",\n'
    )
    stack.reset()
    doc = json.loads(
        build(stack, tmp_path / "b", cache, capsys, "--profile", str(two), "--json").out
    )["result"]
    assert doc["downloaded"]["files"] == 1
    ours = [
        r.path for r in stack.pypi.file_requests() if r.path.endswith(".whl") and "einops" in r.path
    ]
    assert ours and all("einops-1.1.0" in p for p in ours)


def test_failed_fetch_leaves_no_tarball(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.pypi.faults.corrupt.add("verl-0.2.0.post2-py3-none-any.whl")
    out = tmp_path / "out"
    args = [
        "build",
        "--profile",
        "cu118-legacy",
        *stack.mirrors(),
        "-o",
        str(out),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    result = run(args, capsys)
    assert result.code == 1
    line = result.err.strip().splitlines()[-1]
    assert line.startswith("error: verl:") and "sha256 mismatch" in line and "location pypi" in line
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("compress", ["gz", "zstd"])
def test_compressed_bundles_verify(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], compress: str
) -> None:
    if compress == "zstd" and shutil.which("zstd") is None:
        pytest.skip("the zstd command is not installed")
    result = build(stack, tmp_path / "out", tmp_path / "cache", capsys, "--compress", compress)
    suffix = {"gz": ".tar.gz", "zstd": ".tar.zst"}[compress]
    assert result.last_line.endswith(suffix)
    assert run(["verify", result.last_line], capsys).code == 0


def test_build_json_shape(built: tuple[Path, Path, dict[str, object]]) -> None:
    _, _, doc = built
    assert sorted(doc) == sorted(
        [
            "bundle",
            "sha256",
            "size",
            "files",
            "profile",
            "target",
            "lock",
            "packages",
            "downloaded",
            "cached_files",
            "written_as_fetched",
            "host_built",
            "compiled",
            "interpreter",
            "volumes",
            "sidecar",
            "signature",
            "gate",
            "delta",
            "notes",
        ]
    )
    # a whole, unsigned, full bundle: no gate to print
    assert doc["volumes"] == [] and doc["signature"] is None and doc["delta"] is None
    assert doc["gate"] == []
    assert doc["sidecar"] == str(doc["bundle"]) + ".sha256"
    assert doc["profile"] == "cu118-legacy" and doc["lock"] == "resolved" and doc["host_built"] == 2
    assert doc["interpreter"] is None  # the profile does not ask for a bundled CPython
    # Every wheel as locked went into the tarball as its download ended (bundle/early.py).
    lock = read_lock(built[1] / "pylock.toml")
    assert doc["written_as_fetched"] == sum(p.kind == "wheel" for p in lock.packages) > 0
    assert doc["compiled"] == []  # flash-attn comes as the prebuilt wheel: nothing to compile
    assert isinstance(doc["size"], int) and isinstance(doc["notes"], list)


def test_a_lock_made_upstream_builds_against_intranet_mirrors(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock made against one set of locations builds against mirrors of them: each locked file
    is looked up by name on the mirror, and must still have the locked hash."""
    from support.pkgindex import Server

    lock_path = tmp_path / "upstream.toml"
    assert (
        run(
            ["lock", "--profile", "cu118-legacy", *stack.mirrors(), "-o", str(lock_path)], capsys
        ).code
        == 0
    )
    mirrors = [
        Server(stack.dirs.pytorch).start(),
        Server(stack.dirs.pypi).start(),  # an HTML-only mirror, like many intranet ones
        Server(stack.dirs.files).start(),
    ]
    try:
        pt, pypi, files = mirrors
        args = ["--mirror", f"pypi={pypi.index_url}", "--mirror", f"pytorch-cu118={pt.index_url}"]
        args += [
            "--mirror",
            f"flash-attn-releases={files.url}",
            "--mirror",
            f"vllm-releases={files.url}",
        ]
        stack.reset()
        out = tmp_path / "out"
        result = run(
            [
                "build",
                "--profile",
                "cu118-legacy",
                *args,
                "--lock",
                str(lock_path),
                "-o",
                str(out),
                "--cache-dir",
                str(tmp_path / "c"),
            ],
            capsys,
        )
        assert result.code == 0, result.err
        assert [r for s in stack.servers() for r in s.requests] == []  # the upstream is not asked
        fetched = {r.path.rsplit("/", 1)[-1] for s in mirrors for r in s.file_requests()}
        assert "torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl" in fetched
        assert "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl" in fetched
        assert run(["verify", result.last_line], capsys).code == 0
        # A mirror serving another file under the locked name is refused.
        pypi.faults.corrupt.add("einops-1.1.0-py3-none-any.whl")
        bad = run(
            [
                "build",
                "--profile",
                "cu118-legacy",
                *args,
                "--lock",
                str(lock_path),
                "-o",
                str(tmp_path / "o2"),
                "--cache-dir",
                str(tmp_path / "c2"),
            ],
            capsys,
        )
        assert bad.code == 1 and "einops" in bad.err and "sha256 mismatch" in bad.err
    finally:
        for s in mirrors:
            s.stop()
