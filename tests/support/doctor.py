"""The doctor's sample manifest and the ways its tests run the doctor (in-process against a
FakeMachine, or its command line in a subprocess), shared by the doctor's test modules."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.toolchain import CLEARED, FakeMachine
from verl_bundle.airgap.contract.manifest import from_dict
from verl_bundle.airgap.doctor import Report, run_doctor

ROOT = Path(__file__).resolve().parents[2]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


IDS = [
    "os",
    "python",
    "headers",
    "gcc",
    "ninja",
    "nvcc",
    "cuda-home",
    "cuda-libs",
    "driver",
    "gpus",
    "placement",
    "disk",
    "memory",
    "unlisted",
    "ray-token",
]


# What the doctor reads of a real manifest (verl-bundle-cu118-cp310-manylinux_2_17_x86_64).
SAMPLE: dict[str, Any] = {
    "schema": 2,
    "name": "verl-bundle-cu118-cp310-manylinux_2_17_x86_64",
    "profile": {"name": "cu118"},
    "target": {
        "python": "3.10",
        "python_tag": "cp310",
        "platform": "manylinux_2_17_x86_64",
        "arch": "x86_64",
        "glibc": "2.17",
        "cuda": "11.8",
    },
    "toolchain": {
        "nvcc": "11.8",
        "gcc": ">=6,<12",
        "driver": "520.61.05",
        "driver_compat": "450.80.02",
    },
    "phases": [
        {"name": "torch", "requirements": "requirements/01-torch.txt", "source_builds": []},
        {"name": "wheels", "requirements": "requirements/02-wheels.txt", "source_builds": []},
        {
            "name": "flash-attn",
            "requirements": "requirements/03-flash-attn.txt",
            "source_builds": [],
        },
        {"name": "verl", "requirements": "requirements/04-verl.txt", "source_builds": []},
    ],
    "installed_size": 7052973,
}


FLASH_ATTN_BUILD = {
    "package": "flash-attn",
    "env": {"FLASH_ATTENTION_FORCE_BUILD": "TRUE"},
    "max_jobs": {"gib_per_job": 9.0, "limit": None},
    "needs_cuda": True,
}


def needs(
    *,
    build: bool = False,
    python: str = PY,
    installed_size: int = 7052973,
    gib_per_job: float = 9.0,
    limit: int | None = None,
) -> dict[str, Any]:
    """The sample's needs for this interpreter's Python, with flash-attn built from source when
    `build`."""
    data = copy.deepcopy(SAMPLE)
    data["target"]["python"] = python
    data["target"]["python_tag"] = "cp" + python.replace(".", "")
    data["installed_size"] = installed_size
    if build:
        b = dict(FLASH_ATTN_BUILD, max_jobs={"gib_per_job": gib_per_job, "limit": limit})
        data["phases"][2]["source_builds"] = [b]
    return data


def with_wheel(data: dict[str, Any], name: str, phase: str) -> dict[str, Any]:
    """The manifest `data` with a wheel of `name` added to `phase`."""
    entry = {
        "path": f"wheels/{name}-1.11.1-py3-none-any.whl",
        "name": name,
        "version": "1.11.1",
        "sha256": "1" * 64,
        "size": 1,
        "phase": phase,
        "kind": "wheel",
    }
    return {**data, "files": [*data.get("files", []), entry]}


def examine(
    machine: FakeMachine,
    monkeypatch: pytest.MonkeyPatch,
    data: dict[str, Any],
    *,
    python: str | None = None,
    require_gpu: bool = False,
    skip_phases: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
    **env: str,
) -> Report:
    """Run the doctor in-process with the machine's PATH and LD_LIBRARY_PATH; the probes it
    starts (libcuda, libcudart) are new processes and read them at their start."""
    for key, value in {**machine.environ(), **(extra or {}), **env}.items():
        monkeypatch.setenv(key, value)
    return run_doctor(
        from_dict(data),
        python=python or sys.executable,
        prefix=str(machine.root),
        require_gpu=require_gpu,
        skip_phases=skip_phases,
    )


def write_bundle(where: Path, data: dict[str, Any]) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "manifest.json").write_text(json.dumps(data))
    return where


def run_cli(
    args: list[str],
    machine: FakeMachine,
    python: str = sys.executable,
    pythonpath: Path = ROOT,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(machine.environ(), PYTHONPATH=str(pythonpath))
    return subprocess.run(
        [python, "-m", "verl_bundle.airgap", "doctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cwd),
        timeout=120,
        check=False,
    )
