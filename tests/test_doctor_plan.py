"""The doctor knows the plan: a skipped phase or a prebuilt wheel removes what only a source
build needs, the bundle's ninja wheel counts, and with no bundle the host is checked on its
own (or the bundle the doctor is run from is picked up)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import run
from support.doctor import IDS, examine, needs, run_cli, with_wheel, write_bundle
from support.toolchain import FakeMachine

from verl_bundle.airgap.contract.manifest import BuildTime
from verl_bundle.airgap.doctor.resources import build_estimate

GENERIC = [
    "os",
    "python",
    "driver",
    "gpus",
    "placement",
    "disk",
    "memory",
    "unlisted",
    "ray-token",
]


def unfit(machine: FakeMachine) -> None:
    """A server that cannot build flash-attn for CUDA 11.8: gcc 12, no ninja, no CUDA 11."""
    machine.gcc("12.2.0")


def test_skipping_the_build_phase_drops_what_only_the_build_needs(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    unfit(machine)
    building = examine(machine, monkeypatch, needs(build=True))
    assert {c.id: c.status for c in building.checks if c.id in ("nvcc", "gcc", "ninja")} == {
        "nvcc": "fail",
        "gcc": "fail",
        "ninja": "fail",
    }
    assert not building.ok
    skipped = examine(machine, monkeypatch, needs(build=True), skip_phases=("flash-attn",))
    status = {c.id: c.status for c in skipped.checks}
    assert (status["nvcc"], status["gcc"], status["ninja"]) == ("warn", "warn", "ok")
    assert skipped.ok, [(c.id, c.summary) for c in skipped.checks if c.status == "fail"]
    assert "flash-attn's build left out (--skip-phase flash-attn)" in skipped.check("ninja").summary
    assert "--skip-phase flash-attn" in skipped.check("gcc").detail
    # Another phase skipped leaves the build in place.
    other = examine(machine, monkeypatch, needs(build=True), skip_phases=("verl",))
    assert other.check("nvcc").status == "fail"


def test_a_prebuilt_wheel_needs_no_toolkit(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flash-attn as a wheel (no source build in the manifest): nothing to compile here."""
    unfit(machine)
    report = examine(machine, monkeypatch, with_wheel(needs(), "flash-attn", "flash-attn"))
    assert report.check("nvcc").status == "warn"
    assert "No CUDA source build" in report.check("nvcc").detail
    assert report.check("ninja").status == "ok"
    assert report.ok


