"""The CUDA toolkit checks: nvcc, the CUDA_HOME torch's extension builder takes, and the
libcudart an extension compiled here loads at run time (the toolkit is found by toolkit.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok
from verl_bundle.airgap.doctor.system import Distro
from verl_bundle.airgap.doctor.toolkit import DEFAULT_CUDA, Toolkit, is_toolkit
from verl_bundle.airgap.doctor.versions import parse_version

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts


def toolkit_fix(need: str | None, distro: Distro) -> str:
    if not need:
        return (
            "install the CUDA toolkit (from an intranet mirror of NVIDIA's CUDA repository, or "
            "its runfile carried in) and export CUDA_HOME"
        )
    pkg = "cuda-toolkit-" + need.replace(".", "-")
    return (
        f"install {pkg} from an intranet mirror of NVIDIA's CUDA repository ("
        + distro.command(pkg, pkg)
        + f") or its runfile carried in, then export CUDA_HOME=/usr/local/cuda-{need} "
        f"PATH=/usr/local/cuda-{need}/bin:$PATH"
    )


def _skip_fix(plan: Plan) -> str:
    """The install option that avoids a CUDA source build."""
    phases = dict.fromkeys(b.phase for b in plan.builds if b.needs_cuda)
    if not phases:
        return ""
    skip = " ".join(f"--skip-phase {p}" for p in phases)
    return (
        f"; or leave the build out with ./install.sh {skip} ({plan.build_names()} is then not "
        "installed), or bring a bundle with a prebuilt wheel of it"
    )


def _no_build_why(plan: Plan) -> str:
    return (
        "No CUDA source build in this bundle"
        + plan.left_out_note()
        + ": its wheels carry their CUDA runtime, so nvcc only matters for compiling CUDA "
        "extensions later."
    )


def _own_toolkit(plan: Plan, facts: Facts) -> str | None:
    """What the installer does when the bundle brings its own nvcc (CUDA 13+ wheels) and this
    server has no toolkit of the bundle's major and no CUDA_HOME/CUDA_PATH: the line to show."""
    if not plan.cuda_build or facts.env.get("CUDA_HOME") or facts.env.get("CUDA_PATH"):
        return None
    version = plan.stack_nvcc
    tk, need = facts.toolkit, plan.toolkit
    if version is None or not need:
        return None
    have = parse_version(tk.version or "") or (0,)
    if tk.root and is_toolkit(Path(tk.root)) and have[0] == (parse_version(need) or (0,))[0]:
        return None  # this server's own toolkit is used
    return (
        f"nvcc from the bundle's own nvidia-cuda-nvcc {version} wheel: the installer sets "
        f"CUDA_HOME to it for {plan.build_names()}"
    )


@check("nvcc")
def check_nvcc(plan: Plan, facts: Facts, opts: Options) -> Check:
    tk, need = facts.toolkit, plan.toolkit
    own = _own_toolkit(plan, facts)
    if own:
        return ok(own)
    sev = "fail" if plan.cuda_build else "warn"
    why = (
        f"The bundle compiles {plan.build_names()} from source, which needs the CUDA {need} "
        "toolkit."
        if plan.cuda_build
        else _no_build_why(plan)
    )
    fix = toolkit_fix(need, facts.distro) + _skip_fix(plan)
    later = "" if plan.cuda_build else "nothing to do for this bundle; to compile CUDA later: "
    if tk.nvcc is None:
        if not need:
            return ok("no nvcc found; the bundle needs no CUDA")
        return found(
            sev,
            f"no nvcc found; the bundle's CUDA is {need}",
            f"Searched PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, {DEFAULT_CUDA}/bin. {why}",
            later + fix,
        )
    if tk.version is None:
        return found(
            sev if need else "warn",
            f"{tk.nvcc} did not report its release ({tk.run.why() if tk.run else '?'})",
            why,
            later + fix,
        )
    if not need:
        return ok(f"nvcc {tk.version} at {tk.nvcc}; the bundle needs no CUDA")
    have, want = parse_version(tk.version) or (0,), parse_version(need) or (0,)
    if have[0] != want[0]:
        return found(
            sev,
            f"nvcc {tk.version} at {tk.nvcc}, but the bundle's CUDA is {need}",
            "torch refuses to build an extension with a CUDA major version other than its "
            f"own. {why}",
            later + fix,
        )
    if have[:2] != want[:2]:
        return found(
            "warn",
            f"nvcc {tk.version} at {tk.nvcc}; the bundle's CUDA is {need} (same major version)",
            "torch builds with a different minor version, with a warning",
            later + fix,
        )
    return ok(f"nvcc {tk.version} at {tk.nvcc}")


def _suggest_home(need: str | None, tk: Toolkit) -> tuple[str | None, bool]:
    """The toolkit to point CUDA_HOME at, and whether it is of the bundle's CUDA version."""
    if need and is_toolkit(Path(f"/usr/local/cuda-{need}")):
        return f"/usr/local/cuda-{need}", True
    root = tk.path_root or tk.root
    return root, bool(need and tk.version == need and root == tk.root)


