"""Locking the cu118 profile against local indexes shaped like the real ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import Stack
from support.cli import run
from support.pkgindex import Server, make_certificates
from support.stack import derived_profile

from verl_bundle.profile.target import Target
from verl_bundle.resolve.lock import read_lock


def lock(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[Path, str]:
    out = tmp_path / "pylock.toml"
    result = run(stack.args("lock", out, tmp_path / "c", *extra), capsys)
    assert result.code == 0, result.err
    assert result.last_line == str(out)
    return out, result.err


def test_lock_is_for_the_target_not_this_host(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sys.version_info[:2] != (3, 10), (
        "this test shows cross-target resolution on a non-3.10 host"
    )
    path, _ = lock(stack, tmp_path, capsys)
    lk = read_lock(path)
    assert lk.target == Target((3, 10), "manylinux_2_17_x86_64")
    for pkg in lk.packages:
        if pkg.file.is_wheel:
            assert lk.target.wheel_rank(pkg.file.filename) is not None, pkg.file.filename
    # Of four transformers wheels (cp310 2_17, cp310 2_28, cp311, pure) the best for cp310/2_17.
    tf = lk.package("transformers")
    assert tf is not None
    assert (
        tf.file.filename
        == "transformers-4.40.0-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    )


def test_one_file_per_package_with_hash_size_and_location(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = lock(stack, tmp_path, capsys)
    text = path.read_text()
    lk = read_lock(path)  # read_lock refuses a package with more than one wheel
    names = [p.name for p in lk.packages]
    assert len(names) == len(set(names))
    assert text.count("[[packages]]") == len(names)
    for p in lk.packages:
        assert len(p.file.sha256) == 64
        assert p.file.size and p.file.size > 0
        assert p.location in ("pypi", "pytorch-cu118", "flash-attn-releases", "vllm-releases")
    # pip bootstraps the server and is not installed by a phase.
    pip = lk.package("pip")
    assert pip is not None and pip.role == "bootstrap" and pip.phase == "bootstrap"


def test_torch_comes_only_from_the_pytorch_index(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default index serves torch 2.3.0 and a plain 2.1.2; neither may be chosen."""
    lk = read_lock(lock(stack, tmp_path, capsys)[0])
    for name, version in (
        ("torch", "2.1.2+cu118"),
        ("triton", "2.1.0"),
        ("xformers", "0.0.23.post1+cu118"),
    ):
        pkg = lk.package(name)
        assert pkg is not None
        assert pkg.version == version
        assert pkg.location == "pytorch-cu118"
        assert pkg.file.url.startswith(stack.pytorch.url), pkg.file.url
    assert lk.package("torch").file.filename.endswith("-cp310-cp310-linux_x86_64.whl")  # type: ignore[union-attr]


