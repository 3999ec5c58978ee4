"""A profile's source build (flash-attn) compiled into a wheel on the online host, so the server
installs a wheel and needs no nvcc, gcc or headers.

The wheel is cached by a key of everything that changes the binary, and a rebuild reuses it
(compile/wheelcache.py). A compile estimated to be long starts only when said so. It is
written under a temporary name and renamed into place whole, so an interrupted one (Ctrl-C,
SIGKILL) leaves nothing under a final name; the next build of the same key resumes it
(compile/workdir.py). Its build venv and environment are compile/buildenv.py's.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.figures import duration
from verl_bundle.compile.buildenv import build_environ, compile_jobs, make_build_env
from verl_bundle.compile.cost import HostEstimate, host_estimate, needs_consent
from verl_bundle.compile.job import CompileJob, CompileOptions, archs_of
from verl_bundle.compile.run import run_logged
from verl_bundle.compile.stop import sigterm_unwinds
from verl_bundle.compile.toolkit import Toolkit
from verl_bundle.compile.watch import CompileWatch
from verl_bundle.compile.wheelcache import CompiledWheel, cache_key, describe, reuse, store
from verl_bundle.compile.workdir import WorkDir, claim
from verl_bundle.credentials import Redactor
from verl_bundle.errors import BundleError, Terminated, UsageError
from verl_bundle.progress import Reporter
from verl_bundle.uvcmd import uv_binary


class CompileError(BundleError):
    """A host compile failed: names the package, the log file and what explain reads in it."""


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
    hit = reuse(final, untrusted)
    if hit is not None:
        inputs.reporter.status(f"{job.package}: compiled wheel reused from the cache (key {key})")
        return hit
    jobs = compile_jobs(job, archs)
    estimate = host_estimate(job.package, archs, jobs, inputs.mode)
    inputs.reporter.progress(estimate.line())  # before any of it is spent
    consent(estimate, inputs.yes, inputs.ask)
    held = claim(root, key)
    work = held.path
    try:
        with sigterm_unwinds():
            prov = _compile(job, toolkit, archs, key, held, inputs, estimate)
        out = work / "out"
        store(out, prov)
        try:
            os.rename(out, final)
        except OSError:  # another build finished the same key first
            if reuse(final) is None:
                raise
        shutil.rmtree(work, ignore_errors=True)
        done = describe(next(final.glob("*.whl")), prov, reused=False)
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
