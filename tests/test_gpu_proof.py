"""bench/gpu_proof.py (issue 25) where there is no GPU: one line and a "no GPU" report, exit 0;
and, against a fake nvidia-smi (a real executable printing an H200's rows) with a python that
has no torch, it keeps the raw outputs the doctor parsed byte for byte, runs the server doctor,
says which parts did not hold, and saves those outputs as fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.toolchain import FakeGpu, FakeMachine, gpu_csv

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_proof.py"
H200 = (FakeGpu(0, "NVIDIA H200", 143771, 1),)
DRIVER = "580.95.05"


def proof(machine: FakeMachine, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=machine.environ(),
        timeout=600,
        check=False,
    )


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(
    machine: FakeMachine, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    r = proof(machine, "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "gpu-proof: no GPU here (nvidia-smi not found); nothing to prove on this machine"
    ]
    report = json.loads((out / "gpu-proof.json").read_text())
    assert report["gpu"] is False and report["reason"] == "nvidia-smi not found"
    assert (out / "gpu-proof.txt").read_text() == r.stdout


def test_with_a_gpu_listed_the_raw_outputs_are_kept_and_saved_as_fixtures(
    machine: FakeMachine, tmp_path: Path
) -> None:
    machine.nvidia_smi(gpus=H200, apps=(), driver=DRIVER)
    out = tmp_path / "out"
    r = proof(machine, "--out", str(out), "--carried", str(tmp_path / "none"))
    assert r.returncode == 1, r.stdout + r.stderr  # no torch, no driver: the proof does not hold
    report = json.loads((out / "gpu-proof.json").read_text())
    assert report["gpu"] is True and report["gpus"][0]["name"] == "NVIDIA H200"
    assert report["raw"]["gpu-query"]["stdout"] == gpu_csv(H200, DRIVER)
    assert report["doctor"]["rc"] == 4  # --require-gpu: no libcuda.so.1 here
    assert any(c["id"] == "driver" for c in report["doctor"]["checks"])
    assert [p["CUDA_VISIBLE_DEVICES"] for p in report["placement"]] == [
        None,
        "0",
        "1",
        H200[0].uuid,
        "0,0",
    ]
    assert report["held"] == {
        "doctor": False,
        "explain": False,
        "readiness": False,
        "kernel": False,
    }
    assert r.stdout.splitlines()[0].startswith(f"gpu-proof {report['date']}: 1 x NVIDIA H200")
    fixtures = tmp_path / "fixtures"
    saved = proof(
        machine, "--save-fixtures", str(out / "gpu-proof.json"), "--fixtures", str(fixtures)
    )
    assert saved.returncode == 0, saved.stderr
    assert (fixtures / "gpu-query.out").read_text() == gpu_csv(H200, DRIVER)
    assert DRIVER in (fixtures / "SOURCE").read_text()
    # Replayed by a fake nvidia-smi, the saved outputs give the doctor the same GPU again.
    replay = FakeMachine(tmp_path / "replay")
    replay.nvidia_smi_recorded(fixtures)
    again = proof(replay, "--out", str(tmp_path / "again"), "--carried", str(tmp_path / "none"))
    second = json.loads((tmp_path / "again" / "gpu-proof.json").read_text())
    assert second["gpus"] == report["gpus"], again.stdout + again.stderr
    assert second["raw"]["gpu-query"]["stdout"] == gpu_csv(H200, DRIVER)
