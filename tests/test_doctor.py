"""The server-side doctor, against fake toolchains that are real executables on a temporary PATH
and fake CUDA libraries compiled here, plus one run on this machine as it is."""

from __future__ import annotations

import ctypes.util
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.doctor import (
    IDS,
    PY,
    ROOT,
    SAMPLE,
    examine,
    needs,
    run_cli,
    write_bundle,
)
from support.toolchain import (
    A100,
    BUSY,
    CLEARED,
    EIGHT_GPUS,
    H100,
    FakeGpu,
    FakeMachine,
    apps_csv,
    gpu_csv,
    gpu_uuid,
    relocated_python,
)

from verl_bundle.airgap import doctor
from verl_bundle.airgap.contract.manifest import Manifest, from_dict
from verl_bundle.airgap.doctor import (
    TIMEOUT,
    Plan,
    max_jobs,
    parse_apps,
    parse_gpus,
    parse_version,
    render_json,
    render_text,
    run_doctor,
    torchrun_problems,
    version_matches,
    visible_devices,
)


def ready(machine: FakeMachine, gpus: tuple[FakeGpu, ...] = EIGHT_GPUS) -> FakeMachine:
    """A GPU server that has everything a CUDA 11.8 bundle with a flash-attn build needs."""
    machine.toolkit("11.8")
    machine.gcc("11.4.0")
    machine.ninja()
    machine.nvidia_smi(gpus=gpus, apps=())
    machine.libcuda(12020)
    return machine


SAME_GPUS = tuple(FakeGpu(i, H100, 81559) for i in range(4))


# -- versions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12.2.0", (12, 2, 0)), ("11.8", (11, 8)), ("520.61.05", (520, 61, 5)), ("cuda", None)],
)
def test_parse_version(text: str, expected: tuple[int, ...] | None) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("11.4.0", ">=6,<12", True),
        ("12.2.0", ">=6,<12", False),
        ("5.4.0", ">=6,<12", False),
        ("12", "<=12", True),
        ("12.1", "<=12", False),  # as in PEP 440: 12.1 is above 12
        ("12.1", "==12.*", True),
        ("13.0", "==12.*", False),
        ("11.8", "!=11.8", False),
        ("11.8.0", "==11.8", True),
        ("9.3.0", ">9, !=10.1", True),
        ("4.8.5", "", True),
    ],
)
def test_version_matches(version: str, spec: str, expected: bool) -> None:
    assert version_matches(version, spec) is expected


@pytest.mark.parametrize("spec", ["~=11.0", ">=six", "<12,>>3", ">=11.*"])
def test_version_matches_refuses_what_it_cannot_read(spec: str) -> None:
    with pytest.raises(ValueError, match="cannot"):
        version_matches("11.4", spec)


# -- max_jobs ------------------------------------------------------------------------------------

GIB = 1 << 30


@pytest.mark.parametrize(
    ("gib_per_job", "limit", "cpus", "mem", "expected"),
    [
        (9.0, None, 16, 64 * GIB, 7),  # RAM allows 7, the CPUs 8
        (9.0, None, 16, 200 * GIB, 8),  # half the CPUs
        (9.0, 4, 16, 200 * GIB, 4),  # the profile's limit
        (9.0, None, 1, 200 * GIB, 1),  # one CPU still makes one job
        (9.0, None, 64, 4 * GIB, 1),  # too little RAM for one job: still one
        (2.5, None, 32, 10 * GIB, 4),
    ],
)
def test_max_jobs(
    gib_per_job: float, limit: int | None, cpus: int, mem: int, expected: int
) -> None:
    assert max_jobs(gib_per_job, limit, cpus=cpus, mem_available=mem) == expected


