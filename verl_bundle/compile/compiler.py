"""Source builds compiled on the online host (the fetch stage calls `SourceCompiler.compile`
once per source-build sdist): a wheel when a fitting toolkit is here, else the reason it is left
to the server, with what the server will need and roughly how long it will take there."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from verl_bundle.airgap.contract.figures import build_range
from verl_bundle.compile.build import BuildInputs, compile_sdist
from verl_bundle.compile.cost import CORE_MINUTES_PER_ARCH, server_build_time
from verl_bundle.compile.job import CompileJob, CompileOptions, sm_list
from verl_bundle.compile.stacktoolkit import stack_toolkit
from verl_bundle.compile.toolkit import Toolkit, ToolkitError, ToolkitRequest, find_toolkit
from verl_bundle.compile.wheelcache import CompiledWheel
from verl_bundle.credentials import Redactor
from verl_bundle.profile.model import Profile, SourceBuild
from verl_bundle.progress import Reporter
from verl_bundle.resolve.lock import Lock, LockedPackage

__all__ = ["CORE_MINUTES_PER_ARCH", "CompileOptions", "Outcome", "SourceCompiler"]


@dataclass(frozen=True)
class Outcome:
    """One source build: compiled here (`wheel`), or left to the server (`left`, with why)."""

    package: str
    summary: str  # "flash-attn compiled here (cu130, sm90, 38 min)" or "... left to build ..."
    wheel: CompiledWheel | None = None


def _wheel_of(name: str, wheels: Mapping[str, Path]) -> Path | None:
    """The cached wheel of `name` among the fetched wheels (keyed by file name)."""
    for filename, path in wheels.items():
        if filename.endswith(".whl") and canonicalize_name(filename.split("-")[0]) == name:
            return path
    return None


class SourceCompiler:
    """Compiles a profile's source builds for one lock; the toolkit is looked for once."""

    def __init__(
        self,
        profile: Profile,
        lock: Lock,
        options: CompileOptions,
        cache_root: Path,
        redact: Redactor,
    ) -> None:
        self.profile, self.lock, self.options = profile, lock, options
        self.cache_root, self.redact = cache_root, redact
        self._toolkit: Toolkit | ToolkitError | None = None

    def toolkit(self, wheels: Mapping[str, Path] | None = None) -> Toolkit:
        """The host's toolkit for this profile. When the host has none (and none was named by
        --cuda-home or CUDA_HOME), the fetched `wheels` may make one (CUDA 13+: stacktoolkit)."""
        if self._toolkit is None:
            o = self.options
            req = ToolkitRequest(o.cuda_home, o.cc, o.cxx, o.host_python)
            self._toolkit = self._find(req)
            named = o.cuda_home is not None or bool(os.environ.get("CUDA_HOME"))
            if isinstance(self._toolkit, ToolkitError) and not named and wheels:
                major = int(self.profile.cuda.split(".")[0])
                stack = stack_toolkit(wheels, major, self.cache_root)
                if stack is not None:
                    self._toolkit = self._find(dataclasses.replace(req, stack_home=stack))
        if isinstance(self._toolkit, ToolkitError):
            raise self._toolkit
        return self._toolkit

    def _find(self, req: ToolkitRequest) -> Toolkit | ToolkitError:
        try:
            return find_toolkit(
                self.profile.cuda, self.profile.toolchain.gcc, self.lock.target.python_version, req
            )
        except ToolkitError as exc:
            return exc

    def compile(
        self,
        pkg: LockedPackage,
        build: SourceBuild,
        sdist: Path,
        sdist_sha256: str,
        wheels: Mapping[str, Path],
        reporter: Reporter,
    ) -> Outcome:
        job = CompileJob(
            package=pkg.name,
            sdist=sdist,
            sdist_filename=pkg.file.filename,
            sdist_sha256=sdist_sha256,
            python_tag=self.lock.target.python_tag,
            cuda=self.profile.cuda,
            torch_version=self._locked().get("torch"),
            build_requires=build.build_requires,
            env=build.env,
            gib_per_job=build.max_jobs.gib_per_job,
            max_jobs_limit=build.max_jobs.limit,
            torch_wheel=_wheel_of("torch", wheels),
        )
        if self.options.mode == "never":
            return self._left(pkg, build, "--compile never")
        try:
            toolkit = self.toolkit(wheels)
        except ToolkitError as exc:
            if self.options.mode == "always":
                raise
            return self._left(pkg, build, str(exc))
        opts = self.options
        inputs = BuildInputs(
            wheels, self._locked(), reporter, self.redact, opts.mode, opts.yes, opts.ask
        )
        wheel = compile_sdist(job, toolkit, self.options, self.cache_root, inputs)
        cu = "cu" + self.profile.cuda.replace(".", "")
        took = wheel.provenance.seconds
        when = f"{took / 60:.0f} min" if took >= 60 else f"{took:.0f} s"
        resumed = ", resumed a stopped compile" if wheel.resumed else ""
        figures = f"{cu}, {sm_list(wheel.provenance.archs)}, {when}{resumed}"
        if wheel.reused:  # truthful: not compiled by this build
            made = wheel.provenance.made or "an earlier build"
            summary = f"{pkg.name} reused from the cache: compiled on {made} ({figures}), not in this build"
        else:
            summary = f"{pkg.name} compiled here ({figures})"
            if wheel.not_reused:
                summary += f"; the cache's wheel of this key was not reused: {wheel.not_reused}"
        return Outcome(pkg.name, summary, wheel)

    def _locked(self) -> dict[str, str]:
        return {canonicalize_name(p.name): p.version for p in self.lock.packages}

    def _left(self, pkg: LockedPackage, build: SourceBuild, why: str) -> Outcome:
        """Left to the server: why, what the server will need, and what its build costs there
        (the manifest's own figure, compile/cost.py: server_build_time)."""
        tc = self.profile.toolchain
        needs = [f"nvcc {tc.nvcc or self.profile.cuda}"]
        needs += [
            f"gcc {tc.gcc}" if tc.gcc else "gcc",
            f"Python {self.lock.target.python_version} headers",
        ]
        took = server_build_time(build, pkg.version, tc.nvcc)
        how_long = f"; its build there takes {build_range(took)}" if took else ""
        summary = (
            f"{pkg.name} left to build on the server: {why}. The server will need "
            f"{', '.join(needs)}{how_long}"
        )
        return Outcome(pkg.name, summary)
