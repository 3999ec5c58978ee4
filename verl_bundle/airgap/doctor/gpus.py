"""The NVIDIA driver (libcuda.so.1 and nvidia-smi), the GPUs this process would see, and their
placement (CUDA_VISIBLE_DEVICES, torchrun variables)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.contract.figures import manifest_driver, runtime_cuda
from verl_bundle.airgap.doctor.commands import Run, last_line, probe, run
from verl_bundle.airgap.doctor.devices import (
    TORCHRUN_VARS,
    Gpu,
    torchrun_problems,
    visible_devices,
)
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok
from verl_bundle.airgap.doctor.versions import cuda_name, older, parse_version

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts

BUSY_MIB = 1024  # memory in use on a GPU that no listed process explains
GPU_QUERY = "--query-gpu=index,uuid,memory.total,memory.used,driver_version,name"
APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
CSV = "--format=csv,noheader,nounits"
CUDA_ERRORS = {
    3: "CUDA_ERROR_NOT_INITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}
DRIVER_FROM = "NVIDIA's driver packages from the intranet mirror, or the driver runfile carried in"

# Run in a child process: a broken or hung driver can crash or block whoever loads it.
DRIVER_PROBE = """
import ctypes, json
out = {}
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    out["error"] = str(exc)
else:
    out["init"] = lib.cuInit(0)
    version = ctypes.c_int(0)
    out["rc"] = lib.cuDriverGetVersion(ctypes.byref(version))
    out["version"] = version.value
    try:
        with open("/proc/self/maps") as fh:
            out["path"] = [l.split()[-1] for l in fh if "libcuda.so" in l][0]
    except (OSError, IndexError):
        pass
print(json.dumps(out))
"""


@dataclass(frozen=True)
class App:
    gpu_uuid: str
    pid: str
    name: str
    used_memory: int | None  # MiB


@dataclass(frozen=True)
class GpuListing:
    gpus: tuple[Gpu, ...] = ()
    apps: tuple[App, ...] = ()
    problem: str = ""  # why there is no listing
    unreadable: tuple[str, ...] = ()  # fields nvidia-smi printed that could not be read


@dataclass(frozen=True)
class DriverProbe:
    """What loading libcuda.so.1 in a child process told: `data` is None when it did not
    answer (see `run`)."""

    data: dict[str, Any] | None
    run: Run


_NUMBER = re.compile(r"[0-9]{1,12}")  # ASCII digits only: "²".isdigit() is True
_FIELD = 120  # characters of a field kept (a name, a UUID): nvidia-smi's output is not trusted


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if _NUMBER.fullmatch(text) else None


def parse_gpus(text: str, unreadable: list[str] | None = None) -> list[Gpu]:
    """Rows of `nvidia-smi GPU_QUERY --format=csv,noheader,nounits`. A row whose index is not
    a number is left out, and a number field that is not one is None; each is noted in
    `unreadable` (naming the field) when given."""
    notes = unreadable if unreadable is not None else []
    gpus = []
    for line in text.splitlines():
        parts = [p.strip()[:_FIELD] for p in line.split(",", 5)]
        if len(parts) != 6:
            continue
        if not _NUMBER.fullmatch(parts[0]):
            notes.append(f"index {parts[0]!r} is not a number (row left out)")
            continue
        numbers = {"memory.total": _int(parts[2]), "memory.used": _int(parts[3])}
        for field, value in numbers.items():
            given = parts[2 if field == "memory.total" else 3]
            if value is None and given not in ("[N/A]", "N/A", "[Not Supported]"):
                notes.append(f"GPU {parts[0]}: {field} {given!r} is not a number")
        gpus.append(
            Gpu(
                int(parts[0]),
                parts[1],
                numbers["memory.total"],
                numbers["memory.used"],
                parts[4],
                parts[5],
            )
        )
    return gpus


def parse_apps(text: str) -> list[App]:
    """Rows of `nvidia-smi APPS_QUERY --format=csv,noheader,nounits`."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0]:
            apps.append(App(parts[0], parts[1], ",".join(parts[2:-1]), _int(parts[-1])))
    return apps


def list_gpus() -> GpuListing:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuListing(problem="nvidia-smi not found")
    r = run([smi, GPU_QUERY, CSV])
    if not r.ok:
        why = r.problem or last_line(r.out) or r.why()
        return GpuListing(problem=f"nvidia-smi {why}" if r.problem else f"nvidia-smi: {why}")
    notes: list[str] = []
    gpus = parse_gpus(r.out, notes)
    if not gpus:
        said = last_line(r.out)[:_FIELD] or "no output"
        return GpuListing(problem=f"nvidia-smi lists no GPU ({said!r})", unreadable=tuple(notes))
    apps = run([smi, APPS_QUERY, CSV])
    listed = tuple(parse_apps(apps.out)) if apps.ok else ()
    return GpuListing(tuple(gpus), listed, unreadable=tuple(notes))