def test_max_jobs_command_prints_the_number(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_bundle.airgap.cli import main

    assert main(["max-jobs", "--gib-per-job", "0.001", "--limit", "1"]) == 0
    assert capsys.readouterr().out == "1\n"
    assert main(["max-jobs", "--gib-per-job", "9", "--limit", "0"]) == 0
    expected = max_jobs(9.0, None)
    assert capsys.readouterr().out.strip() == str(expected)
    assert main(["max-jobs", "--gib-per-job", "0"]) == 2
    assert "--gib-per-job must be above 0" in capsys.readouterr().err


# -- reading needs and nvidia-smi output ---------------------------------------------------------


def manifest(data: dict[str, Any]) -> Manifest:
    return from_dict(data)


def test_the_plan_reads_the_typed_manifest() -> None:
    n = Plan.of(manifest(needs(build=True, limit=3)))
    assert (n.python, n.arch, n.glibc, n.cuda, n.gcc) == (PY, "x86_64", "2.17", "11.8", ">=6,<12")
    assert [(b.package, b.phase, b.gib_per_job, b.limit, b.needs_cuda) for b in n.builds] == [
        ("flash-attn", "flash-attn", 9.0, 3, True)
    ]
    assert n.cuda_build and n.installed_size == 7052973 and not n.generic
    assert not Plan.of(manifest(SAMPLE)).builds
    assert Plan.of(None).generic and Plan.of(None).builds == ()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"installed_size": "7 GB"}, "installed_size"),
        ({"phases": {"torch": []}}, "phases"),
        ({"target": {"python": 3.1}}, "target.python"),
    ],
)
def test_the_doctor_refuses_a_malformed_manifest_in_one_line(
    machine: FakeMachine, tmp_path: Path, bad: dict[str, Any], field: str
) -> None:
    bundle = write_bundle(tmp_path / "bad", {**SAMPLE, **bad})
    r = run_cli(["--bundle", str(bundle)], machine)
    assert r.returncode == 3 and field in r.stderr  # a manifest that cannot be read: damaged
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr


def test_parse_recorded_nvidia_smi_output() -> None:
    gpus = parse_gpus(gpu_csv(EIGHT_GPUS, "535.104.05") + "\n")
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[6].name == A100 and gpus[6].memory_total == 40960
    assert gpus[2].memory_used == 30004 and gpus[0].driver == "535.104.05"
    apps = parse_apps(apps_csv(BUSY))
    assert [(a.gpu_uuid, a.pid, a.name, a.used_memory) for a in apps][1] == (
        gpu_uuid(5),
        "5151",
        "/usr/bin/vllm-worker",
        70000,
    )
    assert parse_gpus("No devices were found\n") == []


# -- CUDA_VISIBLE_DEVICES and torchrun variables (pure logic) ------------------------------------

GPUS = parse_gpus(gpu_csv(EIGHT_GPUS, "535.104.05"))


@pytest.mark.parametrize(
    ("value", "indices", "problem"),
    [
        (None, list(range(8)), None),
        ("3,1", [3, 1], None),
        (gpu_uuid(4), [4], None),
        (gpu_uuid(4)[:12] + ",0", [4, 0], None),  # a unique UUID prefix is enough for CUDA
        ("0,x,1", [0], "neither a GPU index nor a GPU UUID"),
        ("0, 2 ,2", [0, 2], "listed twice"),
        (f"3,{gpu_uuid(3)}", [3], "listed twice"),
        ("0,8", [0], "GPU 8 does not exist"),
        ("GPU-ffffffff", [], "no GPU has UUID"),
        ("GPU-0000000", [], "names several GPUs"),
        ("", [], "empty"),
        ("-1", [], "neither"),
    ],
)
def test_visible_devices(value: str | None, indices: list[int], problem: str | None) -> None:
    chosen, problems = visible_devices(value, GPUS)
    assert [g.index for g in chosen] == indices
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


def test_visible_devices_without_a_gpu_list_checks_only_the_form() -> None:
    assert visible_devices("0,7,GPU-abc", []) == ([], [])
    assert "listed twice" in visible_devices("1,1", [])[1][0]


MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
RANK0 = {"RANK": "0", "WORLD_SIZE": "1", **MASTER}


