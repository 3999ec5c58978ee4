"""One source for every figure a user reads: a server-side source build's cost (the host's
measured CPU-core-minutes per GPU architecture, and the architectures), the NVIDIA driver
minimum and the phase names come from the profile and manifest data, and every surface that
prints them (build, profiles show, the host's doctor, the server's doctor in a built bundle, the
installer's phase estimate, the README and docs) says the same."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import NAME, ROOT, Stack, build_bundle, clean_environ
from support.cli import run

from verl_bundle.bundle.plan import manifest_for_profile
from verl_bundle.compile.cost import CORE_MINUTES_PER_ARCH, server_build_time
from verl_bundle.profile.catalog import builtin_profiles, find_profile

# The tests' stack (tests/support/stack.py), whose flash-attn sdist is 2.5.8.
PROFILE = "cu118-legacy"
FLASH_WHEEL = "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
COST = re.compile(r"(\d+) GPU architectures? \(([^)]*)\) at ~(\d+) CPU-core-minutes each")
DRIVER = re.compile(
    r"NVIDIA driver >= (\S+) \(the full CUDA ([\d.]+) runtime\)"
    r"(?:, or >= (\S+) under CUDA minor-version compatibility)?"
)
SKIP = re.compile(r"--skip-phase (\S+?)[),;\s]")


@pytest.fixture(scope="module")
def left_to_the_server(
    stack_servers: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, object], Path]]:
    """The tests' cu118-legacy bundle with flash-attn left to the server (its release wheel
    unreachable, --compile never): the build's JSON and the extracted bundle."""
    stack_servers.reset()
    stack_servers.files.faults.missing.add(FLASH_WHEEL)
    tmp = tmp_path_factory.mktemp("figures")
    try:
        doc = build_bundle(stack_servers, tmp / "out", tmp / "cache", "--compile", "never")
    finally:
        stack_servers.reset()
    with tarfile.open(str(doc["bundle"])) as tf:
        tf.extractall(tmp / "x", filter="data")
    yield doc, tmp / "x" / NAME