def test_direct_artifacts_replace_what_the_resolver_picked(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lk = read_lock(lock(stack, tmp_path, capsys)[0])
    flash = lk.package("flash-attn")
    vllm = lk.package("vllm")
    assert flash is not None and vllm is not None
    assert (
        flash.file.filename
        == "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    )
    assert flash.location == "flash-attn-releases" and flash.kind == "wheel"
    assert vllm.file.filename == "vllm-0.3.1+cu118-cp310-cp310-manylinux1_x86_64.whl"
    # vllm's metadata comes from the profile: cupy for CUDA 11, not the CUDA 12 one PyPI's lists.
    assert lk.package("cupy-cuda11x") is not None
    assert lk.package("cupy-cuda12x") is None
    # With the prebuilt wheel, nothing is built on the server and no build deps are added.
    assert not [p for p in lk.packages if p.kind == "sdist" or p.role == "build-dep"]


def test_pure_sdists_are_marked_for_a_host_build(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lk = read_lock(lock(stack, tmp_path, capsys)[0])
    host = sorted(p.name for p in lk.packages if p.kind == "host-build")
    assert host == ["antlr4-python3-runtime", "pylatexenc"]


def test_upload_cutoff_applies_to_the_default_index(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lk = read_lock(lock(stack, tmp_path, capsys)[0])
    assert lk.exclude_newer == "2025-03-01T00:00:00Z"
    assert lk.package("transformers").version == "4.40.0"  # type: ignore[union-attr]  # 5.0.0 is newer


def test_cutoff_is_not_applied_where_the_index_gives_no_upload_times(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html_only = Server(stack.dirs.pypi).start()  # PEP 503 HTML: no upload times
    try:
        out = tmp_path / "l.toml"
        result = run(stack.args("lock", out, tmp_path / "c", pypi=html_only.index_url), capsys)
        assert result.code == 0, result.err
        assert "gives no upload times" in result.err
        assert read_lock(out).exclude_newer is None
    finally:
        html_only.stop()


def test_missing_prebuilt_wheel_falls_back_to_the_sdist_and_its_build_deps(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.files.faults.missing.add(
        "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    )
    path, err = lock(stack, tmp_path, capsys)
    assert "flash-attn" in err and "not available" in err
    lk = read_lock(path)
    flash = lk.package("flash-attn")
    assert flash is not None
    assert flash.kind == "sdist" and flash.file.filename == "flash_attn-2.5.8.tar.gz"
    assert flash.phase == "flash-attn"
    deps = {p.name for p in lk.packages if p.role == "build-dep"}
    assert {"setuptools", "wheel", "packaging", "ninja", "psutil", "torch"} <= deps
    torch = lk.package("torch")
    assert torch is not None and torch.location == "pytorch-cu118"


def test_missing_vllm_cu118_wheel_is_an_error(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.files.faults.missing.add("vllm-0.3.1+cu118-cp310-cp310-manylinux1_x86_64.whl")
    result = run(
        ["lock", "--profile", "cu118-legacy", *stack.mirrors(), "-o", str(tmp_path / "l.toml")],
        capsys,
    )
    assert result.code == 1
    line = result.err.strip().splitlines()[-1]
    assert line.startswith("error: vllm:") and "location vllm-releases" in line and "404" in line
    assert not (tmp_path / "l.toml").exists()


def test_unresolvable_profile_names_the_conflict(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = derived_profile(tmp_path, '"triton==2.1.0"', '"triton==2.2.0"')
    result = run(
        ["lock", "--profile", str(path), *stack.mirrors(), "-o", str(tmp_path / "l.toml")], capsys
    )
    assert result.code == 1
    err = result.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: profile derived")
    assert "triton==2.2.0" in err[0] and "triton==2.1.0" in err[0] and "torch" in err[0]
    assert "verl-bundle-profile" not in err[0]


def test_unreachable_mirror_is_one_line(
    stack: Stack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    mirrors = [
        m if not m.startswith("pypi=") else "pypi=http://127.0.0.1:9/simple"
        for m in stack.mirrors()
    ]
    result = run(
        ["lock", "--profile", "cu118-legacy", *mirrors, "-o", str(tmp_path / "l.toml")], capsys
    )
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert lines[-1].startswith("error:") and "pypi" in lines[-1] and "127.0.0.1:9" in lines[-1]
    assert "reachable" in lines[-1]
    assert "Traceback" not in result.err


def test_mirror_credentials_never_reach_output_or_lock(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guarded = Server(
        stack.dirs.pypi,
        json_api=True,
        upload_time="2024-06-01T00:00:00Z",
        credentials=("bob", "s3cret-token"),
    ).start()
    try:
        mirrors = [
            m.replace(
                stack.pypi.index_url, f"http://bob:s3cret-token@127.0.0.1:{guarded.port}/simple"
            )
            for m in stack.mirrors()
        ]
        out = tmp_path / "l.toml"
        result = run(
            [
                "lock",
                "--profile",
                "cu118-legacy",
                *mirrors,
                "-o",
                str(out),
                "--cache-dir",
                str(tmp_path / "c"),
            ],
            capsys,
        )
        assert result.code == 0, result.err
        assert "s3cret-token" not in result.out + result.err
        text = out.read_text()
        assert "s3cret-token" not in text
        assert f"127.0.0.1:{guarded.port}" in text  # the files do come from the guarded mirror
        assert any(r.authorization for r in guarded.requests)
    finally:
        guarded.stop()


def test_https_mirror_with_a_custom_ca_bundle(
    stack: Stack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An intranet mirror behind the company's CA: REQUESTS_CA_BUNDLE serves both verl-bundle's
    downloads and the resolver (uv reads SSL_CERT_FILE; verl-bundle passes the bundle on)."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    ca, cert, key = make_certificates(tmp_path)
    secure = Server(
        stack.dirs.pypi, json_api=True, upload_time="2024-06-01T00:00:00Z", tls=(cert, key)
    ).start()
    try:
        for var in ("SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))
        out = tmp_path / "l.toml"
        result = run(stack.args("lock", out, tmp_path / "c", pypi=secure.index_url), capsys)
        assert result.code == 0, result.err
        assert f"https://127.0.0.1:{secure.port}/" in out.read_text()
        monkeypatch.delenv("REQUESTS_CA_BUNDLE")
        monkeypatch.setenv("UV_HTTP_RETRIES", "0")
        refused = run(
            stack.args("lock", tmp_path / "m.toml", tmp_path / "d", pypi=secure.index_url), capsys
        )
        assert refused.code == 1
        assert "Traceback" not in refused.err
    finally:
        secure.stop()
