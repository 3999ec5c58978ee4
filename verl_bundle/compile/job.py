"""One host compile asked for: `build`'s compile options and the sdist to compile with what its
build venv is made of, and the GPU architectures it compiles for."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from verl_bundle.compile.cost import host_archs

Mode = Literal["auto", "always", "never"]


@dataclass(frozen=True)
class CompileOptions:
    """`build`'s compile options (--compile, --cuda-archs, and where the toolkit is)."""

    mode: Mode = "auto"
    cuda_archs: str | None = None
    cuda_home: Path | None = None
    cc: str | None = None
    cxx: str | None = None
    host_python: str | None = None
    # A compile estimated over LONG_MINUTES starts only when said so: --yes, --compile always,
    # or `ask` (the CLI's question on a terminal; None: no terminal to ask on) answering yes.
    yes: bool = False
    ask: Callable[[str], bool] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class CompileJob:
    """One sdist to compile, with what the build venv is made of."""

    package: str
    sdist: Path
    sdist_filename: str
    sdist_sha256: str
    python_tag: str  # the target's, "cp310"
    cuda: str  # the profile's, "13.0"
    torch_version: str | None  # the locked torch, or None when the build needs no torch
    build_requires: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # the profile's source-build env
    gib_per_job: float = 9.0
    max_jobs_limit: int | None = None
    torch_wheel: Path | None = None  # the locked torch's wheel, whose ABI the build must match


def archs_of(options: CompileOptions, job: CompileJob) -> str:
    """What this host compiles, "8.0;9.0" (compile/cost.py: host_archs)."""
    return host_archs(job.package, job.env, job.cuda, options.cuda_archs)


def sm_list(archs: str) -> str:
    """ "8.0;9.0" -> "sm80,sm90" (for the summary line)."""
    return ",".join("sm" + a.replace(".", "").replace("+PTX", "") for a in archs.split(";") if a)
