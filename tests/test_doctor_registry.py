"""The doctor's registry: every check walked through hand-built facts that make it warn or
fail, each time with a fix; a check that raises is reported, not a traceback."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from support.doctor import IDS, SAMPLE, needs, with_wheel

from verl_bundle.airgap.checks import Registered
from verl_bundle.airgap.contract.manifest import from_dict
from verl_bundle.airgap.doctor import Facts, Options, Plan, examine, registered
from verl_bundle.airgap.doctor.commands import Run
from verl_bundle.airgap.doctor.compilers import Compiler, Ninja
from verl_bundle.airgap.doctor.devices import Gpu
from verl_bundle.airgap.doctor.gpus import App, DriverProbe, GpuListing
from verl_bundle.airgap.doctor.node import Node, RayToken
from verl_bundle.airgap.doctor.python import Interpreter
from verl_bundle.airgap.doctor.registry import run_one
from verl_bundle.airgap.doctor.resources import Memory, Place
from verl_bundle.airgap.doctor.system import Distro, System
from verl_bundle.airgap.doctor.toolkit import CudaLibs, Toolkit
from verl_bundle.airgap.errors import UsageError

GIB = 1 << 30
RAN = Run(("probe",), 0, "", "")
HUNG = Run(("probe",), problem="did not answer within 10 s")
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def good_facts(tmp: Path) -> Facts:
    """A server with everything a CUDA 11.8 bundle with a flash-attn build needs."""
    include = tmp / "include" / "python3.10"
    include.mkdir(parents=True)
    (include / "Python.h").write_text("/* */\n")
    home = tmp / "cuda-11.8"
    for part in ("bin/nvcc", "include/cuda_runtime.h", "lib64/libcudart.so.11.8.89"):
        (home / part).parent.mkdir(parents=True, exist_ok=True)
        (home / part).write_text("")
    lib = home / "lib64"
    cudart = {"libs": [{"name": "libcudart.so.11.0", "version": 11080}], "paths": [str(lib)]}
    return Facts(
        distro=Distro("Ubuntu 22.04.4 LTS", "apt"),
        system=System("Linux", "x86_64", "2.35", "5.15.0"),
        python=Interpreter("/usr/bin/python3.10", RAN, "3.10.12", str(include)),
        compilers=(
            Compiler("C", ("gcc",), True, "11.4.0", RAN),
            Compiler("C++", ("g++",), True, "11.4.0", RAN),
        ),
        ninja=Ninja("/usr/bin/ninja", Run(("ninja", "--version"), 0, "1.11.1\n")),
        toolkit=Toolkit(
            str(home),
            "CUDA_HOME",
            str(home / "bin" / "nvcc"),
            RAN,
            "11.8",
            str(home),
            None,
            None,
            CudaLibs(str(home), (str(lib),), "libcudart.so.11.0", cudart, RAN),
        ),
        ldcache=Run(("ldconfig", "-p"), 0, f"\tlibcudart.so.11.0 (libc6) => {lib}/x.so\n"),
        gpus=GpuListing(
            tuple(Gpu(i, f"GPU-{i:04d}", 81559, 4, "535.104.05", H100) for i in (0, 1))
        ),
        driver=DriverProbe({"init": 0, "rc": 0, "version": 12020}, RAN),
        memory=Memory(256 * GIB, 32),
        disk=(
            Place("install prefix", "/opt/verl", "/opt", 900 * GIB),
            Place("temp dir", "/tmp", "/tmp", 900 * GIB),
        ),
        env=MappingProxyType({}),
    )


Change = Callable[[Facts, Path], Facts]


def _r(facts: Facts, **changes: Any) -> Facts:
    return dataclasses.replace(facts, **changes)


def _tk(facts: Facts, **changes: Any) -> Facts:
    return _r(facts, toolkit=dataclasses.replace(facts.toolkit, **changes))


def _libs(facts: Facts, **changes: Any) -> Facts:
    assert facts.toolkit.libs is not None
    return _tk(facts, libs=dataclasses.replace(facts.toolkit.libs, **changes))


def _env(facts: Facts, **env: str) -> Facts:
    return _r(facts, env=MappingProxyType(env))


def _gpus(*gpus: Gpu, apps: tuple[App, ...] = ()) -> GpuListing:
    return GpuListing(gpus, apps)


def _place(facts: Facts, **changes: Any) -> Facts:
    return _r(facts, disk=(dataclasses.replace(facts.disk[0], **changes), facts.disk[1]))


def _gcc(
    version: str | None, c: bool = True, cxx: bool = True, run: Run = RAN
) -> tuple[Compiler, ...]:
    return (
        Compiler("C", ("gcc",), c, version, run),
        Compiler("C++", ("g++",), cxx, version, run),
    )


# One change of the good server each, together reaching every warn and fail of every check.
BREAKAGES: dict[str, Change] = {
    "not linux": lambda f, t: _r(f, system=System("Darwin", "arm64", None, "23")),
    "other arch": lambda f, t: _r(f, system=System("Linux", "aarch64", "2.35", "6.1")),
    "musl": lambda f, t: _r(f, system=System("Linux", "x86_64", None, "6.1")),
    "old glibc": lambda f, t: _r(f, system=System("Linux", "x86_64", "2.12", "2.6")),
    "python dead": lambda f, t: _r(f, python=Interpreter("/usr/bin/python3", HUNG)),
    "python other": lambda f, t: _r(f, python=dataclasses.replace(f.python, version="3.99.0")),
    "no venv": lambda f, t: _r(
        f, python=dataclasses.replace(f.python, venv_problem="no ensurepip")
    ),
    "no headers": lambda f, t: _r(f, python=dataclasses.replace(f.python, include=str(t))),
    "no cc": lambda f, t: _r(f, compilers=_gcc(None, c=False)),
    "no c++": lambda f, t: _r(f, compilers=_gcc("11.4.0", cxx=False)),
    "gcc dead": lambda f, t: _r(f, compilers=_gcc(None, run=HUNG)),
    "gcc 12": lambda f, t: _r(f, compilers=_gcc("12.2.0")),
    "no ninja": lambda f, t: _r(f, ninja=Ninja(None)),
    "stale ray token": lambda f, t: _r(
        f,
        node=dataclasses.replace(f.node, ray_token=RayToken("/home/u/.ray/auth_token", 64, 0o644)),
    ),
    "ninja dead": lambda f, t: _r(f, ninja=Ninja("/usr/bin/ninja", HUNG)),
    "no nvcc": lambda f, t: _tk(f, home=None, nvcc=None, run=None, version=None, libs=None),
    "nvcc silent": lambda f, t: _tk(f, version=None, run=HUNG),
    "nvcc 12.1": lambda f, t: _tk(f, version="12.1"),
    "nvcc 11.7": lambda f, t: _tk(f, version="11.7"),
    "home gone": lambda f, t: _tk(f, home=str(t / "nowhere")),
    "home not a toolkit": lambda f, t: _tk(f, home=str(t), home_source="the directory above"),
    "path disagrees": lambda f, t: _tk(f, path_nvcc="/usr/bin/nvcc", path_root="/usr/lib/cuda"),
    "no cudart": lambda f, t: _libs(f, soname=None),
    "cudart probe hung": lambda f, t: _libs(f, answer=None, run=HUNG),
    "cudart not loading": lambda f, t: _libs(f, answer={"libs": [{"error": "not found"}]}),
    "cudart 12": lambda f, t: _libs(f, answer={"libs": [{"version": 12010}], "paths": []}),
    "cudart off the loader path": lambda f, t: _r(f, ldcache=Run(("ldconfig",), 0, "")),
    "libcuda hung": lambda f, t: _r(f, driver=DriverProbe(None, HUNG)),
    "no driver": lambda f, t: _r(
        f,
        driver=DriverProbe({"error": "libcuda.so.1: cannot open"}, RAN),
        gpus=GpuListing(problem="nvidia-smi not found"),
    ),
    "cuInit fails": lambda f, t: _r(f, driver=DriverProbe({"init": 100, "version": 12020}, RAN)),
    "driver for 11.4": lambda f, t: _r(f, driver=DriverProbe({"version": 11040}, RAN)),
    "driver below compat": lambda f, t: _r(f, gpus=_gpus(Gpu(0, "GPU-0", 1, 0, "440.33.01", H100))),
    "driver in compat mode": lambda f, t: _r(
        f, gpus=_gpus(Gpu(0, "GPU-0", 1, 0, "515.65.01", H100))
    ),
    "smi hung": lambda f, t: _r(f, gpus=GpuListing(problem="nvidia-smi did not answer")),
    "none visible": lambda f, t: _env(f, CUDA_VISIBLE_DEVICES=""),
    "busy and mixed": lambda f, t: _r(
        f,
        gpus=_gpus(
            Gpu(0, "GPU-0", 81559, 30000, "535.104.05", H100),
            Gpu(1, "GPU-1", 40960, 9000, "535.104.05", A100),
            apps=(App("GPU-0", "42", "python3", 30000),),
        ),
    ),
    "indices on mixed models": lambda f, t: _env(
        _r(
            f,
            gpus=_gpus(
                Gpu(0, "GPU-0", 81559, 0, "535.104.05", H100),
                Gpu(1, "GPU-1", 81559, 0, "535.104.05", A100),
            ),
        ),
        CUDA_VISIBLE_DEVICES="1,0",
    ),
    "bad ranks": lambda f, t: _env(f, RANK="2", WORLD_SIZE="2", MASTER_PORT="0"),
    "disk unreadable": lambda f, t: _place(f, free=None, error="Permission denied"),
    "disk read-only": lambda f, t: _place(f, read_only=True),
    "disk not writable": lambda f, t: _place(f, writable=False),
    "disk full": lambda f, t: _place(f, free=1 << 20),
    "little memory": lambda f, t: _r(f, memory=Memory(1 * GIB, 32)),
    "two cpus": lambda f, t: _r(f, memory=Memory(256 * GIB, 2)),
    "MAX_JOBS forced": lambda f, t: _env(f, MAX_JOBS="64"),
    "a planted .pth": lambda f, t: _r(
        f,
        node=Node(unlisted=("lib/python3.10/site-packages/zz.pth (runs at every start ...)",)),
    ),
}


def plans() -> dict[str, Plan]:
    build = needs(build=True, python="3.10")
    odd_gcc = {**build, "toolchain": {**build["toolchain"], "gcc": "~=11"}}
    return {
        "no bundle": Plan.of(None),
        "wheels only": Plan.of(from_dict(needs(python="3.10"))),
        "flash-attn built here": Plan.of(from_dict(build)),
        "with a ninja wheel": Plan.of(from_dict(with_wheel(build, "ninja", "wheels"))),
        "gcc range unreadable": Plan.of(from_dict(odd_gcc)),
        "build skipped, no triton": Plan.of(
            from_dict(with_wheel(build, "einops", "wheels")), ["flash-attn"]
        ),
    }


def test_the_good_server_passes_every_check(tmp_path: Path) -> None:
    """The base of the walk below: each breakage is the only thing wrong."""
    facts = good_facts(tmp_path)
    report = examine(plans()["flash-attn built here"], facts, Options(require_gpu=True))
    assert [c.id for c in report.checks] == IDS
    assert {c.id: c.summary for c in report.checks if c.status != "ok"} == {}


def test_every_warning_and_failure_carries_a_fix(tmp_path: Path) -> None:
    base = good_facts(tmp_path / "server")
    empty = tmp_path / "empty"
    empty.mkdir()
    seen: dict[str, set[str]] = {r.id: set() for r in registered()}
    for name, change in BREAKAGES.items():
        facts = change(base, empty)
        for plan_name, plan in plans().items():
            for require_gpu in (False, True):
                for c in examine(plan, facts, Options(require_gpu=require_gpu)).checks:
                    where = f"{c.id} on {name!r} with {plan_name!r}: {c.summary}"
                    assert not c.summary.startswith("could not check"), where
                    if c.status != "ok":
                        assert c.fix.strip(), f"no fix: {where}"
                        seen[c.id].add(c.status)
    # The walk reached a warning or a failure of every registered check.
    assert {k for k, v in seen.items() if not v} == set()
    # unlisted warns: the doctor runs before install.sh --repair, which removes what it names.
    assert all(
        "fail" in seen[k] for k in IDS if k not in ("headers", "memory", "unlisted", "ray-token")
    )


def test_fixes_say_where_packages_come_from_offline(tmp_path: Path) -> None:
    facts = BREAKAGES["no ninja"](good_facts(tmp_path), tmp_path)
    report = examine(plans()["flash-attn built here"], facts, Options())
    assert "intranet OS package mirror or the install media" in report.check("ninja").fix
    nvcc = examine(
        plans()["flash-attn built here"], BREAKAGES["nvcc 12.1"](facts, tmp_path), Options()
    )
    fix = nvcc.check("nvcc").fix
    assert "intranet mirror of NVIDIA's CUDA repository" in fix
    assert "--skip-phase flash-attn" in fix


def test_a_check_that_raises_is_reported_as_a_bug(tmp_path: Path) -> None:
    def broken(plan: Plan, facts: Facts, opts: Options) -> Any:
        raise KeyError("gpu")

    result = run_one(
        Registered("broken", broken, False), Plan.of(None), good_facts(tmp_path), Options()
    )
    assert (result.id, result.status) == ("broken", "warn")
    assert result.summary == "could not check: KeyError: 'gpu'"
    assert "bug in the doctor" in result.detail and result.fix


def test_checks_are_registered_once_in_the_report_order() -> None:
    assert [r.id for r in registered()] == IDS
    assert {r.id for r in registered() if r.generic} == {
        "os",
        "python",
        "driver",
        "gpus",
        "placement",
        "disk",
        "memory",
        "unlisted",
        "ray-token",
    }


def test_a_phase_that_is_not_there_is_refused() -> None:
    with pytest.raises(
        UsageError, match="--skip-phase nope: the bundle has no such phase; its phases are "
    ):
        Plan.of(from_dict(SAMPLE), ["nope"])


def test_a_read_only_image_prefix_is_checked_as_a_mount_not_for_free_space(
    tmp_path: Path,
) -> None:
    """Issue 37: an image mounted at the prefix (read-only, 0 bytes free) is not 'no free
    space': nothing is installed there; an image that does not serve its python fails."""
    base = good_facts(tmp_path)
    full = (
        Place("install prefix", "/opt/verl", "/opt/verl", 0, read_only=True),
        Place("temp dir", "/tmp", "/tmp", 900 * GIB),
    )
    mounted = dataclasses.replace(
        base,
        disk=full,
        node=dataclasses.replace(base.node, image="squashfs image (fuse.squashfuse, read-only)"),
    )
    disk = examine(Plan.of(from_dict(SAMPLE)), mounted, Options()).check("disk")
    assert disk.status == "ok" and disk.summary.startswith(
        "install prefix: a squashfs image (fuse.squashfuse, read-only): nothing is installed here"
    ), disk
    plain = dataclasses.replace(base, disk=full)
    assert examine(Plan.of(from_dict(SAMPLE)), plain, Options()).check("disk").status == "fail"
    dead = dataclasses.replace(
        mounted,
        node=dataclasses.replace(
            mounted.node,
            image_problem="the image's bin/python is /usr/bin/python3.10, outside the image, "
            "and this node has no such interpreter",
        ),
    )
    failed = examine(Plan.of(from_dict(SAMPLE)), dead, Options()).check("disk")
    assert failed.status == "fail" and "outside the image" in failed.summary and failed.fix