@check("cuda-home")
def check_cuda_home(plan: Plan, facts: Facts, opts: Options) -> Check:
    tk, need = facts.toolkit, plan.toolkit
    own = _own_toolkit(plan, facts)
    if own:
        return ok(own)
    sev = "fail" if plan.cuda_build else "warn"
    if tk.home is None:
        if not need:
            return ok("no CUDA toolkit for torch to find; the bundle needs none")
        return found(
            "warn",
            "no CUDA toolkit for torch to find (see nvcc)",
            "" if plan.cuda_build else _no_build_why(plan),
            toolkit_fix(need, facts.distro),
        )
    home = Path(tk.home)
    suggest, right = _suggest_home(need, tk)
    fix = ""
    if suggest:
        fix = f"export CUDA_HOME={suggest}"
        if not right and need:
            fix += (
                f" (the toolkit found here); for this bundle a CUDA {need} toolkit is the right "
                f"one, e.g. /usr/local/cuda-{need}"
            )
    why = "torch's extension builder takes nvcc, headers and libraries from CUDA_HOME"
    if tk.home_source in ("CUDA_HOME", "CUDA_PATH") and not home.is_dir():
        return found(
            sev, f"{tk.home_source}={home} does not exist", why, fix or f"unset {tk.home_source}"
        )
    env_set = tk.home_source in ("CUDA_HOME", "CUDA_PATH")
    wrapped = not env_set and not is_toolkit(home) and tk.root and is_toolkit(Path(tk.root))
    if plan.cuda_build and wrapped:
        return ok(
            f"torch would take {home} ({tk.home_source}), not a toolkit; the installer sets "
            f"CUDA_HOME={tk.root} (the toolkit {tk.nvcc} runs) for source builds"
        )
    if not is_toolkit(home):
        lacks = [p for p in ("bin/nvcc", "include/cuda_runtime.h") if not (home / p).is_file()]
        through = ""
        if tk.nvcc and tk.root and Path(tk.root).resolve() != home.resolve():
            through = f"; {tk.nvcc} runs the nvcc of {tk.root}"
        return found(
            sev,
            f"torch would take CUDA_HOME={home} (from {tk.home_source}), which is not a CUDA "
            "toolkit",
            f"it has no {' or '.join(lacks)}{through}. {why}.",
            fix or toolkit_fix(need, facts.distro),
        )
    if tk.path_nvcc and tk.path_root and Path(tk.path_root).resolve() != home.resolve():
        return found(
            "warn",
            f"CUDA_HOME={home}, but the nvcc on PATH ({tk.path_nvcc}) is from {tk.path_root}",
            f"{why}, while tools run the nvcc on PATH: the two disagree",
            f"export PATH={home}/bin:$PATH",
        )
    return ok(f"torch would take CUDA_HOME={home} (from {tk.home_source})")


def _loader_dirs(facts: Facts) -> set[Path]:
    """Directories the dynamic loader searches: LD_LIBRARY_PATH and the ldconfig cache."""
    ld = facts.env.get("LD_LIBRARY_PATH", "")
    loader = {Path(p).resolve() for p in ld.split(os.pathsep) if p}
    if facts.ldcache.ok:
        for line in facts.ldcache.out.splitlines():
            if "=>" in line:
                loader.add(Path(line.split("=>", 1)[1].strip()).parent.resolve())
    return loader


@check("cuda-libs")
def check_cuda_libs(plan: Plan, facts: Facts, opts: Options) -> Check:
    need, libs = plan.toolkit, facts.toolkit.libs
    sev = "fail" if plan.cuda_build else "warn"
    if libs is None:
        if not need:
            return ok("no CUDA toolkit to check; the bundle needs none")
        return found(
            "warn",
            "no CUDA toolkit to check (see nvcc)",
            "" if plan.cuda_build else _no_build_why(plan),
            toolkit_fix(need, facts.distro),
        )
    if libs.soname is None:
        return found(
            sev,
            f"the toolkit at {libs.root} has no libcudart",
            "a CUDA extension built here links against it",
            "reinstall the CUDA toolkit: " + toolkit_fix(need, facts.distro),
        )
    first = libs.dirs[0]
    fix = (
        f"echo {first} > /etc/ld.so.conf.d/cuda.conf && ldconfig "
        f"(or export LD_LIBRARY_PATH={first}:$LD_LIBRARY_PATH)"
    )
    if libs.answer is None:
        why = libs.run.why() if libs.run else "?"
        return found(sev, f"could not try to load {libs.soname}: {why}", "", fix)
    loaded = [lib for lib in libs.answer.get("libs", []) if "error" not in lib]
    if not loaded:
        return found(
            sev,
            f"{libs.soname} does not load: {', '.join(libs.dirs)} is not on the loader path",
            "the torch wheels carry their own CUDA runtime, but an extension compiled here "
            f"needs {libs.soname} from the toolkit at run time"
            + (f" (the bundle compiles {plan.build_names()})" if plan.cuda_build else ""),
            fix,
        )
    paths = ", ".join(libs.answer.get("paths", [])) or "?"
    summary = f"{libs.soname} loads ({paths})"
    version = loaded[0].get("version")
    if isinstance(version, int) and version and need:
        have = f"{version // 1000}.{version % 1000 // 10}"
        summary += f", CUDA runtime {have}"
        if (parse_version(have) or (0,))[0] != (parse_version(need) or (0,))[0]:
            return found(
                "warn",
                f"{summary}, but the bundle's CUDA is {need}",
                "the loader path holds another CUDA major version than the bundle's: an "
                "extension compiled here against CUDA "
                f"{need} would load the wrong runtime",
                f"put a CUDA {need} toolkit's libraries first: export LD_LIBRARY_PATH="
                f"/usr/local/cuda-{need}/lib64:$LD_LIBRARY_PATH ("
                + toolkit_fix(need, facts.distro)
                + ")",
            )
    if not any(Path(d).resolve() in _loader_dirs(facts) for d in libs.dirs):
        return found(
            "warn",
            f"{summary}, but {first} is neither on LD_LIBRARY_PATH nor in the ldconfig cache",
            "",
            fix,
        )
    return ok(summary)
