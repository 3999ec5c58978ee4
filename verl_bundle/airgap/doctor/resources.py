"""Disk (free space, and a prefix this user can write to), memory, and the MAX_JOBS a source
build should use on this machine."""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.contract.figures import build_estimate as build_estimate
from verl_bundle.airgap.contract.manifest import Manifest
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts

DISK_MARGIN = 1.2  # free space wanted on top of the installed size
GIB = 1 << 30
MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class Place:
    """A directory the install writes to, as found."""

    label: str  # "install prefix", "temp dir"
    name: str  # as shown: the path, and the existing directory it will be made in
    path: str  # the nearest existing directory
    free: int | None  # bytes; None: see `error`
    error: str = ""
    read_only: bool = False  # on a read-only filesystem
    writable: bool = True  # this user may create files there


@dataclass(frozen=True)
class Memory:
    available: int | None  # bytes of RAM for new work; None: unknown
    cpus: int


def _existing(path: Path) -> Path:
    for p in [path, *path.parents]:
        if p.exists():
            return p
    return Path("/")


def _place(label: str, name: str, path: Path) -> Place:
    try:
        stat = os.statvfs(str(path))
    except OSError as exc:
        return Place(label, name, str(path), None, str(exc))
    return Place(
        label,
        name,
        str(path),
        stat.f_bavail * stat.f_frsize,
        read_only=bool(stat.f_flag & os.ST_RDONLY),
        writable=os.access(str(path), os.W_OK | os.X_OK),
    )


def probe_disk(prefix: str | None) -> tuple[Place, ...]:
    target = Path(prefix).expanduser().absolute() if prefix else Path.cwd()
    existing = _existing(target)
    where = f"{target} (on {existing})" if existing != target else str(target)
    tmp = tempfile.gettempdir()
    return (_place("install prefix", where, existing), _place("temp dir", tmp, Path(tmp)))


def _human(size: float) -> str:
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    return f"{size / (1 << 20):.0f} MiB"


def _unwritable(p: Place) -> tuple[str, str] | None:
    """(problem, fix) when the install cannot write to `p`."""
    if p.label == "install prefix":
        move = "choose a prefix on a writable filesystem (--prefix DIR)"
    else:
        move = "point TMPDIR at a writable directory with room (export TMPDIR=/path)"
    if p.read_only:
        return (
            f"{p.label} {p.name} is on a read-only filesystem",
            f"{move}, or remount that filesystem read-write",
        )
    if not p.writable:
        return (
            f"{p.label} {p.name}: this user (uid {os.getuid()}) cannot write to {p.path}",
            f"{move}, or give this user write access to {p.path} (or run as its owner)",
        )
    return None


def _image(facts: Facts) -> Check | None:
    """The install prefix is a read-only image mount (`install.sh --image`): nothing is
    installed on this node, so no free space is asked; the mount must serve the environment."""
    image = facts.node.image
    if not image or not image.startswith("squashfs image"):
        return None
    if facts.node.image_problem:
        return found(
            "fail",
            facts.node.image_problem,
            image,
            "mount the image the install made (squashfuse FILE PREFIX, at the same path as "
            "its --prefix; check FILE against FILE.sha256 first), with its interpreter inside "
            "(--python bundled) or at the same path on every node",
        )
    temp = [p for p in facts.disk if p.label != "install prefix" and p.free is not None]
    room = f"; temp dir {temp[0].name}: {_human(temp[0].free or 0)} free" if temp else ""
    return ok(f"install prefix: a {image}: nothing is installed here{room}")