def probe_driver() -> DriverProbe:
    data, r = probe(DRIVER_PROBE)
    return DriverProbe(data, r)


def _libcuda_problems(
    plan: Plan, probe_: DriverProbe, sev: str
) -> tuple[list[str], list[tuple[str, str, str]]]:
    have: list[str] = []
    problems: list[tuple[str, str, str]] = []  # status, short, long
    data, r = probe_.data, probe_.run
    need = parse_version(plan.cuda or "")
    if data is None:
        short = f"loading libcuda.so.1 {r.why()}"
        problems.append((sev, short, f"{short} (a hung or broken driver?)"))
        return have, problems
    if "error" in data:
        problems.append(
            (sev, "libcuda.so.1 not found", f"libcuda.so.1 does not load: {data['error']}")
        )
        return have, problems
    version = int(data.get("version") or 0)
    have.append(f"libcuda supports CUDA {cuda_name(version)}")
    init = int(data.get("init") or 0)
    if init:
        short = f"cuInit failed with {init} ({CUDA_ERRORS.get(init, 'error')})"
        problems.append((sev, short, short))
    if need and version < need[0] * 1000 + (need[1] if len(need) > 1 else 0) * 10:
        short = (
            f"the driver supports CUDA {cuda_name(version)}, older than the bundle's {plan.cuda}"
        )
        compat = ""
        if version // 1000 == need[0]:
            compat = (
                "; within one major version CUDA minor-version compatibility may still run "
                "the wheels, without newer features and without JIT of newer PTX"
            )
        problems.append((sev, short, short + compat))
    return have, problems


def _driver_version_problems(plan: Plan, driver: str, sev: str) -> list[tuple[str, str, str]]:
    if plan.driver_compat and older(driver, plan.driver_compat):
        short = f"driver {driver} is older than {plan.driver_compat}"
        return [(sev, short, f"{short}, the oldest driver for any CUDA {plan.cuda} runtime")]
    if plan.driver and older(driver, plan.driver):
        runtime = runtime_cuda(plan.manifest) if plan.manifest else plan.cuda
        short = (
            f"driver {driver} is older than {plan.driver}: CUDA {runtime} runs in minor-version "
            "compatibility mode"
        )
        return [
            (
                "warn",
                short,
                f"driver {driver} is older than {plan.driver} (the full CUDA {runtime} runtime) "
                f"but not than {plan.driver_compat}: CUDA {runtime} wheels run in minor-version "
                "compatibility mode, where PTX newer than the driver cannot be JIT-compiled",
            )
        ]
    return []


@check("driver", generic=True)
def check_driver(plan: Plan, facts: Facts, opts: Options) -> Check:
    """libcuda.so.1's CUDA version (cuDriverGetVersion) and nvidia-smi's driver version."""
    sev = "fail" if opts.require_gpu else "warn"
    listing = facts.gpus
    have, problems = _libcuda_problems(plan, facts.driver, sev)
    if listing.problem:
        problems.append((sev, listing.problem, listing.problem))
    elif listing.gpus:
        driver = listing.gpus[0].driver
        have.insert(0, f"driver {driver}")
        problems += _driver_version_problems(plan, driver, sev)
    needs = manifest_driver(plan.manifest) if plan.manifest else ""
    wanted = (
        f"bundle: CUDA {plan.cuda}" + (f"; it needs an {needs}" if needs else "")
        if plan.cuda
        else "no bundle given"
    )
    if not problems:
        return ok(f"{', '.join(have)} ({wanted})")
    status = "fail" if any(p[0] == "fail" for p in problems) else "warn"
    summary = "; ".join(p[1] for p in problems)
    want = plan.driver or plan.driver_compat
    fix = (
        f"upgrade the NVIDIA driver to >= {want} ({DRIVER_FROM}) and reboot"
        if want
        else f"reinstall the NVIDIA driver ({DRIVER_FROM}) and reboot"
    )
    data = facts.driver.data
    if data is not None and "error" in data and listing.problem == "nvidia-smi not found":
        summary = "no NVIDIA driver: neither libcuda.so.1 nor nvidia-smi is here"
        fix = (
            (f"install the NVIDIA driver >= {want}" if want else "install the NVIDIA driver")
            + f" ({DRIVER_FROM}) and reboot; on a staging machine without GPUs this warning is "
            "expected (--require-gpu makes it a failure)"
        )
    detail = [p[2] for p in problems] + ([f"found: {', '.join(have)}"] if have else [])
    return found(status, summary, "\n".join([*detail, wanted]), fix)


def _mib(value: int | None) -> str:
    return f"{value} MiB" if value is not None else "? MiB"


