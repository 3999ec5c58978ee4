"""`verl-bundle toolchain`: what this host can compile for each built-in profile, and why not,
with fake toolkits and compilers as real executables on a temporary PATH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run

from verl_bundle.profile.catalog import builtin_profiles


def _toolkit(root: Path, release: str) -> Path:
    """A directory shaped like a CUDA toolkit whose nvcc reports `release`."""
    home = root / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text(f"/* CUDA {release} */\n")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.89'\n")
    nvcc.chmod(0o755)
    return home


def _gcc(bin_dir: Path, version: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("gcc", "g++"):
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\necho {version}\n")
        path.chmod(0o755)


def _profiles(result_out: str) -> dict[str, dict[str, object]]:
    doc = json.loads(result_out)
    assert doc["command"] == "toolchain" and doc["ok"] is True
    return {p["profile"]: p for p in doc["result"]["profiles"]}


def test_a_fitting_toolkit_compiles_its_profile_and_says_why_not_for_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _toolkit(tmp_path, "11.8")
    _gcc(tmp_path / "bin", "11.4.0")
    python = tmp_path / "bin" / "python3.10"
    include = tmp_path / "include"
    include.mkdir()
    (include / "Python.h").write_text("/* headers */\n")
    python.write_text(
        '#!/bin/sh\ncase "$2" in *sysconfig*) echo ' + str(include) + ";; *) echo 3.10;; esac\n"
    )
    python.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    args = ["toolchain", "--cuda-home", str(home), "--host-python", str(python), "--json"]
    result = run(args, capsys)
    assert result.code == 0, result.err
    by_name = _profiles(result.out)
    assert set(by_name) == {p.name for p in builtin_profiles()}
    cu118 = by_name["cu118"]
    assert cu118["can_compile"] is True, cu118
    parts = {p["name"]: p for p in cu118["parts"]}  # type: ignore[attr-defined]
    assert parts["nvcc"]["found"] == f"nvcc 11.8.89 ({home})"
    assert parts["gcc"]["found"] == "gcc 11.4.0"
    cu130 = by_name["cu130"]
    assert cu130["can_compile"] is False
    why = {p["name"]: p["why"] for p in cu130["parts"]}  # type: ignore[attr-defined]
    assert why["nvcc"].startswith(f"--cuda-home {home}: nvcc 11.8 at {home}")
    assert "needs CUDA 13.x" in why["nvcc"]

    text = run(args[:-1], capsys)
    assert text.code == 0
    assert "cu118 (CUDA 11.8, Python 3.10): can compile flash-attn here" in text.out
    assert "cu130 (CUDA 13.0, Python 3.10): cannot compile flash-attn here" in text.out


def test_gcc_out_of_the_profiles_range_is_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _toolkit(tmp_path, "11.8")
    _gcc(tmp_path / "bin", "13.2.0")  # CUDA 11.8's nvcc rejects gcc newer than 11
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    result = run(["toolchain", "--cuda-home", str(home), "--json"], capsys)
    cu118 = _profiles(result.out)["cu118"]
    why = {p["name"]: p["why"] for p in cu118["parts"]}  # type: ignore[attr-defined]
    assert cu118["can_compile"] is False
    assert why["nvcc"] == ""
    assert "is gcc 13.2.0, the profile's nvcc wants gcc" in why["gcc"]


def test_with_no_cuda_here_cu130_compiles_with_its_own_nvcc_wheel(tmp_path: Path) -> None:
    # The cu130 lock carries nvidia-cuda-nvcc 13.x, whose wheel holds nvcc: with every CUDA
    # toolkit of this host hidden (a mount namespace), cu130 still can compile; cu124 cannot.
    import os
    import subprocess
    import sys

    homes = [p for p in Path("/usr/local").glob("cuda-*") if p.is_dir() and not p.is_symlink()]
    hide = "".join(f"mount -t tmpfs tmpfs '{h}' && " for h in homes)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith("/usr/local")
    )
    env.pop("CUDA_HOME", None)
    tool = [sys.executable, "-m", "verl_bundle", "toolchain", "--json"]
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", hide + 'exec "$@"', "sh", *tool],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    by_name = _profiles(proc.stdout)
    nvcc = {p["name"]: p for p in by_name["cu130"]["parts"]}["nvcc"]  # type: ignore[attr-defined]
    assert nvcc["found"].startswith("the stack's own nvidia-cuda-nvcc 13."), nvcc
    cu124 = {p["name"]: p for p in by_name["cu124"]["parts"]}["nvcc"]  # type: ignore[attr-defined]
    assert cu124["why"].startswith("no CUDA 12.x toolkit (>= 12.4) on this host"), cu124
