"""The built-in catalog: each profile pins the stack it is named for, its committed lock is
current and self-consistent, and `--cuda X.Y` picks the profile CUDA compatibility allows.

No network: the locks were made with `verl-bundle lock` and are read as committed files.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from support.cli import run

from verl_bundle.errors import UsageError
from verl_bundle.profile.catalog import builtin_profiles, profile_for_cuda
from verl_bundle.profile.model import Profile
from verl_bundle.resolve.lock import Lock, read_lock

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 hosts only
    import tomli as tomllib

# What each built-in profile is named for: torch, triton, flash-attn, vllm and verl, exactly.
STACKS: dict[str, dict[str, str]] = {
    # The design card's literal pins: installs, cannot train (its readiness limit says so).
    "cu118-legacy": {
        "torch": "2.1.2",
        "triton": "2.1.0",
        "flash-attn": "2.5.8",
        "vllm": "0.3.1",
        "verl": "0.2.0.post2",
    },
    # The CUDA 11.8 stack whose trainer imports, and its CUDA 12 twin from the default index.
    "cu118": {
        "torch": "2.5.1",
        "triton": "3.1.0",
        "flash-attn": "2.7.3",
        "vllm": "0.7.3",
        "verl": "0.3.0.post1",
    },
    "cu121": {
        "torch": "2.5.1",
        "triton": "3.1.0",
        "flash-attn": "2.7.3",
        "vllm": "0.7.3",
        "verl": "0.3.0.post1",
    },
    "cu124": {
        "torch": "2.6.0",
        "triton": "3.2.0",
        "flash-attn": "2.7.4.post1",
        "vllm": "0.8.5.post1",
        "verl": "0.4.1",
    },
    "cu130": {
        "torch": "2.11.0",
        "triton": "3.6.0",
        "flash-attn": "2.8.3",
        "vllm": "0.24.0",
        "verl": "0.9.1",
    },
    # verl main at 7bc80c00, its stack from its own uv.lock (the pins are the committed lock's).
    "cu130-py312": {
        "torch": "2.11.0",
        "triton": "3.6.0",
        "flash-attn": "2.8.3",
        "vllm": "0.24.0",
        "verl": "0.10.0.dev0",
    },
}

PROFILES = builtin_profiles()
LOCKED = [p for p in PROFILES if p.lock is not None]


def by_name(profiles: list[Profile]) -> dict[str, Profile]:
    return {p.name: p for p in profiles}


def pins(profile: Profile) -> dict[str, str]:
    """Package -> version for each `name==version` requirement of the profile; for a profile
    whose stack is upstream's uv.lock, the committed lock's versions of the stack's keys."""
    if profile.uv_lock is not None:
        assert profile.lock is not None
        lock = read_lock(profile.lock)
        keys = STACKS[profile.name]
        return {p.name: p.version for p in lock.packages if p.name in keys}
    out: dict[str, str] = {}
    for text in profile.requirements:
        req = Requirement(text)
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            out[canonicalize_name(req.name)] = specs[0].version
    return out


@pytest.fixture(params=LOCKED, ids=lambda p: p.name)
def locked(request: pytest.FixtureRequest) -> tuple[Profile, Lock]:
    profile: Profile = request.param
    assert profile.lock is not None
    assert profile.lock.is_file(), f"{profile.name}: its lock {profile.lock} is not committed"
    return profile, read_lock(profile.lock)


# -- the profiles ---------------------------------------------------------------------------


def test_the_catalog_is_the_issue_list() -> None:
    assert sorted(by_name(PROFILES)) == sorted(STACKS)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_profile_pins_the_stack_it_is_named_for(name: str) -> None:
    profile = by_name(PROFILES)[name]
    assert profile.name == name and name.split("-")[0] == "cu" + profile.cuda.replace(".", "")
    assert pins(profile) == STACKS[name]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_profile_checks_name_the_torch_it_pins(profile: Profile) -> None:
    torch_version = profile.checks.torch_version
    assert torch_version is not None
    assert Version(torch_version).public == STACKS[profile.name]["torch"]
    torch_cuda = profile.checks.torch_cuda
    assert torch_cuda is not None
    assert Version(torch_version).local == "cu" + torch_cuda.replace(".", "")
    # torch's CUDA is the profile's, or a later minor of the same major that a driver of the
    # profile's CUDA runs under minor-version compatibility (cu121: the default index's torch
    # 2.5.1 is its CUDA 12.4 build).
    assert Version(torch_cuda).major == Version(profile.cuda).major
    assert Version(torch_cuda) >= Version(profile.cuda)
    assert profile.toolchain.nvcc is not None
    assert Version(profile.toolchain.nvcc).major == Version(profile.cuda).major


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_profile_builds_flash_attn_on_the_server_offline(profile: Profile) -> None:
    build = profile.source_build("flash-attn")
    assert build is not None
    # Without it setup.py first tries GitHub, which fails or hangs on an air-gapped server.
    assert build.env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert profile.phase_of("torch") == "torch"
    assert [ph.name for ph in profile.phases][-2:] == ["flash-attn", "verl"]


# -- the committed locks ----------------------------------------------------------------------


def test_every_profile_that_needs_no_other_location_has_a_lock() -> None:
    for profile in PROFILES:
        if not profile.bindings and all(a.fallback == "resolved" for a in profile.artifacts):
            assert profile.lock is not None, f"{profile.name} resolves from the default index alone"
    assert LOCKED


