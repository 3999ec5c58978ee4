"""The install phases: what each one will run (one plan, shown by --dry-run and executed by a
real run), the clean-up that makes a rerun always resume, and the logged command runner."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import IO, Callable, Mapping, Sequence

from verl_bundle.airgap.contract.manifest import Manifest, Phase, canonical
from verl_bundle.airgap.install import dists
from verl_bundle.airgap.install.env import Tools, clean_environ
from verl_bundle.airgap.install.options import Options
from verl_bundle.airgap.install.state import State, content_key

INSTALL_FLAGS = ("--no-index", "--no-deps", "--require-hashes")


@dataclass(frozen=True)
class Command:
    """A command with the environment variables it adds (shown as `env K=V ...`)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def show(self) -> str:
        words = [f"{k}={v}" for k, v in self.env]
        return shlex.join(["env", *words, *self.argv] if words else list(self.argv))

    def environ(self) -> dict[str, str]:
        env = clean_environ()
        env.update(dict(self.env))
        return env


@dataclass(frozen=True)
class PhasePlan:
    phase: str
    action: str  # "install", "done" (already installed), "skip" (--skip-phase)
    why: str  # for "install": "new", "interrupted", "changed", "repair"; else the reason shown
    tool: str  # "uv", "pip", "pip (build)"
    command: Command
    key: str  # the done-marker value once installed
    max_jobs: int | None = None
    build_env: tuple[tuple[str, str], ...] = ()
    pip: bool = False  # this uv call also brings the bundled pip into the new venv


def max_jobs(phase: Phase) -> int:
    """MAX_JOBS for a phase's source builds: the smallest any of them allows on this machine's
    RAM (an explicit MAX_JOBS in the environment wins)."""
    forced = os.environ.get("MAX_JOBS", "").strip()
    if forced.isdigit() and int(forced) > 0:
        return int(forced)
    from verl_bundle.airgap.doctor import max_jobs as jobs_for

    return min(jobs_for(b.max_jobs.gib_per_job, b.max_jobs.limit) for b in phase.source_builds)


def phase_command(
    m: Manifest, phase: Phase, bundle: str, target: str, tools: Tools, state: State
) -> tuple[str, Command, int | None, tuple[tuple[str, str], ...]]:
    req = os.path.join(bundle, phase.requirements)
    wheels = os.path.join(bundle, "wheels")
    if phase.source_builds:
        jobs = max_jobs(phase)
        merged = {k: v for b in phase.source_builds for k, v in b.env}
        if any(b.needs_cuda for b in phase.source_builds):
            from verl_bundle.airgap.install.cudahome import build_cuda_home  # the doctor's probes

            home = build_cuda_home(m, phase, target)
            if home is not None:
                merged["CUDA_HOME"] = home[0]
        build_env = tuple(sorted(merged.items()))
        # The venv's bin/ comes first on PATH: the bundle's ninja wheel (and anything else a
        # build runs by name) is found there.
        path = os.path.join(target, "bin") + os.pathsep + os.environ.get("PATH", os.defpath)
        env = (("PATH", path), *build_env, ("MAX_JOBS", str(jobs)))
        argv: tuple[str, ...] = (*tools.pip, "install", *INSTALL_FLAGS, "--no-build-isolation")
        argv += ("--find-links", os.path.join(bundle, "sources"), "--find-links", wheels, "-r", req)
        return "pip (build)", Command(argv, env), jobs, build_env
    if tools.uv is not None:
        uv: tuple[str, ...] = (
            tools.uv,
            "pip",
            "install",
            *INSTALL_FLAGS,
            "--offline",
            "--python",
            tools.python,
        )
        uv = (*uv, "--find-links", wheels, "-r", req)
        return "uv", Command(uv, tuple(tools.uv_env(state).items())), None, ()
    pip = (*tools.pip, "install", *INSTALL_FLAGS, "--find-links", wheels, "-r", req)
    return "pip", Command(pip), None, ()


def plan_phases(
    m: Manifest,
    opts: Options,
    target: str,
    tools: Tools,
    state: State,
    repairs: Mapping[str, Sequence[str]] | None = None,
    pip: bool = False,
) -> list[PhasePlan]:
    """What each phase will do on this run, from the markers of earlier runs; a finished phase
    with distributions in `repairs` (--repair, see `differing`) is installed again. `pip`: the
    bundled pip is still to come into the venv: with the first phase installed by uv."""
    out = []
    for phase in m.phases:
        tool, cmd, jobs, build_env = phase_command(m, phase, opts.bundle, target, tools, state)
        key = content_key(os.path.join(opts.bundle, phase.requirements))
        if phase.name in opts.skip_phases:
            action, why = "skip", "skipped (--skip-phase)"
        elif state.done(phase.name, key) and not state.interrupted(phase.name):
            action, why = "done", "already installed"
            if repairs and repairs.get(phase.name):
                action, why = "install", "repair"
        elif state.interrupted(phase.name):
            action, why = "install", "interrupted"
        elif state.was_done(phase.name):
            action, why = "install", "changed"
        else:
            action, why = "install", "new"
        out.append(PhasePlan(phase.name, action, why, tool, cmd, key, jobs, build_env))
    first = first_uv_phase(out) if pip and m.bootstrap_file("pip") else None
    if first is not None:
        withpip = dataclasses.replace(
            first, command=with_pip(first.command, m, opts.bundle, state), pip=True
        )
        out[out.index(first)] = withpip
    return out


