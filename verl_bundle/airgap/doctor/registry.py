"""The doctor's checks in the one registry (airgap/checks.py): one function per check, marked
with its id by `@check`.

A check reads the plan (what the bundle needs), the facts (what the probes found, gathered
once) and the options, and returns a `Check` (airgap/checks.py, the one finding type) without
repeating its id: the registry stamps it. Which checks exist is an explicit list of domain
modules (doctor/catalog.py), in the report's order; `@check` only marks a function, so no
import side effect decides what runs. A check that raises is reported as a warning that names
the bug, so the report always ends."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from verl_bundle.airgap.checks import Check, Registered
from verl_bundle.airgap.contract.manifest import BuildTime, Manifest
from verl_bundle.airgap.contract.skip_phases import SkipPhases, skip_phases
from verl_bundle.airgap.doctor.toolkit import stack_nvcc

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts

STATUSES = ("ok", "warn", "fail")  # what a doctor check ends with


def ok(summary: str, detail: str = "") -> Check:
    return Check("", "ok", summary, detail)


def found(status: str, summary: str, detail: str = "", fix: str = "") -> Check:
    """A finding of any status; the registry fills in the id."""
    return Check("", status, summary, detail, fix)


@dataclass(frozen=True)
class Options:
    """How the doctor was asked: the interpreter the venv will use, where it will go, and
    whether a missing driver or GPU is a failure."""

    python: str | None = None
    prefix: str | None = None
    require_gpu: bool = False


@dataclass(frozen=True)
class Build:
    """A source build the install will run on this server."""

    package: str
    phase: str
    gib_per_job: float
    limit: int | None
    needs_cuda: bool
    build_time: BuildTime | None = None  # the host's measured figure, for the estimate


@dataclass(frozen=True)
class Plan:
    """What this server must provide, read from the typed manifest less the phases left out
    (--skip-phase). `manifest` None: no bundle given, the host is checked generically."""

    manifest: Manifest | None = None
    skip_phases: SkipPhases = ()
    left_out: tuple[Build, ...] = ()  # source builds of the phases left out

    @classmethod
    def of(cls, manifest: Manifest | None, names: Iterable[str] = ()) -> Plan:
        if manifest is None:
            return cls()
        chosen = skip_phases(names, manifest.phase_names)
        left_out = _builds(manifest, chosen)
        return cls(manifest.without_phases(chosen), chosen, left_out)

    @property
    def generic(self) -> bool:
        return self.manifest is None

    @property
    def python(self) -> str | None:
        return self.manifest.target.python if self.manifest else None

    @property
    def arch(self) -> str | None:
        return self.manifest.target.arch if self.manifest else None

    @property
    def glibc(self) -> str | None:
        return self.manifest.target.glibc if self.manifest else None

    @property
    def cuda(self) -> str | None:
        return (self.manifest.target.cuda or None) if self.manifest else None

    @property
    def nvcc(self) -> str | None:
        return self.manifest.toolchain.nvcc if self.manifest else None

    @property
    def gcc(self) -> str | None:
        return self.manifest.toolchain.gcc if self.manifest else None

    @property
    def driver(self) -> str | None:
        return self.manifest.toolchain.driver if self.manifest else None

    @property
    def driver_compat(self) -> str | None:
        return self.manifest.toolchain.driver_compat if self.manifest else None

    @property
    def toolkit(self) -> str | None:
        """The CUDA toolkit version a source build needs."""
        return self.nvcc or self.cuda

    @property
    def installed_size(self) -> int:
        return self.manifest.installed_size if self.manifest else 0

    @property
    def builds(self) -> tuple[Build, ...]:
        return _builds(self.manifest, ()) if self.manifest else ()

    @property
    def cuda_build(self) -> bool:
        return any(b.needs_cuda for b in self.builds)

    @property
    def stack_nvcc(self) -> str | None:
        """The bundle's own CUDA 13+ nvidia-cuda-nvcc wheel version when an earlier phase installs
        it before every phase that compiles CUDA (see install/cudahome.py), else None."""
        if self.manifest is None:
            return None
        m = self.manifest
        phases = [p for p in m.phases if any(b.needs_cuda for b in p.source_builds)]
        found = {stack_nvcc(m, p) for p in phases}
        return found.pop() if len(found) == 1 else None

    def build_names(self) -> str:
        return ", ".join(b.package for b in self.builds if b.needs_cuda) or "none"

    @property
    def compiles_at_run_time(self) -> bool:
        """Whether something installed compiles C at run time (triton's launchers need a C
        compiler and Python.h). A plan from a profile lists no files: assume it does."""
        m = self.manifest
        return m is not None and (not m.files or m.has("triton"))

    @property
    def bundles_ninja(self) -> bool:
        """The bundle carries a ninja wheel: the install puts the venv's bin first on PATH."""
        return self.manifest is not None and self.manifest.has("ninja")

    def left_out_note(self) -> str:
        """ "; flash-attn's build is left out (--skip-phase flash-attn)" or "" """
        if not self.left_out:
            return ""
        names = ", ".join(f"{b.package}'s" for b in self.left_out)
        phases = " ".join(
            f"--skip-phase {p}" for p in dict.fromkeys(b.phase for b in self.left_out)
        )
        return f"; {names} build left out ({phases})"


def _builds(m: Manifest, phases: tuple[str, ...]) -> tuple[Build, ...]:
    """The source builds of `phases` (all phases when empty)."""
    return tuple(
        Build(
            b.package, p.name, b.max_jobs.gib_per_job, b.max_jobs.limit, b.needs_cuda, b.build_time
        )
        for p in m.phases
        if not phases or p.name in phases
        for b in p.source_builds
    )


CheckFn = Callable[[Plan, "Facts", Options], Check]


def run_one(reg: Registered, plan: Plan, facts: Facts, opts: Options) -> Check:
    """One check, its id stamped; a check that trips over something unforeseen reports it
    instead of a traceback."""
    try:
        result = reg.fn(plan, facts, opts)
    except Exception as exc:  # the doctor must always finish its report
        return Check(
            reg.id,
            "warn",
            f"could not check: {type(exc).__name__}: {exc}",
            "this is a bug in the doctor; the other checks are not affected",
            "report it with the output of `doctor --json`; until it is fixed, check this by hand",
        )
    return dataclasses.replace(result, id=reg.id)


def run_checks(
    checks: Iterable[Registered], plan: Plan, facts: Facts, opts: Options
) -> list[Check]:
    return [run_one(r, plan, facts, opts) for r in checks if r.generic or not plan.generic]