def test_lock_is_named_for_its_profile_and_target(locked: tuple[Profile, Lock]) -> None:
    profile, _ = locked
    assert profile.lock is not None
    assert profile.lock.parent == profile.path.parent / "locks"
    assert profile.lock.name == f"pylock.{profile.name}-{profile.target().python_tag}.toml"


def test_lock_is_current_for_its_profile(locked: tuple[Profile, Lock]) -> None:
    profile, lock = locked
    assert lock.profile == profile.name
    assert lock.profile_sha256 == profile.sha256, (
        f"{profile.lock} is stale: {profile.path} changed after it was made; "
        f"run `verl-bundle lock --profile {profile.path} -o {profile.lock}`"
    )
    assert lock.target == profile.target()
    assert lock.cuda == profile.cuda
    assert lock.exclude_newer == profile.exclude_newer


def test_lock_satisfies_every_requirement_and_constraint(locked: tuple[Profile, Lock]) -> None:
    profile, lock = locked
    for text in (*profile.requirements, *profile.bootstrap):
        req = Requirement(text)
        pkg = lock.package(req.name)
        assert pkg is not None, f"{profile.name}: {req.name} is not in the lock"
        assert req.specifier.contains(Version(pkg.version).public, prereleases=True), (
            f"{profile.name}: locked {pkg.pin} does not satisfy {text}"
        )
    for text in profile.constraints:
        req = Requirement(text)
        pkg = lock.package(req.name)
        if pkg is not None:
            assert req.specifier.contains(Version(pkg.version).public, prereleases=True)


def test_lock_holds_the_torch_the_checks_expect(locked: tuple[Profile, Lock]) -> None:
    profile, lock = locked
    torch = lock.package("torch")
    assert torch is not None and profile.checks.torch_version is not None
    assert Version(torch.version).public == Version(profile.checks.torch_version).public
    assert torch.phase == "torch"


def test_lock_has_one_hashed_sized_file_per_package(locked: tuple[Profile, Lock]) -> None:
    profile, lock = locked
    assert profile.lock is not None
    names = [p.name for p in lock.packages]
    assert len(names) == len(set(names))
    for pkg in lock.packages:
        assert re.fullmatch(r"[0-9a-f]{64}", pkg.file.sha256), pkg.name
        assert isinstance(pkg.file.size, int) and pkg.file.size > 0, pkg.name
        # A wheel made here from git says where from (git+URL@COMMIT); every other an https URL.
        assert pkg.file.url.startswith("git+https://" if pkg.location == "local" else "https://")
    # read_lock takes `wheels` before `sdist`; the file itself must not hold both, or more.
    raw: dict[str, Any] = tomllib.loads(profile.lock.read_text(encoding="utf-8"))
    for entry in raw["packages"]:
        files = len(entry.get("wheels", [])) + (1 if "sdist" in entry else 0)
        assert files == 1, f"{entry['name']} has {files} files"


def test_lock_compiles_only_declared_source_builds_on_the_server(
    locked: tuple[Profile, Lock],
) -> None:
    profile, lock = locked
    phases = {ph.name for ph in profile.phases} | {"bootstrap"}
    for pkg in lock.packages:
        assert pkg.phase in phases, pkg.name
        if pkg.kind == "sdist":
            build = profile.source_build(pkg.name)
            assert build is not None, f"{pkg.name} is an sdist the profile does not build"
            for dep in build.build_requires:
                assert lock.package(Requirement(dep).name) is not None, (pkg.name, dep)
        if profile.source_build(pkg.name) is not None:
            # A CUDA package is never built into a wheel on the online host.
            assert pkg.kind in ("wheel", "sdist"), pkg.name


# -- --cuda X.Y --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "name"),
    [
        ("11.8", "cu118"),
        ("12.1", "cu121"),
        ("12.2", "cu121"),  # minor-version compatibility: the highest 12.x not above 12.2
        ("12.3", "cu121"),
        ("12.4", "cu124"),
        ("12.6", "cu124"),
        ("12.9", "cu124"),
        ("13.0", "cu130"),
        ("13.2", "cu130"),
    ],
)
def test_cuda_picks_the_highest_minor_not_above_the_request(cuda: str, name: str) -> None:
    assert profile_for_cuda(cuda).name == name


@pytest.mark.parametrize("cuda", ["10.2", "11.7", "12.0", "14.0", "12", "cu121"])
def test_cuda_without_a_compatible_profile_is_a_usage_error(cuda: str) -> None:
    with pytest.raises(UsageError, match=re.escape(cuda)):
        profile_for_cuda(cuda)


def test_build_with_an_unknown_cuda_exits_2_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(["build", "--cuda", "10.2", "-o", str(tmp_path)], capsys)
    assert result.code == 2
    assert "10.2" in result.err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("cuda", "says"),
    [
        ("11.7", "runs cu118 (CUDA 11.8) under minor-version compatibility if it is >= 450.80.02"),
        ("12.0", "runs cu121 (CUDA 12.1) under minor-version compatibility if it is >= 525.60.13"),
        ("14.0", "the newest built-in it runs is cu130 (CUDA 13.0): pass --cuda 13.0"),
        ("10.2", "the oldest built-in is cu118 (CUDA 11.8): upgrade the driver to >= 450.80.02"),
    ],
)
def test_cuda_without_a_profile_names_what_would_run(cuda: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        profile_for_cuda(cuda)
    message = str(caught.value)
    assert says in message
    # Every built-in with the CUDA versions it is the newest fit for.
    assert "cu118 (CUDA 11.8-11.x), cu121 (CUDA 12.1-12.3), cu124 (CUDA 12.4-12.x)" in message
    assert "\n" not in message