@pytest.mark.parametrize(
    ("env", "visible", "problem"),
    [
        (
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", **MASTER},
            2,
            None,
        ),
        ({"RANK": "3"}, 8, "RANK set but WORLD_SIZE, MASTER_ADDR, MASTER_PORT not"),
        ({"RANK": "2", "WORLD_SIZE": "2", **MASTER}, 8, "RANK=2 is not below WORLD_SIZE=2"),
        ({"LOCAL_RANK": "2"}, 2, "only 2 GPU(s) are visible"),
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"}, 8, "not below LOCAL_WORLD_SIZE=1"),
        ({"LOCAL_WORLD_SIZE": "4"}, 2, "LOCAL_WORLD_SIZE=4 processes"),
        ({**RANK0, "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "2"}, 8, "above WORLD_SIZE=2"),
        ({**RANK0, "WORLD_SIZE": "0"}, 8, "at least one"),
        ({**RANK0, "RANK": "-1"}, 8, "not a whole number"),
        ({**RANK0, "MASTER_PORT": "70000"}, 8, "not a port"),
        ({**RANK0, "MASTER_PORT": "http"}, 8, "not a port"),
        ({**RANK0, "MASTER_ADDR": " "}, 8, "MASTER_ADDR is set but empty"),
        ({"LOCAL_RANK": "5"}, None, None),  # no GPU list: nothing to compare with
    ],
)
def test_torchrun_problems(env: dict[str, str], visible: int | None, problem: str | None) -> None:
    problems = torchrun_problems(env, visible)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


# -- the checks on fake machines -----------------------------------------------------------------


def test_ready_machine_passes_everything(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready(machine, gpus=SAME_GPUS)
    report = examine(machine, monkeypatch, needs(build=True, gib_per_job=0.001), require_gpu=True)
    assert [c.id for c in report.checks] == IDS
    statuses = {c.id: (c.status, c.summary) for c in report.checks}
    not_ok = {k: v for k, v in statuses.items() if v[0] != "ok" and k != "memory"}
    assert not_ok == {}
    assert report.ok
    assert "nvcc 11.8" in report.check("nvcc").summary
    assert "CUDA runtime 11.8" in report.check("cuda-libs").summary
    assert "driver 535.104.05" in report.check("driver").summary
    assert report.check("gpus").summary.startswith("4 of 4 GPUs visible")


@pytest.mark.parametrize(
    ("release", "build", "status"),
    [
        ("11.8", True, "ok"),
        ("12.1", True, "fail"),  # another major: torch refuses to build
        ("12.1", False, "warn"),  # no source build: the wheels carry their runtime
        ("11.7", True, "warn"),  # same major: torch builds, with a warning
        ("11.7", False, "warn"),
    ],
)
def test_nvcc_release_against_the_bundle(
    machine: FakeMachine,
    monkeypatch: pytest.MonkeyPatch,
    release: str,
    build: bool,
    status: str,
) -> None:
    machine.toolkit(release)
    machine.gcc("11.4.0")
    machine.ninja()
    check = examine(machine, monkeypatch, needs(build=build)).check("nvcc")
    assert check.status == status, check
    assert f"nvcc {release}" in check.summary
    if status == "fail":
        assert "cuda-toolkit-11-8" in check.fix
        assert "11.8" in check.summary


def test_gcc_12_with_cuda_11_8_fails_a_cuda_build(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.toolkit("11.8")
    machine.gcc("12.2.0")
    machine.ninja()
    with_build = examine(machine, monkeypatch, needs(build=True)).check("gcc")
    assert with_build.status == "fail"
    assert "gcc 12.2.0" in with_build.summary and ">=6,<12" in with_build.summary
    assert "gcc-11 g++-11" in with_build.fix and "CC=gcc-11 CXX=g++-11" in with_build.fix
    assert "flash-attn" in with_build.detail
    without = examine(machine, monkeypatch, needs(build=False)).check("gcc")
    assert without.status == "warn"


def test_gcc_follows_cc_and_cxx(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.toolkit("11.8")
    machine.ninja()
    machine.gcc("12.2.0")
    machine.gcc("11.4.0", names=("gcc-11", "g++-11"))
    report = examine(machine, monkeypatch, needs(build=True), CC="gcc-11", CXX="g++-11")
    gcc = report.check("gcc")
    assert gcc.status == "ok"
    assert gcc.summary.startswith("gcc-11 11.4.0, g++-11 11.4.0")


def test_gcc_missing_fails_even_without_a_build(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.toolkit("11.8")
    check = examine(machine, monkeypatch, needs(build=False)).check("gcc")
    assert check.status == "fail"
    assert "gcc not found" in check.summary and "triton" in check.detail
    assert "gcc" in check.fix


@pytest.mark.parametrize(("build", "status"), [(True, "fail"), (False, "ok")])
def test_missing_ninja(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, build: bool, status: str
) -> None:
    machine.toolkit("11.8")
    machine.gcc("11.4.0")
    check = examine(machine, monkeypatch, needs(build=build)).check("ninja")
    assert check.status == status
    if build:
        assert "flash-attn" in check.summary and "ninja-build" in check.fix


def test_nvcc_wrapper_outside_its_toolkit_misleads_cuda_home(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bin/nvcc is a two-line wrapper: torch takes CUDA_HOME=<bin>/.., which has no headers."""
    toolkit = machine.toolkit("11.8", on_path=False)
    machine.nvcc_wrapper(toolkit)
    machine.gcc("11.4.0")
    machine.ninja()
    report = examine(machine, monkeypatch, needs(build=True))
    assert report.check("nvcc").status == "ok"
    # The installer points CUDA_HOME at the toolkit the wrapper runs for the source build.
    home = report.check("cuda-home")
    assert home.status == "ok"
    assert f"torch would take {machine.root} (" in home.summary
    assert f"the installer sets CUDA_HOME={toolkit} " in home.summary
    # Without a build to do, torch's guess is what anyone building later gets: a warning.
    later = examine(machine, monkeypatch, needs()).check("cuda-home")
    assert later.status == "warn"
    assert f"CUDA_HOME={machine.root}" in later.summary
    assert f"runs the nvcc of {toolkit}" in later.detail
    assert later.fix.startswith(f"export CUDA_HOME={toolkit}")
    fixed = examine(machine, monkeypatch, needs(build=True), CUDA_HOME=str(toolkit))
    assert fixed.check("cuda-home").status == "ok"


def test_cuda_home_wins_over_path(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch builds with $CUDA_HOME/bin/nvcc even when another nvcc is first on PATH."""
    right = machine.toolkit("11.8", on_path=False)
    machine.toolkit("12.1")
    machine.gcc("11.4.0")
    machine.ninja()
    report = examine(machine, monkeypatch, needs(build=True), CUDA_HOME=str(right))
    assert report.check("nvcc").status == "ok"
    assert report.check("nvcc").summary == f"nvcc 11.8 at {right}/bin/nvcc"
    home = report.check("cuda-home")
    assert home.status == "warn" and "cuda-12.1" in home.summary
    missing = examine(machine, monkeypatch, needs(build=True), CUDA_HOME="/nonexistent/cuda")
    assert missing.check("cuda-home").status == "fail"
    assert "CUDA_HOME=/nonexistent/cuda does not exist" in missing.check("cuda-home").summary


@pytest.mark.parametrize(("build", "status"), [(True, "fail"), (False, "warn")])
def test_cudart_not_on_the_loader_path(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, build: bool, status: str
) -> None:
    if (ctypes.util.find_library("cudart") or "").endswith(".so.11.0"):
        pytest.skip("this machine has a CUDA 11 libcudart on its loader path already")
    toolkit = machine.toolkit("11.8", ld=False)
    machine.gcc("11.4.0")
    machine.ninja()
    check = examine(machine, monkeypatch, needs(build=build)).check("cuda-libs")
    assert check.status == status
    assert "libcudart.so.11.0 does not load" in check.summary
    assert f"{toolkit}/lib64" in check.fix and "ldconfig" in check.fix


def test_headers_missing_from_a_real_interpreter(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    python = relocated_python(tmp_path / "prefix")
    report = examine(machine, monkeypatch, needs(), python=str(python))
    assert report.check("python").status == "ok"
    headers = report.check("headers")
    assert headers.status == "fail"
    assert headers.summary == f"no Python.h in {tmp_path / 'prefix' / 'include'}/python{PY}"
    assert "triton" in headers.detail
    assert "-dev" in headers.fix
    assert examine(machine, monkeypatch, needs()).check("headers").status == "ok"


def test_python_of_another_version_fails(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = examine(machine, monkeypatch, needs(python="3.99")).check("python")
    assert check.status == "fail"
    assert f"is Python {sys.version_info[0]}.{sys.version_info[1]}" in check.summary
    assert "Python 3.99" in check.summary and "python3.99" in check.fix


def test_something_that_is_not_python(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = machine.script("python3", "echo 'Segmentation fault' >&2; exit 139\n")
    report = examine(machine, monkeypatch, needs(), python=str(fake))
    assert report.check("python").status == "fail"
    assert "exited with status 139: Segmentation fault" in report.check("python").summary
    assert report.check("headers").status == "warn"


@pytest.mark.parametrize(("require_gpu", "status"), [(False, "warn"), (True, "fail")])
def test_driver_too_old_for_the_bundle(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, require_gpu: bool, status: str
) -> None:
    machine.libcuda(11040)
    machine.nvidia_smi(driver="470.82.01")
    check = examine(machine, monkeypatch, needs(), require_gpu=require_gpu).check("driver")
    assert check.status == status
    assert "the driver supports CUDA 11.4, older than the bundle's 11.8" in check.summary
    assert "minor-version compatibility" in check.detail
    assert ">= 520.61.05" in check.fix


def test_driver_in_minor_version_compatibility_warns(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.libcuda(11080)
    machine.nvidia_smi(driver="515.65.01")
    check = examine(machine, monkeypatch, needs(), require_gpu=True).check("driver")
    assert check.status == "warn"
    assert "driver 515.65.01 is older than 520.61.05" in check.summary
    assert "compatibility mode" in check.summary


def test_driver_below_the_compat_minimum_fails_with_require_gpu(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.libcuda(11080)
    machine.nvidia_smi(driver="440.33.01")
    check = examine(machine, monkeypatch, needs(), require_gpu=True).check("driver")
    assert check.status == "fail"
    assert "older than 450.80.02" in check.summary


def test_driver_ok(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.libcuda(12020)
    machine.nvidia_smi(driver="535.104.05")
    check = examine(machine, monkeypatch, needs(), require_gpu=True).check("driver")
    assert check.status == "ok"
    assert check.summary.startswith("driver 535.104.05, libcuda supports CUDA 12.2")


def test_cuinit_error_is_reported(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.libcuda(12020, init=100)
    machine.nvidia_smi()
    check = examine(machine, monkeypatch, needs(), require_gpu=True).check("driver")
    assert check.status == "fail"
    assert "cuInit failed with 100 (CUDA_ERROR_NO_DEVICE)" in check.summary


@pytest.mark.parametrize(("require_gpu", "status"), [(False, "warn"), (True, "fail")])
def test_no_driver_at_all(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, require_gpu: bool, status: str
) -> None:
    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has a libcuda on its loader path")
    report = examine(machine, monkeypatch, needs(), require_gpu=require_gpu)
    driver = report.check("driver")
    assert driver.status == status
    assert driver.summary == "no NVIDIA driver: neither libcuda.so.1 nor nvidia-smi is here"
    assert report.check("gpus").status == status
    assert report.check("gpus").summary == "no GPU listed: nvidia-smi not found"
    assert report.check("placement").status == "ok"


def test_busy_and_mixed_gpus_are_named(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.nvidia_smi()
    machine.libcuda(12020)
    check = examine(machine, monkeypatch, needs()).check("gpus")
    assert check.status == "warn"
    assert check.summary == (f"8 of 8 GPUs visible: 6 x {H100} (81559 MiB), 2 x {A100} (40960 MiB)")
    assert f"GPU 2 ({gpu_uuid(2)}) is busy: pid 4242 python3 (30000 MiB)" in check.detail
    assert (
        "GPU 5 (" + gpu_uuid(5) + ") is busy: pid 5151 /usr/bin/vllm-worker (70000 MiB), "
        "pid 5152 ray::WorkerDict (2000 MiB)"
    ) in check.detail
    assert "mixed memory sizes" in check.detail
    assert "CUDA_VISIBLE_DEVICES=0,1,3,4,6,7" in check.fix
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5" in check.fix


def test_visible_idle_gpus_of_one_size_are_ok(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.nvidia_smi()
    report = examine(
        machine,
        monkeypatch,
        needs(),
        CUDA_VISIBLE_DEVICES=f"{gpu_uuid(0)},{gpu_uuid(1)}",
    )
    assert report.check("gpus").status == "ok"
    assert report.check("gpus").summary == f"2 of 8 GPUs visible: 2 x {H100} (81559 MiB); none busy"
    assert report.check("placement").status == "ok"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0,x", "neither a GPU index nor a GPU UUID"),
        ("1,1", "listed twice"),
        ("0,9", "GPU 9 does not exist: this server has 8 (0-7)"),
        ("", "empty"),
    ],
)
def test_bad_cuda_visible_devices_fail_on_a_gpu_server(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    machine.nvidia_smi()
    check = examine(machine, monkeypatch, needs(), CUDA_VISIBLE_DEVICES=value).check("placement")
    assert check.status == "fail"
    assert problem in check.summary
    assert "CUDA_VISIBLE_DEVICES" in check.fix


def test_bad_cuda_visible_devices_warn_without_gpus(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = examine(machine, monkeypatch, needs(), CUDA_VISIBLE_DEVICES="0,0")
    assert report.check("placement").status == "warn"
    strict = examine(machine, monkeypatch, needs(), require_gpu=True, CUDA_VISIBLE_DEVICES="0,0")
    assert strict.check("placement").status == "fail"


def test_indices_on_mixed_models_need_pci_bus_order(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.nvidia_smi()
    loose = examine(machine, monkeypatch, needs(), CUDA_VISIBLE_DEVICES="6,7").check("placement")
    assert loose.status == "warn" and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in loose.fix
    pinned = examine(
        machine, monkeypatch, needs(), CUDA_VISIBLE_DEVICES="6,7", CUDA_DEVICE_ORDER="PCI_BUS_ID"
    )
    assert pinned.check("placement").status == "ok"
    assert pinned.check("gpus").status == "ok"


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"RANK": "2", "WORLD_SIZE": "2", **MASTER}, "RANK=2 is not below WORLD_SIZE=2"),
        ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2, but only 2 GPU(s) are visible"),
        ({**RANK0, "MASTER_PORT": "70000"}, "MASTER_PORT='70000' is not a port"),
        ({"LOCAL_WORLD_SIZE": "3"}, "LOCAL_WORLD_SIZE=3 processes, but only 2 GPU(s)"),
    ],
)
def test_torchrun_variables_against_visible_gpus(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], problem: str
) -> None:
    machine.nvidia_smi()
    check = examine(
        machine,
        monkeypatch,
        needs(),
        CUDA_VISIBLE_DEVICES="0,1",
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        extra=env,
    ).check("placement")
    assert check.status == "fail"
    assert problem in check.summary


def test_consistent_torchrun_variables_are_ok(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.nvidia_smi()
    env = {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    check = examine(
        machine,
        monkeypatch,
        needs(),
        CUDA_VISIBLE_DEVICES="3,4",
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        extra=env,
    ).check("placement")
    assert check.status == "ok"
    assert "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2" in check.summary


def test_disk_too_small(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    check = examine(machine, monkeypatch, needs(installed_size=10**18)).check("disk")
    assert check.status == "fail"
    assert check.summary.startswith("install prefix ")
    assert "--prefix" in check.fix and "TMPDIR" in check.fix
    assert examine(machine, monkeypatch, needs()).check("disk").status == "ok"


def test_disk_checks_the_nearest_existing_parent(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in machine.environ().items():
        monkeypatch.setenv(key, value)
    target = machine.root / "not" / "yet" / "there"
    report = run_doctor(manifest(needs()), prefix=str(target))
    assert f"install prefix {target} (on {machine.root}): " in report.check("disk").summary


@pytest.mark.parametrize(
    ("gib_per_job", "limit", "message"),
    [
        (1e6, None, "less than one compile job's 1e+06 GiB"),
        (0.001, 1, "will build with MAX_JOBS=1 ("),
    ],
)
def test_memory_for_a_source_build(
    machine: FakeMachine,
    monkeypatch: pytest.MonkeyPatch,
    gib_per_job: float,
    limit: int | None,
    message: str,
) -> None:
    report = examine(machine, monkeypatch, needs(build=True, gib_per_job=gib_per_job, limit=limit))
    check = report.check("memory")
    assert check.status == "warn"
    assert message in check.summary
    assert "flash-attn: MAX_JOBS=1" in check.detail


def test_max_jobs_names_what_holds_it() -> None:
    """Half the CPUs, the available memory over the GiB per job, or the profile's limit: the
    doctor says which, so that a 2-core host with 20 GiB free is not told to add RAM."""
    from verl_bundle.airgap.doctor.resources import GIB, jobs_and_limit

    assert jobs_and_limit(9.0, None, cpus=2, mem_available=int(20.7 * GIB)) == (1, "cpus")
    assert jobs_and_limit(9.0, None, cpus=16, mem_available=int(20.7 * GIB)) == (2, "memory")
    assert jobs_and_limit(9.0, 1, cpus=16, mem_available=100 * GIB) == (1, "limit")
    assert jobs_and_limit(9.0, None, cpus=16, mem_available=GIB) == (1, "memory")


def test_memory_without_a_source_build_is_ok(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = examine(machine, monkeypatch, needs()).check("memory")
    assert check.status == "ok" and "no source build" in check.summary


@pytest.mark.slow
def test_a_hung_driver_cannot_hang_the_doctor(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hung for an hour: a doctor that waited for either would meet the test's own timeout.
    machine.nvidia_smi_hanging(seconds=3600)
    machine.libcuda(12020, hang=3600)
    report = examine(machine, monkeypatch, needs(), require_gpu=True)
    driver = report.check("driver")
    assert driver.status == "fail"
    assert f"loading libcuda.so.1 did not answer within {TIMEOUT:g} s" in driver.detail
    assert f"nvidia-smi did not answer within {TIMEOUT:g} s" in driver.detail
    assert report.check("gpus").summary == (
        f"no GPU listed: nvidia-smi did not answer within {TIMEOUT:g} s"
    )


def test_an_nvidia_smi_field_that_is_not_a_number_is_a_warning_naming_it(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`²`.isdigit() is True in Python: a superscript in a field once stopped the doctor."""
    rows = gpu_csv(EIGHT_GPUS[:2], "535.104.05").splitlines()
    rows[0] = rows[0].replace(", 81559,", ", 8155²,", 1)
    rows.append("¹, GPU-ffff, 1, 1, 535.104.05, odd")
    machine.script(
        "nvidia-smi",
        'case "$*" in\n'
        f"  *query-gpu*) printf '%s\\n' {' '.join(shlex.quote(r) for r in rows)} ;;\n"
        "  *) exit 0 ;;\nesac\n",
    )
    gpus = examine(machine, monkeypatch, needs()).check("gpus")
    assert gpus.status == "warn"
    assert "GPU 0: memory.total '8155²' is not a number" in gpus.detail
    assert "index '¹' is not a number (row left out)" in gpus.detail
    assert gpus.summary.startswith("2 of 2 GPUs visible")


@pytest.mark.slow
def test_an_nvidia_smi_that_floods_its_output_is_stopped(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.script("nvidia-smi", "while :; do echo 0123456789abcdef0123456789abcdef; done\n")
    start = time.monotonic()
    report = examine(machine, monkeypatch, needs())
    assert time.monotonic() - start < TIMEOUT  # stopped at the cap, not at the deadline
    assert (
        report.check("gpus").summary == "no GPU listed: nvidia-smi printed more than 4 MiB: stopped"
    )


# -- presenting the report -----------------------------------------------------------------------


def test_json_shape(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> None:
    report = examine(machine, monkeypatch, needs(build=True))
    data = render_json(report)
    assert set(data) == {"ok", "checks", "host"}
    assert data["ok"] is report.ok is False  # no gcc, no ninja on this machine
    assert [c["id"] for c in data["checks"]] == IDS
    for c in data["checks"]:
        assert set(c) == {"id", "status", "summary", "detail", "fix", "subject"}
        assert all(isinstance(v, str) for v in c.values())
        assert c["status"] in doctor.STATUSES
        assert c["summary"]
    host = data["host"]
    assert set(host) == {
        "os",
        "kernel",
        "arch",
        "glibc",
        "python",
        "python_executable",
        "cpus",
        "mem_available",
        "gpus",
        "nvcc",
        # what the fleet report compares across nodes
        "hostname",
        "driver",
        "cuda_driver",
        "gpu_models",
        "open_files",
        "shm_bytes",
        "socket_ifnames",
        "missing_ifnames",
        "master_addr",
        "master_addr_resolves",
        "fingerprint",
        "distributions",
        "installed_fingerprint",
        "changed_since_install",
        "unlisted_since_install",
        "env",
        "image",
    }
    assert isinstance(host["os"], str) and isinstance(host["arch"], str)
    assert host["python"] == ".".join(str(p) for p in sys.version_info[:3])
    assert isinstance(host["cpus"], int) and host["cpus"] >= 1
    assert isinstance(host["gpus"], int)
    assert host["glibc"] is None or isinstance(host["glibc"], str)
    assert host["mem_available"] is None or isinstance(host["mem_available"], int)
    json.dumps(data)


def test_text_report_lists_every_check_and_each_fix(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = examine(machine, monkeypatch, needs(build=True))
    text = render_text(report)
    lines = text.splitlines()
    for check_id in IDS:
        assert any(line.split()[1:2] == [check_id] for line in lines[: len(IDS)])
    assert "FAIL ninja: ninja not found; the bundle builds flash-attn" in text
    assert "  fix: apt-get install -y ninja-build" in text or "  fix: " in text
    assert lines[-2].startswith("checks: ") and "failure(s)" in lines[-2]
    assert lines[-1].startswith("doctor: not ready to install: ")


# -- the command line, in a subprocess (as install.sh runs it) -----------------------------------


def test_exit_codes(machine: FakeMachine, tmp_path: Path) -> None:
    ready(machine, gpus=SAME_GPUS)
    good = write_bundle(tmp_path / "good", needs(build=True, gib_per_job=0.001))
    r = run_cli(["--bundle", str(good), "--require-gpu"], machine)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("doctor: ready to install")
    assert r.stderr == ""

    (machine.bin / "ninja").unlink()
    r = run_cli(["--bundle", str(good), "--json"], machine)
    assert r.returncode == 4  # this server cannot install the bundle yet
    data = json.loads(r.stdout)
    assert data["verdict"]["state"] == "server" and "ninja" in data["verdict"]["line"]
    assert (data["schema"], data["command"], data["ok"]) == (1, "doctor", False)
    assert data["result"]["ok"] is False
    assert [c["status"] for c in data["result"]["checks"] if c["id"] == "ninja"] == ["fail"]

    r = run_cli(["--bundle", str(tmp_path / "missing")], machine)
    assert r.returncode == 2
    assert r.stderr.startswith("doctor: cannot read ") and len(r.stderr.splitlines()) == 1

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{not json")
    r = run_cli(["--bundle", str(tmp_path / "broken")], machine)
    assert r.returncode == 3 and "Traceback" not in r.stderr

    bad = write_bundle(tmp_path / "bad", {**needs(), "installed_size": "lots"})
    r = run_cli(["--bundle", str(bad)], machine)
    assert r.returncode == 3 and "installed_size" in r.stderr

    # The repository is not a bundle: the host on its own, where a missing ninja is no failure.
    r = run_cli([], machine)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked without a bundle" in r.stdout.splitlines()[-1]

    r = run_cli(["--bundle", str(good), "--frobnicate"], machine)
    assert r.returncode == 2


def test_driver_probe_through_the_cli(machine: FakeMachine, tmp_path: Path) -> None:
    """LD_LIBRARY_PATH set before the doctor's process starts, as on a real server."""
    machine.libcuda(11040)
    machine.nvidia_smi(driver="470.82.01")
    bundle = write_bundle(tmp_path / "b", needs())
    lenient = run_cli(["--bundle", str(bundle), "--json"], machine)
    strict = run_cli(["--bundle", str(bundle), "--json", "--require-gpu"], machine)
    statuses = [
        {c["id"]: c["status"] for c in json.loads(r.stdout)["result"]["checks"]}
        for r in (lenient, strict)
    ]
    assert (statuses[0]["driver"], statuses[1]["driver"]) == ("warn", "fail")
    assert strict.returncode == 4


def _interpreter(version: str) -> str | None:
    """A Python `version` that really runs here (a pyenv shim for a version that is not
    installed exits 127)."""
    pyenv = sorted(Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python{version}"))
    for candidate in [*(str(p) for p in reversed(pyenv)), shutil.which(f"python{version}")]:
        if candidate and subprocess.run([candidate, "-c", ""], check=False).returncode == 0:
            return candidate
    return None


@pytest.mark.parametrize("interpreter", ["current", "3.8"])
def test_runs_from_inside_a_bundle(machine: FakeMachine, tmp_path: Path, interpreter: str) -> None:
    """Copied into <bundle>/lib as the bundle carries it, the doctor finds its own manifest; and
    it runs on the oldest Python a server may have."""
    python = sys.executable if interpreter == "current" else _interpreter("3.8")
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    bundle = write_bundle(tmp_path / "bundle", needs(python=version))
    lib = bundle / "lib" / "verl_bundle"
    lib.mkdir(parents=True)
    shutil.copy(ROOT / "verl_bundle" / "__init__.py", lib)
    shutil.copytree(
        ROOT / "verl_bundle" / "airgap",
        lib / "airgap",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    ready(machine, gpus=SAME_GPUS)
    r = run_cli(["--json"], machine, python=python, pythonpath=bundle / "lib", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)["result"]
    assert data["host"]["python"].startswith(version + ".")
    assert {c["id"]: c["status"] for c in data["checks"]}["python"] == "ok"


# -- this machine, as it is ----------------------------------------------------------------------


@pytest.mark.skipif(
    not (
        shutil.which("nvcc") == "/usr/local/bin/nvcc"
        and Path("/usr/local/cuda-13.0/bin/nvcc").is_file()
        and shutil.which("nvidia-smi") is None
        and _interpreter("3.10")
    ),
    reason="describes the build machine: CUDA 13.0 behind /usr/local/bin/nvcc, no driver",
)
def test_this_machine_against_the_sample_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in CLEARED:
        monkeypatch.delenv(var, raising=False)
    python = _interpreter("3.10")
    assert python is not None
    report = run_doctor(manifest(SAMPLE), python=python)
    status = {c.id: c.status for c in report.checks}
    nvcc = report.check("nvcc")
    assert nvcc.status == "warn"
    assert nvcc.summary == "nvcc 13.0 at /usr/local/bin/nvcc, but the bundle's CUDA is 11.8"
    gcc = report.check("gcc")
    assert gcc.status == "warn" and "gcc 12." in gcc.summary
    assert "no CUDA source build" in gcc.detail
    home = report.check("cuda-home")
    assert home.status == "warn" and "CUDA_HOME=/usr/local " in home.summary
    assert home.fix.startswith("export CUDA_HOME=/usr/local/cuda-13.0")
    assert status["driver"] == "warn" and status["gpus"] == "warn"
    assert status["python"] == "ok" and status["headers"] == "ok"
    assert report.ok