@check("disk", generic=True)
def check_disk(plan: Plan, facts: Facts, opts: Options) -> Check:
    mounted = _image(facts)
    if mounted is not None:
        return mounted
    size = plan.installed_size
    need = int(size * DISK_MARGIN)
    have: list[str] = []
    problems: list[str] = []
    fixes: list[str] = []
    for p in facts.disk:
        if p.free is None:
            problems.append(f"cannot read the free space of {p.label} {p.name}: {p.error}")
            fixes.append(f"check that {p.path} is reachable")
            continue
        have.append(f"{p.label} {p.name}: {_human(p.free)} free")
        blocked = _unwritable(p)
        if blocked:
            problems.append(blocked[0])
            fixes.append(blocked[1])
        elif size and p.free < need:
            problems.append(
                f"{p.label} {p.name} has {_human(p.free)} free; the bundle needs {_human(need)} "
                f"({_human(size)} installed + {DISK_MARGIN - 1:.0%})"
            )
            fixes.append(
                f"free {_human(need - p.free)} there, or install elsewhere (--prefix DIR)"
                if p.label == "install prefix"
                else "point TMPDIR at a directory with room (export TMPDIR=/path)"
            )
    wanted = f"needs {_human(need)}" if size else "bundle size unknown"
    if problems:
        return found("fail", problems[0], "\n".join(problems + have), "; ".join(fixes))
    return ok(f"{'; '.join(have)} ({wanted})")


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _cgroup_room() -> int | None:
    """What a cgroup (container) memory limit leaves, when one is set."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < (1 << 60):
            return max(0, int(limit) - int(usage))
    return None


def read_mem_available() -> int | None:
    """Bytes of RAM available for new work: MemAvailable, or less under a container limit."""
    avail = None
    try:
        text = Path(MEMINFO).read_text()
    except OSError:
        text = ""
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.M)
    if m:
        avail = int(m.group(1)) * 1024
    room = _cgroup_room()
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


def probe_memory() -> Memory:
    return Memory(read_mem_available(), cpu_count())


def max_jobs(
    gib_per_job: float,
    limit: int | None,
    cpus: int | None = None,
    mem_available: int | None = None,
) -> int:
    """The MAX_JOBS a source build should use: half the CPUs, one job per `gib_per_job` GiB
    of available RAM, at most `limit`; at least 1. None reads this machine."""
    return jobs_and_limit(gib_per_job, limit, cpus, mem_available)[0]


def jobs_and_limit(
    gib_per_job: float,
    limit: int | None,
    cpus: int | None = None,
    mem_available: int | None = None,
) -> tuple[int, str]:
    """`max_jobs`, with what holds it there: "cpus" (half the CPUs), "memory" (the available
    RAM over `gib_per_job`) or "limit" (the profile's); the smallest wins, CPUs on a tie."""
    if cpus is None:
        cpus = cpu_count()
    if mem_available is None:
        mem_available = read_mem_available()
    jobs, why = cpus // 2 or 1, "cpus"
    if mem_available is not None and gib_per_job > 0:
        by_memory = math.floor(mem_available / GIB / gib_per_job)
        if by_memory < jobs:
            jobs, why = by_memory, "memory"
    if limit and limit < jobs:
        jobs, why = limit, "limit"
    return max(1, jobs), why


def phase_estimates(m: Manifest, phase: str, jobs: int) -> list[str]:
    """ "flash-attn takes about 25 min at MAX_JOBS=8 (...)" for each source build of `phase`
    with a measured figure (said by the installer before it starts the build; worded by
    contract/figures.py, as every other surface words it)."""
    found = m.phase(phase)
    builds = found.source_builds if found else ()
    return [
        f"{b.package} takes {build_estimate(b.build_time, jobs)}" for b in builds if b.build_time
    ]


@check("memory", generic=True)
def check_memory(plan: Plan, facts: Facts, opts: Options) -> Check:
    avail, cpus = facts.memory.available, facts.memory.cpus
    ram = f"{_human(avail)} available" if avail is not None else "available RAM unknown"
    if not plan.builds:
        why = "no bundle given" if plan.generic else "no source build in this bundle"
        return ok(f"{ram}, {cpus} CPUs; {why}{plan.left_out_note()}")
    lines: list[str] = []
    problems: list[str] = []
    forced = facts.env.get("MAX_JOBS", "").strip()
    by_cpus = False
    for b in plan.builds:
        jobs, why = jobs_and_limit(b.gib_per_job, b.limit, cpus, avail)
        cap = f", limit {b.limit}" if b.limit else ""
        eta = build_estimate(b.build_time, int(forced) if forced.isdigit() else jobs)
        lines.append(
            f"{b.package}: MAX_JOBS={jobs} ({ram}, {b.gib_per_job:g} GiB per job, {cpus} CPUs{cap})"
            + (f"; the build takes {eta}" if eta else "")
        )
        if avail is not None and avail < b.gib_per_job * GIB:
            problems.append(
                f"{b.package}: {ram}, less than one compile job's {b.gib_per_job:g} GiB: the "
                "build may be killed for lack of memory"
            )
        elif jobs == 1:
            held = {
                "cpus": f"half of these {cpus} CPUs",
                "memory": f"{ram} at {b.gib_per_job:g} GiB per job",
                "limit": f"the profile's limit of {b.limit}",
            }[why]
            by_cpus = by_cpus or why == "cpus"
            problems.append(f"{b.package} will build with MAX_JOBS=1 ({held}): expect a slow build")
        if forced.isdigit() and avail is not None and int(forced) * b.gib_per_job * GIB > avail:
            problems.append(
                f"MAX_JOBS={forced} from the environment wins, and needs about "
                f"{int(forced) * b.gib_per_job:g} GiB"
            )
    if forced:
        lines.append(f"MAX_JOBS={forced} is set in the environment and overrides these")
    if problems:
        phases = " ".join(f"--skip-phase {p}" for p in dict.fromkeys(b.phase for b in plan.builds))
        return found(
            "warn",
            problems[0],
            "\n".join(problems + lines),
            (
                "build on a host with more CPUs (MAX_JOBS=N in the environment uses more of "
                "these, if the memory allows it)"
                if by_cpus
                else "free memory (stop other jobs) or add RAM; a lower MAX_JOBS trades time "
                "for memory"
            )
            + f"; or leave the build out (./install.sh {phases})",
        )
    return ok("; ".join(lines))