def pip_bootstrap(tools: Tools, state: State) -> Command | None:
    """Bring the bundled pip into a new venv: through uv where it runs (faster, and it does not
    probe the machine the way pip's own start-up does), else pip from its wheel."""
    if tools.pip_wheel is None:
        return None
    if tools.uv is not None:
        argv: tuple[str, ...] = (
            tools.uv,
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--offline",
            "--quiet",
        )
        argv = (*argv, "--python", tools.python, tools.pip_wheel)
        return Command(argv, tuple(tools.uv_env(state).items()))
    return Command((*tools.pip, "install", "--no-index", "--no-deps", "--quiet", tools.pip_wheel))


def pip_key(m: Manifest) -> str:
    """The done-marker value of the bundled pip."""
    pip_file = m.bootstrap_file("pip")
    return f"sha256:{pip_file.sha256}" if pip_file else ""


def first_uv_phase(plans: list[PhasePlan]) -> PhasePlan | None:
    """The first phase this run installs with uv: the bundled pip comes with it (one uv call,
    not two), unless the phase carries a pip of its own."""
    for plan in plans:
        if plan.action == "install" and plan.tool == "uv":
            return plan
    return None


PIP_REQUIREMENT = "pip-requirement.txt"  # in the state directory


def with_pip(command: Command, m: Manifest, bundle: str, state: State) -> Command:
    """A uv phase's command that also installs the bundled pip, by its sha256 like every other
    wheel (--require-hashes): from a one-line requirements file in the state directory
    (write_pip_requirement, just before the phase runs)."""
    pip_file = m.bootstrap_file("pip")
    if pip_file is None:
        return command
    where = os.path.dirname(os.path.join(bundle, pip_file.path))
    extra = ("--find-links", where, "-r", state.path(PIP_REQUIREMENT))
    return Command((*command.argv, *extra), command.env)


def write_pip_requirement(m: Manifest, state: State) -> None:
    pip_file = m.bootstrap_file("pip")
    if pip_file is not None:
        state.write(PIP_REQUIREMENT, f"pip=={pip_file.version} --hash=sha256:{pip_file.sha256}\n")


# -- making a rerun always resume ---------------------------------------------------------------


def _differing(
    m: Manifest, phase: str, found: list[dists.Dist], check_hashes: bool
) -> tuple[list[tuple[dists.Dist, str]], list[str]]:
    """The phase's installed distributions that are not exactly the bundled one, completely
    installed (with why), and the bundled ones not installed at all."""
    wanted = {canonical(f.name): f for f in m.files_of(phase) if f.kind != "bootstrap"}
    index = dists.owners(found) if check_hashes else None
    bad = []
    for dist in found:
        f = wanted.get(dist.name)
        if f is None:
            continue
        if dist.version.lower() != f.version.lower():
            bad.append((dist, f"{dist.version} -> {f.version}"))
        else:
            why = dists.problem(dist, check_hashes, index)
            if why:
                bad.append((dist, why))
    have = {d.name for d in found}
    return bad, sorted(f"{n} {f.version}" for n, f in wanted.items() if n not in have)


def differing(
    m: Manifest, skip_phases: Sequence[str], paths: dists.SitePaths
) -> dict[str, list[str]]:
    """--repair: for each phase installed, the distributions whose files (every one hashed
    against its RECORD) or versions differ from the bundle, or that are missing, with why."""
    found = dists.installed(paths)
    out: dict[str, list[str]] = {}
    for phase in m.phase_names:
        if phase in skip_phases:
            continue
        bad, missing = _differing(m, phase, found, True)
        lines = [f"{d.name} {d.version} ({why})" for d, why in bad]
        lines += [f"{name} (not installed)" for name in missing]
        if lines:
            out[phase] = lines
    return out


def reconcile(
    m: Manifest, phase: str, bundle: str, paths: dists.SitePaths, check_hashes: bool
) -> list[str]:
    """Before a phase is installed (again): remove each of its distributions that is not
    exactly the bundled one, completely installed, by its files. pip and uv then install what
    is missing without being asked to uninstall anything. Returns what was removed, why."""
    wheels = {canonical(f.name): f.path for f in m.files_of(phase)}
    removed = []
    bad, _missing = _differing(m, phase, dists.installed(paths), check_hashes)
    for dist, why in bad:
        path = wheels[dist.name]
        dists.remove(dist, paths, os.path.join(bundle, path) if path.endswith(".whl") else None)
        removed.append(f"{dist.name} {dist.version} ({why})")
    return removed


def remove_departed(m: Manifest, state: State, paths: dists.SitePaths) -> list[str]:
    """Distributions an earlier bundle installed that this bundle no longer has: removed by
    their files (an upgrade in place)."""
    keep = {f.name for f in m.installed}
    gone = {n for n in state.installed() if n not in keep}
    removed = []
    for dist in dists.installed(paths):
        if dist.name in gone:
            dists.remove(dist, paths)
            removed.append(f"{dist.name} {dist.version}")
    return removed


# -- running a command with its output shown and kept --------------------------------------------


def run_logged(cmd: Command, log: IO[str], say: Callable[[str], None]) -> int:
    """Run `cmd`; each output line goes to `say` (console and install log) and to `log` (a
    log of the state directory, opened through it: state.State.log)."""
    log.write("$ " + cmd.show() + "\n")
    log.flush()
    proc = subprocess.Popen(
        list(cmd.argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=cmd.environ(),
    )
    try:
        with proc.stdout if proc.stdout is not None else contextlib.nullcontext():
            _pump(proc.stdout, log, say)
        return proc.wait()
    except BaseException:
        # Ctrl-C reached the command too (same process group); let it end on its own
        # terms, then go.
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def _pump(stream: IO[bytes] | None, log: IO[str], say: Callable[[str], None]) -> None:
    assert stream is not None
    for raw in stream:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        log.write(line + "\n")
        log.flush()
        say(line)


def tail(path: str, n: int = 25) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()[-n:]
    except OSError:
        return []
