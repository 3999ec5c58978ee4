"""What a source build costs, from one measured figure: the CPU-core-minutes to compile one GPU
architecture (CORE_MINUTES_PER_ARCH), times the architectures the build compiles. Here, the
host's own compile (--cuda-archs, else the profile's, else DEFAULT_ARCHS) and its estimate before
it starts; for the server, the manifest's `build_time` (the profile's architectures, else what
the package's own build compiles by default), which the doctor and the installer read. The
sentences are worded by airgap/contract/figures.py, the one place every surface takes them from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.figures import build_cost, duration
from verl_bundle.profile.model import Profile, SourceBuild

# Measured host figures: CPU-core-minutes to compile one GPU architecture. flash-attn: `make
# compile-real` (docs/benchmarks.md): 2.8.3 with nvcc 13.0 and gcc 12 for sm90, all 73 objects,
# on an idle 2-core host on 2026-12-01: 100 min at MAX_JOBS=2, and 186 CPU-minutes for the whole
# target (build venv, compile, bundle and its rehearsal), so about 180 for the compile. (The
# first figure, 440, extrapolated 12 objects compiled on a loaded host.)
CORE_MINUTES_PER_ARCH: Mapping[str, float] = {"flash-attn": 180.0}
# A package's own GPU-architecture variable, besides TORCH_CUDA_ARCH_LIST ("80;90" style).
ARCH_VARIABLES: Mapping[str, str] = {"flash-attn": "FLASH_ATTN_CUDA_ARCHS"}
# The architectures a host compile builds when neither --cuda-archs nor the profile names any,
# by CUDA major.
DEFAULT_ARCHS: Mapping[int, str] = {11: "8.0;8.6", 12: "8.0;9.0", 13: "8.0;9.0"}


def _dotted(arch: str) -> str:
    """ "90" -> "9.0", "120" -> "12.0"; "8.6" and "9.0+PTX" as they are."""
    base, plus, rest = arch.strip().partition("+")
    if "." in base or not base.isdigit() or len(base) < 2:
        return arch.strip()
    return f"{base[:-1]}.{base[-1]}{plus}{rest}"


def named_archs(package: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The architectures a source build's environment names (TORCH_CUDA_ARCH_LIST, else the
    package's own variable), as "8.0"; () when it names none."""
    own = ARCH_VARIABLES.get(canonicalize_name(package))
    given = env.get("TORCH_CUDA_ARCH_LIST") or (env.get(own) if own else None)
    if not given:
        return ()
    return tuple(_dotted(a) for a in given.replace(" ", ";").split(";") if a.strip())


def host_archs(package: str, env: Mapping[str, str], cuda: str, given: str | None) -> str:
    """What a host compile builds, "8.0;9.0": --cuda-archs, else the profile's, else the
    default for the CUDA major."""
    if given:
        return given
    named = named_archs(package, env)
    if named:
        return env.get("TORCH_CUDA_ARCH_LIST") or ";".join(named)
    return DEFAULT_ARCHS.get(int(cuda.split(".")[0]), "8.0;9.0")


def _at_least(version: str | None, floor: str) -> bool:
    """`version` >= `floor`; an unknown version counts as new enough."""
    try:
        return version is None or Version(version) >= Version(floor)
    except InvalidVersion:
        return True


def server_default_archs(package: str, version: str | None, nvcc: str | None) -> tuple[str, ...]:
    """What a package's own build compiles on the server when its environment names nothing.
    flash-attn's setup.py: sm80, and sm90 with nvcc >= 11.8 (v2.5.8 to v2.7.x); from 2.8 its
    FLASH_ATTN_CUDA_ARCHS defaults to "80;90;100;120", sm100 and sm120 only with nvcc >= 12.8
    (setup.py at v2.8.3). () for a package with no known default."""
    if canonicalize_name(package) != "flash-attn":
        return ()
    archs = ["8.0", "9.0"] if _at_least(nvcc, "11.8") else ["8.0"]
    if version is not None and _at_least(version, "2.8") and _at_least(nvcc, "12.8"):
        archs += ["10.0", "12.0"]
    return tuple(archs)


