"""gcc/g++ (or $CC/$CXX, which torch prefers) against the range nvcc accepts, and ninja, which
torch's extension builder needs for a parallel build."""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.doctor.commands import Run, last_line, run
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok
from verl_bundle.airgap.doctor.versions import highest_major, version_matches

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts


@dataclass(frozen=True)
class Compiler:
    role: str  # "C" or "C++"
    cmd: tuple[str, ...]  # as $CC/$CXX give it, e.g. ("ccache", "gcc-11")
    present: bool  # its program is on PATH
    version: str | None = None
    run: Run | None = None  # the last version query


@dataclass(frozen=True)
class Ninja:
    path: str | None  # None: not on PATH
    run: Run | None = None  # `ninja --version`


def compiler_version(cmd: Sequence[str]) -> tuple[str | None, Run]:
    """gcc's full version: -dumpfullversion (gcc >= 7), else -dumpversion (older gcc)."""
    r = Run(tuple(cmd))
    for flag in ("-dumpfullversion", "-dumpversion"):
        r = run([*cmd, flag])
        if r.problem:
            return None, r
        text = last_line(r.out)
        if r.ok and re.fullmatch(r"\d+(\.\d+)*", text):
            return text, r
    return None, r


def probe_compilers(env: Mapping[str, str]) -> tuple[Compiler, ...]:
    out = []
    for role, var, default in (("C", "CC", "gcc"), ("C++", "CXX", "g++")):
        cmd = tuple(shlex.split(env.get(var) or default) or [default])
        if shutil.which(cmd[0]) is None:
            out.append(Compiler(role, cmd, False))
            continue
        version, r = compiler_version(cmd)
        out.append(Compiler(role, cmd, True, version, r))
    return tuple(out)


def probe_ninja() -> Ninja:
    path = shutil.which("ninja")
    return Ninja(path, run([path, "--version"]) if path else None)


def _gcc_fix(plan: Plan, facts: Facts, outside: bool) -> str:
    distro = facts.distro
    top = highest_major(plan.gcc) if plan.gcc else None
    if not (outside and top):
        return distro.install("gcc g++", "gcc gcc-c++")
    fix = (
        distro.install(f"gcc-{top} g++-{top}", f"gcc-toolset-{top}")
        + f", then export CC=gcc-{top} CXX=g++-{top} (torch hands CC to nvcc as -ccbin)"
    )
    if distro.family in ("dnf", "yum"):
        fix += f"; with gcc-toolset: source /opt/rh/gcc-toolset-{top}/enable"
    return fix


@check("gcc")
def check_gcc(plan: Plan, facts: Facts, opts: Options) -> Check:
    have: list[str] = []
    outside: list[str] = []
    problems: list[tuple[str, str, str]] = []  # status, short, long
    for c in facts.compilers:
        name = c.cmd[0]
        if not c.present:
            if c.role == "C":
                needed = plan.compiles_at_run_time or bool(plan.builds)
                why = (
                    "triton compiles its launchers with it at run time"
                    if plan.compiles_at_run_time
                    else "source builds compile C"
                    if plan.builds
                    else "nothing in this bundle compiles C" + plan.left_out_note()
                )
            else:
                needed = bool(plan.builds)
                why = (
                    "source builds compile C++"
                    if plan.builds
                    else "no source build needs it" + plan.left_out_note()
                )
            status = "fail" if needed else "warn"
            problems.append((status, f"{name} not found", f"no {c.role} compiler: {why}"))
            continue
        if c.version is None:
            why = c.run.why() if c.run else "?"
            problems.append(("fail", f"{name} does not run", f"{' '.join(c.cmd)}: {why}"))
            continue
        have.append(f"{name} {c.version}")
        if not plan.gcc:
            continue
        try:
            if not version_matches(c.version, plan.gcc):
                outside.append(f"{name} {c.version}")
        except ValueError as exc:
            problems.append(("warn", "the bundle's gcc range is not understood", str(exc)))
    if outside:
        where = (
            f"the bundle compiles {plan.build_names()} with nvcc, which stops with "
            "'unsupported GNU version'"
            if plan.cuda_build
            else "no CUDA source build in this bundle"
            + plan.left_out_note()
            + ", so this only matters for CUDA extensions compiled here later"
        )
        problems.append(
            (
                "fail" if plan.cuda_build else "warn",
                f"{' and '.join(outside)} outside {plan.gcc}",
                f"CUDA {plan.toolkit or '?'}'s nvcc accepts gcc {plan.gcc}; {where}",
            )
        )
    if not problems:
        accepts = f" (nvcc accepts {plan.gcc})" if plan.gcc else ""
        return ok(", ".join(have) + accepts)
    status = "fail" if any(p[0] == "fail" for p in problems) else "warn"
    return found(
        status,
        "; ".join(p[1] for p in problems),
        "\n".join([p[2] for p in problems] + ([f"found: {', '.join(have)}"] if have else [])),
        _gcc_fix(plan, facts, bool(outside)),
    )


@check("ninja")
def check_ninja(plan: Plan, facts: Facts, opts: Options) -> Check:
    ninja = facts.ninja
    if not plan.builds:
        if ninja.path is None:
            return ok("not needed: no source build in this bundle" + plan.left_out_note())
    elif plan.bundles_ninja:
        return ok(
            "ninja comes from the bundle's wheel: the install puts the venv's bin first on PATH"
        )
    builds = ", ".join(b.package for b in plan.builds)
    fix = facts.distro.install("ninja-build", "ninja-build (from EPEL on RHEL)")
    if ninja.path is None:
        return found(
            "fail",
            f"ninja not found; the bundle builds {builds}",
            "torch's extension builder needs ninja on PATH; without it the build falls back to "
            "a serial build that can take hours, or fails",
            fix,
        )
    r = ninja.run or Run((ninja.path,), problem="not run")
    if not r.ok:
        return found(
            "fail" if plan.builds else "warn",
            f"{ninja.path} does not run: {r.why()}",
            "",
            f"reinstall it: {fix}",
        )
    return ok(f"ninja {last_line(r.out)} at {ninja.path}")
