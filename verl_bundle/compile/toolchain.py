"""`verl-bundle toolchain`: what this online host can compile for each profile, and why not where
it cannot (the doctor's toolchain checks, pointed at the host that builds the bundle)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from verl_bundle.compile.toolkit import (
    ToolkitError,
    ToolkitRequest,
    find_compiler,
    find_host_python,
    find_nvcc,
)
from verl_bundle.profile.model import Profile
from verl_bundle.resolve.lock import read_lock


@dataclass(frozen=True)
class Part:
    """One thing a host compile needs: found (`found`, what) or not (`why`)."""

    name: str  # "nvcc", "gcc", "python headers"
    found: str = ""
    why: str = ""

    @property
    def ok(self) -> bool:
        return not self.why


@dataclass(frozen=True)
class ProfileToolchain:
    profile: str
    cuda: str
    python: str
    packages: tuple[str, ...]  # the profile's source builds
    parts: tuple[Part, ...]

    @property
    def can_compile(self) -> bool:
        return all(p.ok for p in self.parts)


@dataclass(frozen=True)
class ToolchainReport:
    profiles: tuple[ProfileToolchain, ...]


def _part(name: str, find: Callable[[], str]) -> Part:
    try:
        return Part(name, found=find())
    except ToolkitError as exc:
        return Part(name, why=str(exc))


def survey(
    profiles: Sequence[Profile], request: ToolkitRequest, python: str | None = None
) -> ToolchainReport:
    """For each profile with source builds: the nvcc, gcc and target-Python headers found here
    (each with why not). A profile without source builds needs nothing."""
    env = os.environ
    out = []
    for p in profiles:
        packages = tuple(b.package for b in p.source_builds)
        version = python or p.python
        parts: tuple[Part, ...] = ()
        if packages:
            parts = (
                _part("nvcc", partial(_nvcc_text, p, request, env)),
                _part("gcc", partial(_gcc_text, p, request, env)),
                _part("python headers", partial(_headers_text, version, request)),
            )
        out.append(ProfileToolchain(p.name, p.cuda, version, packages, parts))
    return ToolchainReport(tuple(out))


def _nvcc_text(p: Profile, request: ToolkitRequest, env: Mapping[str, str]) -> str:
    try:
        nvcc = find_nvcc(p.cuda, request, env)
    except ToolkitError:
        named = request.cuda_home is not None or bool(env.get("CUDA_HOME"))
        wheel = None if named else _stack_nvcc(p)
        if wheel is None:
            raise
        return f"the stack's own {wheel} wheel (CUDA 13+ nvcc wheels carry nvcc; unpacked by build)"
    return f"nvcc {nvcc.version} ({nvcc.home})"


def _stack_nvcc(p: Profile) -> str | None:
    """nvidia-cuda-nvcc X in the profile's committed lock, when it is a CUDA 13+ one (which
    holds nvcc itself, see compile/stacktoolkit.py), else None."""
    if p.lock is None or not p.lock.is_file() or int(p.cuda.split(".")[0]) < 13:
        return None
    try:
        lock = read_lock(p.lock)
    except (OSError, ValueError):
        return None
    for pkg in lock.packages:
        major = pkg.version.split(".")[0]
        if pkg.name == "nvidia-cuda-nvcc" and major.isdigit() and int(major) >= 13:
            return f"nvidia-cuda-nvcc {pkg.version}"
    return None


def _gcc_text(p: Profile, request: ToolkitRequest, env: Mapping[str, str]) -> str:
    return find_compiler(p.toolchain.gcc, request, env).describe()


def _headers_text(version: str, request: ToolkitRequest) -> str:
    py = find_host_python(version, request)
    return f"Python {py.version} ({py.include})"
