"""A profile's source build (flash-attn) compiled into a wheel on the online host, so the server
installs a wheel and needs no nvcc, gcc or headers.

The wheel is cached by a key of everything that changes the binary (sdist, torch and CUDA,
Python tag, GPU architectures, C++ ABI, compiler versions): a rebuild reuses it. A compile is
written under a temporary name and renamed into place whole, so an interrupted one (Ctrl-C,
SIGKILL) leaves nothing under a final name; the next build of the same key resumes it
(compile/workdir.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.figures import duration
from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.airgap.doctor.resources import read_mem_available
from verl_bundle.compile.buildenv import make_build_env
from verl_bundle.compile.cost import (
    ARCH_VARIABLES,
    HostEstimate,
    host_archs,
    host_estimate,
    needs_consent,
)
from verl_bundle.compile.run import run_logged
from verl_bundle.compile.stop import sigterm_unwinds
from verl_bundle.compile.toolkit import Toolkit
from verl_bundle.compile.watch import CompileWatch
from verl_bundle.compile.workdir import WorkDir, claim
from verl_bundle.credentials import Redactor
from verl_bundle.errors import BundleError, Terminated, UsageError
from verl_bundle.progress import Reporter
from verl_bundle.uvcmd import uv_binary, uv_env

Mode = Literal["auto", "always", "never"]


class CompileError(BundleError):
    """A host compile failed: names the package, the log file and what explain reads in it."""


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


@dataclass(frozen=True)
class CompiledWheel:
    path: Path
    filename: str
    sha256: str
    size: int
    provenance: mf.Compiled
    reused: bool
    resumed: bool = False  # a stopped compile was taken over (compile/workdir.py)
    not_reused: str = ""  # why a cache entry of the key was not trusted (compiled again)


def archs_of(options: CompileOptions, job: CompileJob) -> str:
    """What this host compiles, "8.0;9.0" (compile/cost.py: host_archs)."""
    return host_archs(job.package, job.env, job.cuda, options.cuda_archs)


def sm_list(archs: str) -> str:
    """ "8.0;9.0" -> "sm80,sm90" (for the summary line)."""
    return ",".join("sm" + a.replace(".", "").replace("+PTX", "") for a in archs.split(";") if a)


def torch_abi(torch_wheel: Path | None, torch_version: str | None) -> str:
    """The C++ ABI extensions must be built with, as the torch wheel itself declares it (its
    TorchConfig.cmake sets -D_GLIBCXX_USE_CXX11_ABI=0|1); without the wheel, the known rule:
    the default and PyTorch indexes' torch wheels use the old ABI up to 2.6 and the new one from
    2.7 (FACTS: cxx11abi FALSE for 2.1-2.6)."""
    if torch_wheel is not None:
        declared = _declared_abi(torch_wheel)
        if declared is not None:
            return "cxx11abi=" + ("TRUE" if declared else "FALSE")
    if torch_version is None:
        return "none"
    base = Version(torch_version.split("+")[0])
    return "cxx11abi=" + ("TRUE" if base >= Version("2.7") else "FALSE")


_ABI_FLAG = re.compile(rb"-D_GLIBCXX_USE_CXX11_ABI=([01])")


def _declared_abi(wheel: Path) -> bool | None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            text = zf.read("torch/share/cmake/Torch/TorchConfig.cmake")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = _ABI_FLAG.search(text)
    return None if found is None else found.group(1) == b"1"


def cache_key(job: CompileJob, toolkit: Toolkit, archs: str) -> str:
    parts = {
        "sdist": job.sdist_sha256,
        "torch": f"{job.torch_version}+cuda{job.cuda}",
        "python": job.python_tag,
        "archs": archs,
        "abi": torch_abi(job.torch_wheel, job.torch_version),
        "nvcc": toolkit.nvcc.version,
        "compiler": toolkit.compiler.version,
        "build_requires": sorted(job.build_requires),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


# One GPU architecture gives nvcc's --threads nothing to run side by side, so a job holds one
# cicc/ptxas pipeline, not two: measured here for flash-attn 2.8.3 at sm90 with nvcc 13.0, two
# jobs took 9.7 GB together (4.9 GB each) against the 9 GiB per job the profile gives for its
# two-architecture default. Sized at this share of gib-per-job, a 24 GB host runs 2 jobs, not 1.
ONE_ARCH_SHARE = 0.6


def _max_jobs(job: CompileJob, archs: str = "") -> int:
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
    env["MAX_JOBS"] = str(jobs or _max_jobs(job, archs))
    env.setdefault("NVCC_THREADS", "2")
    # Never the network: flash-attn's setup.py otherwise tries a prebuilt wheel first.
    env.setdefault("FLASH_ATTENTION_FORCE_BUILD", "TRUE")
    env.setdefault("SOURCE_DATE_EPOCH", "315532800")
    return env


WHEEL_SHA256 = "wheel.sha256"  # in a cache entry: the compiled wheel's hash, written when made


def _untrusted(final: Path) -> str | None:
    """Why a cache entry may hold another user's wheel: the record beside a wheel proves only
    that whoever could write the one could write the other. Every directory above it must be
    owned by root or this user and writable by no one else (unless sticky, as /tmp), and the
    entry and its files by this user or root and by no one else (a team-shared --cache-dir)."""
    me = os.geteuid()
    real = final.resolve()
    for folder in reversed(real.parents):
        st = folder.stat()
        if st.st_uid not in (0, me):
            return f"{folder} belongs to uid {st.st_uid}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"{folder} is writable by other users"
    for path in (real, *sorted(real.iterdir())):
        st = path.lstat()
        if st.st_uid not in (0, me):
            return f"{path} belongs to uid {st.st_uid}"
        if st.st_mode & 0o022:
            return f"{path} is writable by other users"
    return None


def _reuse(final: Path, untrusted: list[str] | None = None) -> CompiledWheel | None:
    """The cached wheel of an entry, when it is the one compiled here: its sha256 matches the
    one recorded when it was made, and no other user could have written either (`_untrusted`).
    An entry that does not check out (a wheel replaced or planted, a record missing or
    unreadable, a mode or owner that lets another user in: why, into `untrusted`) is removed,
    and the wheel is compiled again. The wheel is marked as reused, with when it was compiled."""
    if not final.is_dir():
        return None
    why = _untrusted(final)
    if why is not None:
        if untrusted is not None:
            untrusted.append(why)
        shutil.rmtree(final, ignore_errors=True)
        return None
    wheels = sorted(final.glob("*.whl"))
    try:
        recorded = (final / WHEEL_SHA256).read_text().split()
        doc = json.loads((final / "compiled.json").read_text())
        prov = mf.Compiled(**doc)
    except (OSError, ValueError, TypeError):
        recorded, prov = [], None
    if (
        prov is None
        or len(wheels) != 1
        or wheels[0].is_symlink()
        or recorded != [sha256_file(wheels[0]), wheels[0].name]
    ):
        shutil.rmtree(final, ignore_errors=True)
        return None
    return _describe(wheels[0], dataclasses.replace(prov, reused_from_cache=True), reused=True)


def _describe(path: Path, prov: mf.Compiled, reused: bool) -> CompiledWheel:
    return CompiledWheel(path, path.name, sha256_file(path), path.stat().st_size, prov, reused)


def _pins(job: CompileJob, locked: Mapping[str, str]) -> list[str]:
    """Build requirements pinned to the locked versions (exactly the server's torch)."""
    out = []
    for req in job.build_requires:
        name = canonicalize_name(Requirement(req).name)
        out.append(f"{name}=={locked[name]}" if name in locked else req)
    return out


@dataclass(frozen=True)
class BuildInputs:
    """What the compiles of one fetch run share: the fetched wheels (keyed by file name; the
    build venv is made of them), the locked versions (build requirements are pinned to them),
    and where progress goes and what it must not show; `mode`: --compile (the estimate says
    what `never` would do instead)."""

    wheels: Mapping[str, Path]
    locked: Mapping[str, str]
    reporter: Reporter
    redact: Redactor
    mode: str = "auto"
    yes: bool = False
    ask: Callable[[str], bool] | None = None


class CompileRefusedError(UsageError):
    """A long host compile not started: nobody said yes (exit 2, nothing was done)."""


def consent(estimate: HostEstimate, yes: bool, ask: Callable[[str], bool] | None) -> None:
    """A compile estimated over LONG_MINUTES goes ahead only with --yes or --compile always,
    or when asked on a terminal and answered yes; without a terminal it is refused."""
    if not needs_consent(estimate, yes):
        return
    asked = ask is not None and ask(f"{estimate.line()}. Compile here now?")
    if asked:
        return
    why = "not confirmed" if ask is not None else "no terminal to confirm it on"
    raise CompileRefusedError(
        f"{estimate.package}: not compiled: {why} for a compile of about "
        f"{duration(estimate.minutes or 0)} on these {estimate.cores} cores; --yes or "
        "--compile always compiles it here, --compile never leaves it to the server"
        + (f", --cuda-archs {estimate.archs[-1]} one architecture" if estimate.archs[1:] else "")
    )


def compile_sdist(
    job: CompileJob,
    toolkit: Toolkit,
    options: CompileOptions,
    cache_root: Path,
    inputs: BuildInputs,
) -> CompiledWheel:
    """The wheel for `job`: from the cache when its key was built before, else compiled now."""
    archs = archs_of(options, job)
    key = cache_key(job, toolkit, archs)
    root = cache_root / "compiled"
    final = root / key
    untrusted: list[str] = []
    hit = _reuse(final, untrusted)
    if hit is not None:
        inputs.reporter.status(f"{job.package}: compiled wheel reused from the cache (key {key})")
        return hit
    jobs = _max_jobs(job, archs)
    estimate = host_estimate(job.package, archs, jobs, inputs.mode)
    inputs.reporter.progress(estimate.line())  # before any of it is spent
    consent(estimate, inputs.yes, inputs.ask)
    held = claim(root, key)
    work = held.path
    try:
        with sigterm_unwinds():
            prov = _compile(job, toolkit, archs, key, held, inputs, estimate)
        out = work / "out"
        (out / "compiled.json").write_text(json.dumps(vars(prov), sort_keys=True) + "\n")
        (wheel,) = out.glob("*.whl")
        (out / WHEEL_SHA256).write_text(f"{sha256_file(wheel)}  {wheel.name}\n")
        try:
            os.rename(out, final)
        except OSError:  # another build finished the same key first
            if _reuse(final) is None:
                raise
        shutil.rmtree(work, ignore_errors=True)
        done = _describe(next(final.glob("*.whl")), prov, reused=False)
        return dataclasses.replace(done, resumed=held.resumed, not_reused="; ".join(untrusted))
    except (KeyboardInterrupt, Terminated):
        if held.prepared:  # hours of objects may be in there: the next build resumes them
            inputs.reporter.note(
                f"{job.package}: the compile so far is kept in {work} ({_size(work)}); the next "
                "build of this bundle resumes it (remove that directory to start over and free "
                "the space)"
            )
        else:
            shutil.rmtree(work, ignore_errors=True)
        raise
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        held.release()


def _compile(
    job: CompileJob,
    toolkit: Toolkit,
    archs: str,
    key: str,
    held: WorkDir,
    inputs: BuildInputs,
    estimate: HostEstimate,
) -> mf.Compiled:
    work = held.path
    log = cache_log(work.parent, job, key)
    reporter = inputs.reporter
    jobs = estimate.jobs
    if held.resumed:
        python = work / "venv" / "bin" / "python"
        reporter.note(f"{job.package}: resuming the compile stopped earlier in {work}")
        shutil.rmtree(work / "out", ignore_errors=True)  # a wheel the stop may have half-written
    else:
        reporter.status(f"{job.package}: making a build venv from the bundle's wheels ...")
        pins = _pins(job, inputs.locked)
        python = make_build_env(
            job.package, toolkit.python.path, inputs.wheels, pins, work, inputs.redact
        )
        with tarfile.open(job.sdist) as tf:
            tf.extractall(work / "src", filter="data")
        held.mark_prepared()
    tops = [p for p in (work / "src").iterdir() if p.is_dir()]
    src = tops[0] if len(tops) == 1 else work / "src"
    env = build_environ(job, toolkit, archs, python.parent.parent, jobs)
    args = [uv_binary(), "build", "--wheel", "--no-build-isolation", "--offline", "--no-index"]
    args += ["--python", str(python), "--out-dir", str(work / "out"), str(src)]
    reporter.status(f"{job.package}: compile log: {log}")
    start = time.monotonic() - held.earlier  # a resumed compile counts its earlier time too
    expected = None if estimate.minutes is None else estimate.minutes * 60
    watch = CompileWatch(job.package, log, 0, time.monotonic(), held.earlier, expected)
    code = run_logged(args, env, work, log, watch, reporter, held.resumed)
    seconds = round(time.monotonic() - start, 1)
    built = sorted((work / "out").glob("*.whl")) if (work / "out").is_dir() else []
    if code != 0 or len(built) != 1:
        raise CompileError(_failure(job, code, log))
    _check_tags(job, built[0].name, log)
    return mf.Compiled(
        toolkit=toolkit.describe(),
        compiler=toolkit.compiler.describe(),
        archs=archs,
        seconds=seconds,
        key=key,
        made=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def _size(top: Path) -> str:
    """The bytes under `top` (links not followed), as "4.6 GB"."""
    total = 0
    for here, _dirs, files in os.walk(top):
        for name in files:
            try:
                total += os.lstat(os.path.join(here, name)).st_size
            except OSError:
                continue
    return f"{total / 1e9:.1f} GB" if total >= 10**8 else f"{total / 1e6:.1f} MB"


def cache_log(root: Path, job: CompileJob, key: str) -> Path:
    """The compile log lives beside the cache, outside the temporary directory, so it is still
    there to read when the compile failed."""
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{canonicalize_name(job.package)}-{key}.log"


def _failure(job: CompileJob, code: int, log: Path) -> str:
    text = log.read_text(errors="replace")
    from verl_bundle.airgap.explain import (
        engine as explain,
    )  # its ~100 signatures: only when a compile failed

    findings = explain.explain_text(text)
    reading = (
        f"explain: {findings[0].title}: {findings[0].fix}"
        if findings
        else "explain knows no cause in it; last line: " + (explain.tail(text, 1) or [""])[0]
    )
    return (
        f"{job.package}: compiling {job.sdist_filename} on this host failed (exit {code}); "
        f"log: {log}; {reading}"
    )


def _check_tags(job: CompileJob, filename: str, log: Path) -> None:
    tags = parse_wheel_filename(filename)[3]
    fits = any(
        t.interpreter in (job.python_tag, "py3") and t.platform.startswith(("linux", "manylinux"))
        for t in tags
    )
    if not fits:
        raise CompileError(
            f"{job.package}: the compile made {filename}, not a wheel for {job.python_tag} on "
            f"Linux; was --host-python the target's Python? log: {log}"
        )
