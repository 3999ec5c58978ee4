"""A throwaway build venv for the target Python, installed offline from the bundle's own cached
wheels, so an extension is compiled against exactly the torch (and build tools) the server runs;
and the environment a compile runs in (the toolkit, the architectures, MAX_JOBS sized to the
memory available, never the network)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from verl_bundle.airgap.doctor.resources import read_mem_available
from verl_bundle.compile.cost import ARCH_VARIABLES
from verl_bundle.compile.job import CompileJob
from verl_bundle.compile.toolkit import Toolkit
from verl_bundle.credentials import Redactor
from verl_bundle.errors import BundleError
from verl_bundle.uvcmd import run_uv, uv_env


class BuildEnvError(BundleError):
    """The build venv could not be made from the bundle's wheels."""


def find_links(wheels: Mapping[str, Path], directory: Path) -> Path:
    """The cache keeps blobs by hash; uv wants files by name: one link per wheel."""
    directory.mkdir(parents=True, exist_ok=True)
    for filename, path in wheels.items():
        if filename.endswith(".whl"):
            os.symlink(path, directory / filename)
    return directory


def make_build_env(
    package: str,
    python: str,
    wheels: Mapping[str, Path],
    requirements: Sequence[str],
    work: Path,
    redact: Redactor,
) -> Path:
    """Create work/venv for `python` and install `requirements` from `wheels` only (no index,
    no network); returns the venv's interpreter."""
    venv = work / "venv"
    run = run_uv(["venv", "--python", python, "--no-project", str(venv)], work, redact)
    if run.returncode != 0:
        raise BuildEnvError(
            f"{package}: cannot make a build venv with {python}: {_tail(run.stderr)}"
        )
    interpreter = venv / "bin" / "python"
    if requirements:
        links = find_links(wheels, work / "links")
        args = ["pip", "install", "--offline", "--no-index", "--find-links", str(links)]
        run = run_uv([*args, "--python", str(interpreter), *requirements], work, redact)
        if run.returncode != 0:
            raise BuildEnvError(
                f"{package}: its build requirements ({', '.join(requirements)}) do not install "
                f"from the bundle's own wheels: {_tail(run.stderr)}; declare them in the "
                "profile's build-requires so the lock carries them"
            )
    return interpreter


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-4:])


# One GPU architecture gives nvcc's --threads nothing to run side by side, so a job holds one
# cicc/ptxas pipeline, not two: measured here for flash-attn 2.8.3 at sm90 with nvcc 13.0, two
# jobs took 9.7 GB together (4.9 GB each) against the 9 GiB per job the profile gives for its
# two-architecture default. Sized at this share of gib-per-job, a 24 GB host runs 2 jobs, not 1.
ONE_ARCH_SHARE = 0.6


def compile_jobs(job: CompileJob, archs: str = "") -> int:
    """MAX_JOBS from the environment when set (as flash-attn's own setup.py reads it), else one
    job per gib_per_job of the memory available now (ONE_ARCH_SHARE of it for a single
    architecture), at most the cores (and the profile's limit)."""
    given = os.environ.get("MAX_JOBS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    # MemAvailable, not the free pages (SC_AVPHYS_PAGES): the page cache is reclaimable, and a
    # host that has just downloaded 4 GB has most of its RAM in it.
    avail = read_mem_available()
    return jobs_for(job, archs, 8 << 30 if avail is None else avail, os.cpu_count() or 1)


def jobs_for(job: CompileJob, archs: str, avail: int, cores: int) -> int:
    """Parallel compile jobs for `avail` bytes of free memory and `cores` cores."""
    gib = job.gib_per_job * (ONE_ARCH_SHARE if len([a for a in archs.split(";") if a]) == 1 else 1)
    jobs = max(1, min(cores, int(avail / (gib * (1 << 30)))))
    return min(jobs, job.max_jobs_limit) if job.max_jobs_limit else jobs


def build_environ(
    job: CompileJob, toolkit: Toolkit, archs: str, venv: Path, jobs: int | None = None
) -> dict[str, str]:
    env = uv_env(venv.parent / ".uv-config")
    env.update(job.env)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), str(toolkit.nvcc.home / "bin"), env["PATH"]])
    env["CUDA_HOME"] = str(toolkit.nvcc.home)
    env["CC"], env["CXX"] = toolkit.compiler.cc, toolkit.compiler.cxx
    env["TORCH_CUDA_ARCH_LIST"] = archs
    own = ARCH_VARIABLES.get(canonicalize_name(job.package))
    if own:
        env[own] = ";".join(a.replace(".", "").replace("+PTX", "") for a in archs.split(";"))
    env["MAX_JOBS"] = str(jobs or compile_jobs(job, archs))
    env.setdefault("NVCC_THREADS", "2")
    # Never the network: flash-attn's setup.py otherwise tries a prebuilt wheel first.
    env.setdefault("FLASH_ATTENTION_FORCE_BUILD", "TRUE")
    env.setdefault("SOURCE_DATE_EPOCH", "315532800")
    return env