def server_build_time(
    build: SourceBuild, version: str | None = None, nvcc: str | None = None
) -> mf.BuildTime | None:
    """The manifest's figure for a server-side build of `version`, compiled with the profile's
    `nvcc`: the host's measured CPU-core-minutes per architecture and the architectures it will
    compile (the profile's, else the package's default). None with no measured figure."""
    minutes = CORE_MINUTES_PER_ARCH.get(canonicalize_name(build.package))
    if minutes is None:
        return None
    archs = named_archs(build.package, build.env)
    return mf.BuildTime(minutes, archs or server_default_archs(build.package, version, nvcc))


def pinned_version(profile: Profile, package: str) -> str | None:
    """The version a profile pins for `package` (its static metadata, else an `==` requirement),
    before any lock exists; None when it pins none."""
    name = canonicalize_name(package)
    for meta in profile.static_metadata:
        if canonicalize_name(meta.name) == name:
            return meta.version
    for text in profile.requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if canonicalize_name(req.name) == name and pins:
            return pins[0]
    return None


def cores() -> int:
    """The cores this process may run on (its affinity), as a compile's jobs see them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class HostEstimate:
    """What a host compile is about to cost, said before it starts."""

    package: str
    archs: tuple[str, ...]  # "8.0", "9.0"
    jobs: int  # the MAX_JOBS it chose
    cores: int
    minutes: float | None  # wall minutes on this host; None with no measured figure
    mode: str  # --compile

    def line(self) -> str:
        """ "flash-attn: compiling here for sm80,sm90: about 3.0 h on these 2 cores at
        MAX_JOBS=2 (...); --compile never leaves it to the server, --cuda-archs 9.0 halves it"."""
        sms = ",".join("sm" + a.replace(".", "").replace("+PTX", "") for a in self.archs)
        head = f"{self.package}: compiling here for {sms}"
        where = f"on these {self.cores} cores at MAX_JOBS={self.jobs}"
        if self.minutes is None:
            return f"{head} {where} (no measured figure for how long it takes)"
        per = CORE_MINUTES_PER_ARCH[canonicalize_name(self.package)]
        cost = build_cost(mf.BuildTime(per, self.archs))
        hints = ["--compile never leaves it to the server"] if self.mode == "auto" else []
        n = len(self.archs)
        if n > 1:
            fewer = "halves it" if n == 2 else f"takes about {duration(self.minutes / n)}"
            hints.append(f"--cuda-archs {self.archs[-1]} {fewer}")
        tail = f"; {', '.join(hints)}" if hints else ""
        return f"{head}: about {duration(self.minutes)} {where} ({cost}){tail}"


# A host compile estimated longer than this is not started on one line's notice: on a terminal
# the build asks, without one it refuses unless --yes or --compile always says so.
LONG_MINUTES = 30.0


def needs_consent(estimate: HostEstimate, yes: bool) -> bool:
    """Whether `estimate` is too long to start unasked (--yes and --compile always are a yes)."""
    if yes or estimate.mode == "always" or estimate.minutes is None:
        return False
    return estimate.minutes > LONG_MINUTES


def host_estimate(package: str, archs: str, jobs: int, mode: str) -> HostEstimate:
    """The estimate for compiling `archs` here with `jobs` parallel jobs: the measured figure
    times the architectures, over the jobs that can run at once on this host's cores."""
    listed = tuple(a for a in archs.split(";") if a)
    here = cores()
    per = CORE_MINUTES_PER_ARCH.get(canonicalize_name(package))
    minutes = None if per is None else per * len(listed) / max(1, min(jobs, here))
    return HostEstimate(package, listed, jobs, here, minutes, mode)
