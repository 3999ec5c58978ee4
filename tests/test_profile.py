from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run

from verl_bundle.errors import ProfileError
from verl_bundle.profile.catalog import (
    builtin_profiles,
    find_profile,
    profile_for_cuda,
    select_profile,
)
from verl_bundle.profile.load import load_profile

MINIMAL = """
name = "mine"
cuda = "11.8"
requirements = ["torch==2.1.2"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my.toml"
    path.write_text(text)
    return path


def test_builtin_cu118_is_the_stack_the_issue_names() -> None:
    """The design card's literal pins, kept as a named profile that states its limit."""
    p = find_profile("cu118-legacy")
    assert p.cuda == "11.8"
    assert "torch==2.1.2" in p.requirements
    assert "triton==2.1.0" in p.requirements
    assert "flash-attn==2.5.8" in p.requirements
    assert "verl==0.2.0.post2" in p.requirements
    assert p.bindings["torch"] == "pytorch-cu118"
    assert p.location("pytorch-cu118").url == "https://download.pytorch.org/whl/cu118"
    assert p.location("pypi").url is None  # the resolver's default index
    flash = p.artifact("flash-attn")
    assert flash is not None
    assert flash.path_for("2.5.8", p.target()).endswith(
        "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    )
    build = p.source_build("flash-attn")
    assert build is not None and build.env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert [ph.name for ph in p.phases] == ["torch", "wheels", "flash-attn", "verl"]
    # build prints the notes: the known limit comes first, in one line.
    assert p.readiness.limit.startswith("not ready to train: torch 2.1.2")
    assert p.notes[0] == f"Known limit: {p.readiness.limit}"


def test_cuda_118_picks_the_stack_that_can_train() -> None:
    p = profile_for_cuda("11.8")
    assert p.name == "cu118"
    assert "torch==2.5.1" in p.requirements and "triton==3.1.0" in p.requirements
    assert "vllm==0.7.3" in p.requirements and "verl==0.3.0.post1" in p.requirements
    assert p.bindings["torch"] == p.bindings["xformers"] == "pytorch-cu118"
    vllm = p.artifact("vllm")
    assert vllm is not None and vllm.fallback == "error"
    assert vllm.path_for("0.7.3", p.target()) == (
        "v0.7.3/vllm-0.7.3+cu118-cp38-abi3-manylinux1_x86_64.whl"
    )
    flash = p.artifact("flash-attn")
    assert flash is not None
    assert flash.path_for("2.7.3", p.target()).endswith(
        "flash_attn-2.7.3+cu11torch2.5cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    )
    build = p.source_build("flash-attn")
    assert build is not None and build.env["NVCC_THREADS"] == "2"
    assert build.max_jobs.gib_per_job == 12
    assert p.readiness.purpose == "PPO with FSDP and vLLM rollout" and not p.readiness.limit
    assert "verl.workers.fsdp_workers" in p.readiness.modules


def test_every_builtin_profile_parses() -> None:
    profiles = builtin_profiles()
    assert profiles
    for p in profiles:
        # Its stack is its requirements, or upstream's own uv.lock (cu130-py312).
        assert p.requirements or p.uv_lock is not None


def test_user_file_works_like_a_builtin(tmp_path: Path) -> None:
    p = find_profile(str(write(tmp_path, MINIMAL)))
    assert p.name == "mine"
    assert p.platform == "manylinux_2_17_x86_64"
    assert p.python == "3.10"
    assert [ph.name for ph in p.phases] == ["wheels"]


def test_mirror_replaces_a_location_by_name() -> None:
    p = select_profile("11.8", None).with_mirrors({"pypi": "http://127.0.0.1:1/simple"})
    assert p.location("pypi").url == "http://127.0.0.1:1/simple"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name = 'x'\ncuda = \n", "not valid TOML"),
        (MINIMAL + "requirement = ['x']\n", "unknown key 'requirement'"),
        (MINIMAL.replace('"torch==2.1.2"', '"torch==="'), "key 'requirements[0]'"),
        (
            MINIMAL + "[bindings]\ntorch = 'pytorch'\n",
            "key 'bindings.torch': location 'pytorch' is not defined",
        ),
        (
            MINIMAL + "[[artifacts]]\npackage='a'\nlocation='nowhere'\nfile='x'\n",
            "key 'artifacts[0].location'",
        ),
        (MINIMAL.replace('cuda = "11.8"', 'cuda = "eleven"'), "key 'cuda'"),
        (MINIMAL + "[[phases]]\nname='a'\npackages=['torch']\n", "key 'phases'"),
        (
            MINIMAL
            + "[[source-builds]]\npackage='flash-attn'\nbuild-requires=['torch']\n[[phases]]\nname='all'\npackages=['*']\n",
            "must be installed in an earlier phase",
        ),
    ],
)
def test_bad_profile_is_one_line_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(
        ProfileError, match=expected.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")
    ):
        load_profile(path)
    result = run(["lock", "--profile", str(path)], capsys)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"error: {path}")
    assert "Traceback" not in result.err


def test_python_outside_the_profile_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(["lock", "--profile", "cu118-legacy", "--python", "3.12"], capsys)
    assert result.code == 2
    assert "supports Python >=3.8,<3.12" in result.err
    # ... and names the built-in profiles that do support 3.12 (first the CUDA 11.8 one that can).
    assert "profiles for Python 3.12: cu118 (CUDA 11.8, Python >=3.9,<3.13)" in result.err
    assert "cu124 (CUDA 12.4, Python >=3.9,<3.13)" in result.err


def test_unknown_cuda_and_profile_names(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(["build", "--cuda", "9.0"], capsys)
    assert result.code == 2 and "no built-in profile is made for CUDA 9.0" in result.err
    assert "the oldest built-in is cu118 (CUDA 11.8): upgrade the driver" in result.err
    result = run(["build", "--profile", "nope"], capsys)
    assert result.code == 2 and "built-in: cu118" in result.err
    result = run(["build"], capsys)
    assert result.code == 2 and "--cuda X.Y" in result.err


def test_mirror_for_an_unknown_location_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run(
        ["lock", "--cuda", "11.8", "--mirror", "pytorch=http://127.0.0.1:1/simple"], capsys
    )
    assert result.code == 2
    assert "has no location 'pytorch'" in result.err
    result = run(["lock", "--cuda", "11.8", "--mirror", "pypi"], capsys)
    assert result.code == 2 and "NAME=URL" in result.err