def _busy(visible: list[Gpu], listing: GpuListing) -> tuple[list[Gpu], list[str]]:
    busy: list[Gpu] = []
    problems: list[str] = []
    for g in visible:
        held = [a for a in listing.apps if a.gpu_uuid.lower() == g.uuid.lower()]
        if held:
            busy.append(g)
            who = ", ".join(f"pid {a.pid} {a.name} ({_mib(a.used_memory)})" for a in held)
            problems.append(f"GPU {g.index} ({g.uuid}) is busy: {who}")
        elif (g.memory_used or 0) > BUSY_MIB:
            busy.append(g)
            problems.append(
                f"GPU {g.index} ({g.uuid}) has {_mib(g.memory_used)} in use by processes not "
                "visible here (another container?)"
            )
    return busy, problems


@check("gpus", generic=True)
def check_gpus(plan: Plan, facts: Facts, opts: Options) -> Check:
    sev = "fail" if opts.require_gpu else "warn"
    listing = facts.gpus
    if listing.problem:
        return found(
            sev,
            f"no GPU listed: {listing.problem}",
            "nothing to check on a machine without a working NVIDIA driver",
            "install the NVIDIA driver (see driver), or run this on the GPU server",
        )
    visible, _ = visible_devices(facts.env.get("CUDA_VISIBLE_DEVICES"), listing.gpus)
    sizes: dict[int | None, list[Gpu]] = {}
    for g in visible:
        sizes.setdefault(g.memory_total, []).append(g)
    kinds = ", ".join(
        f"{len(gs)} x {gs[0].name} ({_mib(size)})"
        for size, gs in sorted(sizes.items(), key=lambda kv: -(kv[0] or 0))
    )
    summary = f"{len(visible)} of {len(listing.gpus)} GPUs visible: {kinds or 'none'}"
    if not visible:
        return found(
            sev,
            summary,
            "no GPU is visible to CUDA (see placement)",
            "export CUDA_VISIBLE_DEVICES with at least one GPU of nvidia-smi -L, or unset it",
        )
    busy, problems = _busy(visible, listing)
    fixes: list[str] = []
    if listing.unreadable:
        problems.append("nvidia-smi printed what cannot be read: " + "; ".join(listing.unreadable))
        fixes.append("check the driver (nvidia-smi -q); those fields were not used")
    if busy:
        free = [g for g in visible if g not in busy]
        fixes.append(
            "stop those processes, or leave their GPUs out: export CUDA_VISIBLE_DEVICES="
            + ",".join(str(g.index) for g in free)
        )
    if len(sizes) > 1:
        largest = max(sizes.items(), key=lambda kv: (len(kv[1]), kv[0] or 0))[1]
        problems.append(
            f"mixed memory sizes among the visible GPUs ({kinds}): verl sizes its work per GPU, "
            "so the smallest one sets the limit and out-of-memory errors come from it"
        )
        fixes.append(
            "use one kind: export CUDA_VISIBLE_DEVICES=" + ",".join(str(g.index) for g in largest)
        )
    if not problems:
        return ok(summary + "; none busy")
    return found("warn", summary, "\n".join(problems), "; ".join(fixes))


@check("placement", generic=True)
def check_placement(plan: Plan, facts: Facts, opts: Options) -> Check:
    listing, env = facts.gpus, facts.env
    sev = "fail" if (listing.gpus or opts.require_gpu) else "warn"
    value = env.get("CUDA_VISIBLE_DEVICES")
    visible, problems = visible_devices(value, listing.gpus)
    count = len(visible) if listing.gpus else None
    if value is not None and not value.strip():
        count = 0
    set_vars = [k for k in TORCHRUN_VARS if k in env]
    problems += torchrun_problems(env, count)
    notes: list[str] = []
    names = {g.name for g in listing.gpus}
    if (
        value
        and re.search(r"(^|,)\s*\d", value)
        and len(names) > 1
        and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
    ):
        notes.append(
            "this server mixes GPU models and CUDA numbers them fastest first unless "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID, while nvidia-smi numbers them by PCI bus: "
            "CUDA_VISIBLE_DEVICES indices may name other GPUs than nvidia-smi shows"
        )
    cvd = (
        f"CUDA_VISIBLE_DEVICES={value}"
        if value is not None
        else "CUDA_VISIBLE_DEVICES not set"
        + (f" (all {len(listing.gpus)} GPUs visible)" if listing.gpus else "")
    )
    torch_vars = " ".join(f"{k}={env[k]}" for k in set_vars) or "no torchrun variables set"
    summary = f"{cvd}; {torch_vars}"
    if problems:
        detail = problems + notes
        if not listing.gpus:
            detail.append("no GPU list to check against on this machine")
        return found(
            sev,
            problems[0] if len(problems) == 1 else f"{len(problems)} problems: {problems[0]}",
            "\n".join(detail) + f"\n{summary}",
            "export CUDA_VISIBLE_DEVICES as a comma-separated list of distinct GPU indices or "
            "UUIDs (nvidia-smi -L), and give torchrun/verl consistent ranks, sizes and a port "
            "in 1-65535 (or unset those variables: torchrun sets them)",
        )
    if notes:
        return found(
            "warn",
            summary,
            "\n".join(notes),
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID, or name GPUs by UUID",
        )
    return ok(summary)