def _figures(surface: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(cost, driver) as `text` says them, each found exactly as worded by
    airgap/contract/figures.py; the test fails here if a surface does not say one."""
    cost = set(COST.findall(text))
    driver = set(DRIVER.findall(text))
    assert len(cost) == 1, f"{surface}: build cost said {len(cost)} ways: {cost}\n{text}"
    assert len(driver) == 1, f"{surface}: driver said {len(driver)} ways: {driver}\n{text}"
    return next(iter(cost)), next(iter(driver))


def _checks(doc: dict[str, list[dict[str, str]]], *ids: str) -> str:
    return "\n".join(
        f"{c['summary']}\n{c['detail']}\n{c['fix']}" for c in doc["checks"] if c["id"] in ids
    )


@pytest.mark.slow
def test_every_surface_prints_the_same_estimate_archs_and_driver(
    left_to_the_server: tuple[dict[str, object], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc, root = left_to_the_server
    profile = find_profile(PROFILE)
    build = profile.source_build("flash-attn")
    assert build is not None
    took = server_build_time(build, "2.5.8", profile.toolchain.nvcc)
    assert took is not None and took.core_minutes_per_arch == CORE_MINUTES_PER_ARCH["flash-attn"]
    tc = profile.toolchain
    assert tc.driver and tc.driver_compat
    # What the data says: the figure, the architectures flash-attn 2.5.8 compiles, the driver.
    want_cost = (
        str(len(took.archs)),
        ", ".join("sm" + a.replace(".", "") for a in took.archs),
        f"{took.core_minutes_per_arch:.0f}",
    )
    want_driver = (tc.driver, profile.checks.torch_cuda or profile.cuda, tc.driver_compat)

    surfaces: dict[str, str] = {}
    # 1. build: the "left to build on the server" line and the driver note.
    surfaces["build"] = "\n".join([*doc["compiled"], *doc["notes"]])  # type: ignore[misc]
    # 2. profiles show.
    shown = run(["profiles", "show", PROFILE, "--json"], capsys)
    surfaces["profiles show"] = "\n".join(json.loads(shown.out)["result"]["figures"])
    # 3. the host's doctor, before any bundle exists.
    host = run(["doctor", "--profile", PROFILE, "--json"], capsys)
    surfaces["doctor --profile"] = _checks(json.loads(host.out)["result"], "memory", "driver")
    # 4. the server's doctor, the bundle's own program on the bundle's manifest.
    server = subprocess.run(
        [str(root / "doctor"), "--json"],
        capture_output=True,
        text=True,
        env=clean_environ(tmp_path),
        cwd=str(tmp_path),
        timeout=120,
        check=False,
    )
    assert server.stdout, server.stderr
    surfaces["./doctor"] = _checks(json.loads(server.stdout)["result"], "memory", "driver")
    # 5. the installer's phase estimate, from the bundle's lib/ (said before the build starts),
    #    and the driver as the server's doctor words it from the same manifest.
    said = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1])\n"
            "from verl_bundle.airgap.contract.figures import manifest_driver\n"
            "from verl_bundle.airgap.contract.manifest import load\n"
            "from verl_bundle.airgap.doctor.resources import phase_estimates\n"
            "m = load(sys.argv[2])\n"
            "print(*phase_estimates(m, 'flash-attn', 8), manifest_driver(m), sep='\\n')",
            str(root / "lib"),
            str(root),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    surfaces["install.sh phase estimate"] = said.stdout

    found = {name: _figures(name, text) for name, text in surfaces.items()}
    for name, (cost, driver) in found.items():
        print(f"{name:<26} {cost} {driver}")
        assert cost == want_cost, name
        assert driver == want_driver, name
    # The build's estimate at eight jobs, as the installer says it at eight: the same time.
    eight = f"{took.core_minutes_per_arch * len(took.archs) / 8:.0f} min at MAX_JOBS=8"
    assert eight in surfaces["build"] and eight in surfaces["profiles show"]
    assert f"about {eight}" in surfaces["install.sh phase estimate"]
    # Every fix that names a phase names one the bundle has (install.sh refuses any other).
    phases = {p["name"] for p in json.loads((root / "manifest.json").read_text())["phases"]}
    named = set(SKIP.findall("\n".join(surfaces.values())))
    assert named <= phases, (named, phases)


@pytest.mark.parametrize("name", [p.name for p in builtin_profiles()])
def test_profiles_show_and_the_doctor_agree_for_every_profile(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any bundle: `profiles show` and `doctor --profile` give each built-in profile's
    server build the same architectures and figure, and the same driver minimum, as its data."""
    profile = find_profile(name)
    shown = json.loads(run(["profiles", "show", name, "--json"], capsys).out)["result"]
    host = json.loads(run(["doctor", "--profile", name, "--json"], capsys).out)["result"]
    said = {
        "profiles show": _figures("profiles show", "\n".join(shown["figures"])),
        "doctor --profile": _figures("doctor --profile", _checks(host, "memory", "driver")),
    }
    (build,) = profile.source_builds
    flash = next(m.version for m in profile.static_metadata if m.name == "flash-attn")
    took = server_build_time(build, flash, profile.toolchain.nvcc)
    assert took is not None
    archs = ", ".join("sm" + a.replace(".", "") for a in took.archs)
    for surface, (cost, driver) in said.items():
        figure = f"{CORE_MINUTES_PER_ARCH['flash-attn']:.0f}"
        assert cost == (str(len(took.archs)), archs, figure), surface
        assert driver[0] == profile.toolchain.driver, surface
        assert driver[2] == profile.toolchain.driver_compat, surface
    if name == "cu130":  # flash-attn 2.8.3 with nvcc 13: upstream's four architectures
        assert said["profiles show"][0][:2] == ("4", "sm80, sm90, sm100, sm120")


def test_the_doctor_without_a_bundle_names_the_profiles_own_phases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`doctor --profile` plans with the profile's phases, each source build in its own, so any
    --skip-phase it advises is one install.sh accepts (no invented `source-builds`)."""
    for profile in builtin_profiles():
        m = manifest_for_profile(profile, profile.target())
        assert m.phase_names == tuple(p.name for p in profile.phases), profile.name
        for phase in m.phases:
            for b in phase.source_builds:
                assert profile.phase_of(b.package) == phase.name
    ok = run(["doctor", "--profile", "cu130", "--skip-phase", "flash-attn", "--json"], capsys)
    assert ok.code in (0, 4), ok.err  # checked (ready to install or not), not refused
    memory = _checks(json.loads(ok.out)["result"], "memory")
    assert "flash-attn's build left out (--skip-phase flash-attn)" in memory
    refused = run(["doctor", "--profile", "cu130", "--skip-phase", "source-builds"], capsys)
    assert refused.code == 2
    assert "no such phase; its phases are torch, wheels, flash-attn, verl" in refused.err


DRIVER_VERSION = re.compile(r"\b\d{3}\.\d{2}(?:\.\d{2})?\b")


def test_profile_notes_quote_no_figure_the_data_holds() -> None:
    """Notes are prose a build prints; the driver, the build time and the architectures are
    printed from the data instead, so a note cannot say another number."""
    for profile in builtin_profiles():
        for note in profile.notes:
            assert not DRIVER_VERSION.search(note), (profile.name, note)
            assert "CPU-core-minutes" not in note, (profile.name, note)
            assert not re.search(r"\b(two|three|four|\d) (GPU )?architectures\b", note), note
            assert not re.search(r"\bR\d{3}\b", note), (profile.name, note)


def test_the_docs_quote_the_figure_the_code_uses() -> None:
    """README and docs (not the dated benchmark results) give the measured figure per GPU
    architecture as compile/cost.py holds it."""
    figure = f"{CORE_MINUTES_PER_ARCH['flash-attn']:.0f}"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    quoted = 0
    for page in pages:
        if page.name == "benchmarks.md":
            continue
        text = " ".join(page.read_text().split())
        for n in re.findall(r"(\d+) CPU-core-minutes (?:per|for one) (?:GPU )?architecture", text):
            quoted += 1
            assert n == figure, f"{page.name}: {n} CPU-core-minutes per architecture"
        for n in re.findall(r"~(\d+) CPU-core-minutes each", text):
            quoted += 1
            assert n == figure, f"{page.name}: ~{n} CPU-core-minutes each"
    assert quoted