def test_the_bundles_ninja_wheel_counts(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.toolkit("11.8")
    machine.gcc("11.4.0")
    plain = examine(machine, monkeypatch, needs(build=True)).check("ninja")
    assert plain.status == "fail"
    carried = with_wheel(needs(build=True), "ninja", "wheels")
    ninja = examine(machine, monkeypatch, carried).check("ninja")
    assert ninja.status == "ok" and "the bundle's wheel" in ninja.summary


def test_skip_phase_on_the_command_line(machine: FakeMachine, tmp_path: Path) -> None:
    unfit(machine)
    bundle = write_bundle(tmp_path / "b", needs(build=True))
    assert run_cli(["--bundle", str(bundle)], machine).returncode == 4
    both = ["--skip-phase", "flash-attn", "--skip-phase", "verl", "--json"]
    r = run_cli(["--bundle", str(bundle), *both], machine)
    assert r.returncode == 0, r.stdout
    checks = {c["id"]: c for c in json.loads(r.stdout)["result"]["checks"]}
    assert checks["ninja"]["status"] == "ok"
    r = run_cli(["--bundle", str(bundle), "--skip-phase", "nope"], machine)
    assert r.returncode == 2
    assert r.stderr == (
        "doctor: --skip-phase nope: the bundle has no such phase; its phases are torch, wheels, flash-attn, verl\n"
    )


def test_no_bundle_checks_the_host_on_its_own(machine: FakeMachine, tmp_path: Path) -> None:
    r = run_cli(["--json"], machine, cwd=tmp_path)
    doc = json.loads(r.stdout)
    assert [c["id"] for c in doc["result"]["checks"]] == GENERIC
    assert r.returncode == (0 if doc["ok"] else 4)
    text = run_cli([], machine, cwd=tmp_path)
    assert "checked without a bundle" in text.stdout.splitlines()[-1]
    r = run_cli(["--skip-phase", "verl"], machine, cwd=tmp_path)
    assert r.returncode == 2 and "needs a bundle" in r.stderr


def extracted(where: Path, data: dict[str, Any]) -> Path:
    """A bundle directory as extracted: manifest.json and SHA256SUMS mark it."""
    bundle = write_bundle(where, data)
    (bundle / "SHA256SUMS").write_text("")
    (bundle / "wheels").mkdir()
    return bundle


def test_run_from_inside_a_bundle_it_picks_the_bundle_up(
    machine: FakeMachine, tmp_path: Path
) -> None:
    bundle = extracted(tmp_path / "verl-bundle-x", needs(build=True))
    for cwd in (bundle, bundle / "wheels"):
        r = run_cli(["--json"], machine, cwd=cwd)
        assert [c["id"] for c in json.loads(r.stdout)["result"]["checks"]] == IDS
        assert r.returncode == 4  # no nvcc, no ninja for the flash-attn build


def test_verl_bundle_doctor_without_a_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`verl-bundle doctor` alone: the host generically, or the bundle it is run from."""
    monkeypatch.chdir(tmp_path)
    result = run(["doctor", "--json", "--python", sys.executable], capsys)
    assert result.code in (0, 4), result.err
    doc = json.loads(result.out)
    assert [c["id"] for c in doc["result"]["checks"]] == GENERIC
    bundle = extracted(tmp_path / "bundle", needs())
    monkeypatch.chdir(bundle / "wheels")
    inside = run(["doctor", "--json", "--python", sys.executable], capsys)
    assert [c["id"] for c in json.loads(inside.out)["result"]["checks"]] == IDS
    text = run(["doctor", "--bundle", str(tmp_path / "none")], capsys)
    assert text.code == 2 and text.err.count("\n") == 1 and "cannot read" in text.err


def test_verl_bundle_doctor_skip_phase(
    machine: FakeMachine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The host CLI's --skip-phase (repeatable) reaches the doctor as the server's does: the
    build phase left out, its compilers are no longer failures."""
    unfit(machine)
    for key, value in machine.environ().items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    bundle = str(extracted(tmp_path / "bundle", needs(build=True)))
    args = ["doctor", "--bundle", bundle, "--python", sys.executable, "--json"]

    def build_checks(extra: list[str]) -> tuple[int, dict[str, str]]:
        r = run([*args, *extra], capsys)
        checks = json.loads(r.out)["result"]["checks"]
        return r.code, {c["id"]: c["status"] for c in checks if c["id"] in ("nvcc", "gcc", "ninja")}

    assert build_checks([]) == (4, {"nvcc": "fail", "gcc": "fail", "ninja": "fail"})
    _, status = build_checks(["--skip-phase", "flash-attn", "--skip-phase", "verl"])
    assert "fail" not in status.values() and status["ninja"] == "ok"
    unknown = run([*args, "--skip-phase", "flash-attn", "--skip-phase", "nope"], capsys)
    assert unknown.code == 2 and unknown.err.count("\n") == 1
    assert (
        "--skip-phase nope: the bundle has no such phase; its phases are torch, wheels, flash-attn, verl"
        in unknown.err
    )
    alone = run(["doctor", "--skip-phase", "verl"], capsys)
    assert alone.code == 2 and "--skip-phase needs a bundle" in alone.err


def test_the_doctor_says_how_long_the_server_build_takes(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the host's measured figure in the manifest (build_time) and the jobs it will run."""
    data = needs(build=True, gib_per_job=0.001)
    build = data["phases"][2]["source_builds"][0]
    build["build_time"] = {"core_minutes_per_arch": 100, "archs": ["8.0", "9.0"]}
    check = examine(machine, monkeypatch, data, MAX_JOBS="4").check("memory")
    assert (
        "flash-attn: MAX_JOBS=" in check.detail + check.summary
        and "the build takes about 50 min at MAX_JOBS=4 (2 GPU architectures (sm80, sm90) at "
        "~100 CPU-core-minutes each, measured on the online host)"
        in check.detail + check.summary
    )
    del build["build_time"]  # a bundle without the figure: no estimate, nothing invented
    check = examine(machine, monkeypatch, data, MAX_JOBS="4").check("memory")
    assert "takes" not in check.detail + check.summary


def test_build_estimate_reads_the_figure() -> None:
    took = BuildTime(100.0, ("8.0", "9.0"))
    assert build_estimate(took, 1).startswith("about 3.3 h at MAX_JOBS=1 (2 GPU architectures")
    assert build_estimate(took, 8).startswith("about 25 min at MAX_JOBS=8")
    assert build_estimate(BuildTime(30.0), 2) == (
        "about 15 min at MAX_JOBS=2 (~30 CPU-core-minutes per GPU architecture, measured on "
        "the online host)"
    )
    assert build_estimate(None, 8) == ""
