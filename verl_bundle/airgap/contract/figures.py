"""The figures a user reads about a bundle, worded in one place from the manifest's values: what
a server-side source build costs (its GPU architectures and the host's measured CPU-core-minutes
for each) and the NVIDIA driver the stack needs. `build`, `profiles show`, the doctor (host and
server) and the installer all print these sentences, so they cannot disagree; no number is typed
in prose anywhere else. Standard library only, Python 3.8+.
"""

from __future__ import annotations

from typing import Iterable

from verl_bundle.airgap.contract.manifest_values import BuildTime, Manifest, Toolchain

MEASURED = "measured on the online host"
# MAX_JOBS figures a build-time sentence gives when the server's own is not known yet (at build
# time, in `profiles show`): one job, and a many-core server's.
JOBS_SHOWN = (1, 8)


def sm_list(archs: Iterable[str]) -> str:
    """("8.0", "9.0") -> "sm80, sm90"."""
    return ", ".join("sm" + a.replace(".", "").replace("+PTX", "") for a in archs if a)


def duration(minutes: float) -> str:
    """25 -> "25 min"; 360 -> "6.0 h"."""
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def core_minutes(took: BuildTime) -> float:
    """The whole build's CPU-core-minutes: the per-architecture figure times the architectures."""
    return took.core_minutes_per_arch * (len(took.archs) or 1)


def build_cost(took: BuildTime) -> str:
    """ "2 GPU architectures (sm80, sm90) at ~180 CPU-core-minutes each, measured on the online
    host" (the figure per architecture alone when the architectures are not known)."""
    per = f"~{took.core_minutes_per_arch:.0f} CPU-core-minutes"
    n = len(took.archs)
    if not n:
        return f"{per} per GPU architecture, {MEASURED}"
    plural = "s" if n != 1 else ""
    return f"{n} GPU architecture{plural} ({sm_list(took.archs)}) at {per} each, {MEASURED}"


def build_estimate(took: BuildTime | None, jobs: int) -> str:
    """How long a source build takes at MAX_JOBS=`jobs`: "about 3.0 h at MAX_JOBS=2 (2 GPU
    architectures (sm80, sm90) at ~180 CPU-core-minutes each, measured on the online host)";
    "" with no figure (nothing is invented)."""
    if took is None:
        return ""
    wall = core_minutes(took) / max(1, jobs)
    return f"about {duration(wall)} at MAX_JOBS={jobs} ({build_cost(took)})"


def build_range(took: BuildTime, jobs: Iterable[int] = JOBS_SHOWN) -> str:
    """ "about 12.0 h at MAX_JOBS=1, 1.5 h at MAX_JOBS=8 (4 GPU architectures ...)": for when the
    server's MAX_JOBS is not known yet."""
    walls = [f"{duration(core_minutes(took) / max(1, j))} at MAX_JOBS={j}" for j in jobs]
    return f"about {', '.join(walls)} ({build_cost(took)})"


def runtime_cuda(m: Manifest) -> str:
    """The CUDA the stack's wheels run (torch's, as the profile checks it), which is what the
    `driver` figure is for; the bundle's CUDA when the profile names none."""
    return m.checks.torch_cuda or m.target.cuda


def driver_minimum(toolchain: Toolchain, cuda: str) -> str:
    """ "NVIDIA driver >= 550.54.14 (the full CUDA 12.4 runtime), or >= 525.60.13 under CUDA
    minor-version compatibility": the profile's `driver` and `driver-compat`, each said for what
    it is; "" when the profile names neither."""
    full, compat = toolchain.driver, toolchain.driver_compat
    parts: list[str] = []
    if full:
        parts.append(f">= {full} (the full CUDA {cuda} runtime)")
    if compat and compat != full:
        parts.append(f">= {compat} under CUDA minor-version compatibility")
    return "NVIDIA driver " + ", or ".join(parts) if parts else ""


def manifest_driver(m: Manifest) -> str:
    """driver_minimum for a manifest."""
    return driver_minimum(m.toolchain, runtime_cuda(m))


def source_build_lines(m: Manifest) -> list[str]:
    """One line per source build the server would compile, with its phase and its cost:
    "flash-attn (phase flash-attn), built on the server: about 12.0 h at MAX_JOBS=1, ..."."""
    lines = []
    for phase in m.phases:
        for b in phase.source_builds:
            cost = build_range(b.build_time) if b.build_time else "no measured figure"
            lines.append(f"{b.package} (phase {phase.name}), built on the server: {cost}")
    return lines
