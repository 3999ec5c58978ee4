"""Rehearsal: prove on the online host that a bundle installs with the network cut.

The tarball is verified and extracted into a temporary directory, its own install.sh runs under
`unshare -n` (a network namespace with only its loopback up, so Ray can start) into a throwaway
venv, and each step is timed. A source build this host cannot do (its nvcc is not the bundle's
CUDA) is left out and reported as not rehearsed, with the reason (a phase left out by
--skip-phase, as the user's choice). Then the trainer dry run (the bundle's own `readiness
--deep`, told the phases left out), whose verdict carries every failure of readiness and the
dry run; without a dry run (or its result) install.sh's own verdict, read from its events (never
from its text). Exit 0 only when the rehearsed venv is ready to train as far as this host can
prove.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_bundle.airgap import doctor
from verl_bundle.airgap.checks import STATUSES, Verdict, of_error
from verl_bundle.airgap.contract.events import Event, read_events
from verl_bundle.airgap.contract.manifest import Manifest, load
from verl_bundle.airgap.contract.skip_phases import SkipPhases, skip_phases
from verl_bundle.airgap.errors import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_NOT_READY,
    EXIT_OK,
    EXIT_USAGE,
)
from verl_bundle.airgap.verify.bundle import verify_tar
from verl_bundle.errors import BundleError, UsageError
from verl_bundle.interpreter import find_python
from verl_bundle.interpreter import python_version as _python_version
from verl_bundle.progress import Reporter

# install.sh's steps (its --events) as rehearse reports them.
_STEP_NAMES = {"post-install": "post-install checks"}
# install.sh's event statuses that end a step; they are already Check's words.
_ENDED = ("ok", "fail", "skip")


@dataclass(frozen=True)
class Step:
    """One row of a rehearsal, in Check's status words (airgap/checks.py STATUSES): ok, fail,
    skip, and untested for a phase this rehearsal could not exercise (its detail says why);
    an installed stack that is not ready to train has its post-install and dry-run rows fail."""

    name: str
    status: str
    seconds: float
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"step status {self.status!r} is not one of {STATUSES}")


@dataclass(frozen=True)
class Rehearsal:
    bundle: Path
    python: str
    network: str
    steps: tuple[Step, ...]
    log_tail: tuple[str, ...]
    verdict: Verdict  # install.sh's own (from its result event), or why it never got one
    not_rehearsed: tuple[tuple[str, str], ...] = ()  # (phase, why) left out of the run

    @property
    def ok(self) -> bool:
        """Ready to train: install.sh's verdict, exit 0."""
        return self.verdict.ok

    @property
    def installed(self) -> bool:
        """install.sh installed the bundle (ready to train or not)."""
        return self.verdict.code in (EXIT_OK, EXIT_NOT_READY)

    @property
    def last_line(self) -> str:
        """The verdict, as install.sh said it, with why phases were not rehearsed."""
        why = "".join(f" (phase {p} not rehearsed: {r})" for p, r in self.not_rehearsed)
        if self.installed:
            return f"rehearsal: installs offline; {self.verdict.line}{why}"
        return f"rehearsal FAILED: {self.verdict.line}{why}"


def network_cut() -> list[str]:
    """The command prefix that runs a program with no network, or a clear error."""
    if shutil.which("unshare") is None:
        raise BundleError(
            "rehearse needs `unshare` (util-linux) to cut the network; install util-linux"
        )
    reasons = []
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return prefix
        reasons.append(f"{' '.join(prefix)}: {probe.stderr.strip() or probe.returncode}")
    raise BundleError(
        "the kernel refuses a network namespace here ("
        + "; ".join(reasons)
        + "); run as root, or allow unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1), or rehearse on another host"
    )


# Inside the new network namespace: bring its loopback up (ray.init() and anything else that
# talks to 127.0.0.1 hangs without it), then run the command.
LOOPBACK_UP = ("sh", "-c", 'ip link set lo up 2>/dev/null || true; exec "$@"', "sh")


def _unbuildable(manifest: Manifest) -> dict[str, str]:
    """Phases with a CUDA source build this host's toolchain cannot do -> the reason."""
    phases = [p for p in manifest.phases if p.source_builds]
    if not phases:
        return {}
    report = doctor.run_doctor(manifest)
    blocking = [c for c in report.checks if c.id in ("nvcc", "gcc", "ninja") and c.status == "fail"]
    if not blocking:
        return {}
    reason = "; ".join(f"{c.id}: {c.summary}" for c in blocking)
    return {p.name: f"this host cannot build it ({reason})" for p in phases}


def steps_from_events(events: list[Event], not_rehearsed: dict[str, str]) -> list[Step]:
    """install.sh's step and phase events -> rehearse's steps. The "phases" step is shown as
    its phases; a phase left out because this host cannot build it is untested (not rehearsed)."""
    steps: list[Step] = []
    for e in events:
        if e.get("status") not in _ENDED:
            continue
        seconds = float(e.get("seconds") or 0.0)
        detail = str(e.get("detail") or "")
        if e["event"] == "phase":
            phase = str(e.get("phase"))
            if phase in not_rehearsed:
                steps.append(Step(f"phase {phase}", "untested", 0.0, not_rehearsed[phase]))
            elif e["status"] == "skip":
                steps.append(Step(f"phase {phase}", "ok", seconds, detail))
            else:
                steps.append(Step(f"phase {phase}", str(e["status"]), seconds, detail))
        elif e["event"] == "step" and e.get("step") != "phases":
            name = str(e.get("step"))
            steps.append(Step(_STEP_NAMES.get(name, name), str(e["status"]), seconds, detail))
    return steps


def _follow(stream: Any, events: str, reporter: Reporter) -> list[str]:
    """Read install.sh's output as it comes (kept for the failure report), showing the step
    it is in from its events."""
    lines: list[str] = []
    seen = 0
    for raw in stream:
        lines.append(raw.rstrip("\n"))
        now = read_events(events)
        for e in now[seen:]:
            if e.get("status") == "start":
                what = (e.get("phase") and f"phase {e['phase']}") or e.get("step")
                reporter.status(f"  {what} ...")
        seen = len(now)
    return lines


@dataclass(frozen=True)
class BareServer:
    """`--no-system-python`: install.sh runs under `env -i` with a PATH of this machine's
    tools and no Python, but `python3` (an old one, e.g. 3.6) when given."""

    python3: str | None = None


def bare_path(where: Path, python3: str | None) -> Path:
    """A folder for PATH: links to this machine's tools, none of them a Python (nor pip)."""
    where.mkdir(parents=True)
    for folder in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        tools = sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []
        for tool in tools:
            if tool.name.startswith(("python", "pip", "pydoc", "idle", "2to3", "pyenv", "conda")):
                continue
            if not os.path.lexists(where / tool.name) and os.access(tool, os.X_OK):
                (where / tool.name).symlink_to(tool)
    if python3 is not None:
        (where / "python3").symlink_to(os.path.abspath(python3))
    return where


def rehearse(
    tarball: Path,
    python: str | None,
    reporter: Reporter,
    keep: Path | None = None,
    bare: BareServer | None = None,
    skip_phases: SkipPhases = (),
) -> Rehearsal:
    """Rehearse in a temporary directory, or in `keep` (which must not exist), left in place
    with the extracted bundle (bundle/) and the venv (venv/) for inspection. `bare`: as a
    server with no Python 3.8+ (the bundle's own CPython must do). `skip_phases`: phases left
    out on request (install.sh --skip-phase), reported as not rehearsed."""
    if not tarball.is_file():
        raise UsageError(f"{tarball}: no such file; give the bundle's .tar")
    if keep is not None and keep.exists():
        raise UsageError(f"--keep {keep}: already exists; give a new directory")
    if keep is not None:
        keep.mkdir(parents=True)
        return _rehearse(tarball, python, reporter, keep, bare, skip_phases)
    with tempfile.TemporaryDirectory(prefix="verl-bundle-rehearse-") as tmp:
        return _rehearse(tarball, python, reporter, Path(tmp), bare, skip_phases)


def _asked(manifest: Manifest, names: tuple[str, ...]) -> dict[str, str]:
    """The phases `--skip-phase` names -> why they are not rehearsed; an unknown name is the
    one usage error every surface gives (airgap/contract/skip_phases.py)."""
    return {name: "left out by --skip-phase" for name in skip_phases(names, manifest.phase_names)}


def _rehearse(
    tarball: Path,
    python: str | None,
    reporter: Reporter,
    work: Path,
    bare: BareServer | None,
    asked_out: SkipPhases,
) -> Rehearsal:
    prefix = network_cut()
    steps: list[Step] = []
    started = time.monotonic()
    reporter.status(f"verifying {tarball.name} ...")
    report = verify_tar(str(tarball))
    if not report.ok:
        detail = "; ".join(p.line() for p in report.problems[:5])
        steps.append(Step("check tarball", "fail", time.monotonic() - started, detail))
        damaged = of_error(EXIT_DAMAGED, f"the tarball is damaged: {detail}")
        return Rehearsal(tarball, python or "", " ".join(prefix), tuple(steps), (), damaged)
    steps.append(Step("check tarball", "ok", time.monotonic() - started))
    t0 = time.monotonic()
    with tarfile.open(tarball) as tf:
        first = tf.next()
        if first is None:
            raise BundleError(f"{tarball}: the tarball is empty")
        tf.extractall(work / "bundle", filter="data")
    root = work / "bundle" / first.name.split("/")[0]
    steps.append(Step("extract", "ok", time.monotonic() - t0))
    manifest = load(str(root))
    asked = _asked(manifest, asked_out)
    want = manifest.target.python
    if bare is not None:
        py, command = _bare(manifest, bare, work, root)
    else:
        py = python or find_python(want) or ""
        if not py:
            raise UsageError(
                f"no Python {want} on this host to rehearse with; install it or pass --python PATH"
            )
        if _python_version(py) != want:
            raise UsageError(f"--python {py} is not Python {want}, which the bundle is for")
        command = [str(root / "install.sh"), "--python", py]
    not_rehearsed = left_out(asked, _unbuildable(manifest))
    events = work / "install-events.jsonl"
    args = [*command, "--prefix", str(work / "venv")]
    args += ["--yes", "--skip-doctor", "--events", str(events)]
    # The dry run follows install.sh as a step of its own (dry_run below), not inside it.
    args += ["--quick"] if has_dry_run(manifest) else []
    for phase in not_rehearsed:
        args += ["--skip-phase", phase]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["HOME"] = str(work)  # nothing of this user's is read or written
    reporter.status(f"installing with the network cut ({' '.join(prefix)}) ...")
    with subprocess.Popen(
        [*prefix, *LOOPBACK_UP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=work,
    ) as proc:
        assert proc.stdout is not None  # noqa: S101 - stdout=PIPE sets it
        lines = _follow(proc.stdout, str(events), reporter)
    code = proc.wait()
    found = read_events(str(events))
    verdict = verdict_of(found, code)
    ran = [_judged(s, verdict) for s in steps_from_events(found, not_rehearsed)]
    steps += ran
    if verdict.code not in (EXIT_OK, EXIT_NOT_READY) and not any(s.status == "fail" for s in ran):
        steps.append(Step("install.sh", "fail", 0.0, f"exited {code}"))
    if verdict.code in (EXIT_OK, EXIT_NOT_READY) and has_dry_run(manifest):
        reporter.status("starting verl's trainer offline (the dry run) ...")
        step, verdict = dry_run([*prefix, *LOOPBACK_UP], root, work, verdict, tuple(not_rehearsed))
        steps.append(step)
    return Rehearsal(
        tarball,
        py,
        " ".join(prefix),
        tuple(steps),
        tuple(lines[-25:]),
        verdict,
        tuple(not_rehearsed.items()),
    )


def left_out(asked: dict[str, str], unbuildable: dict[str, str]) -> dict[str, str]:
    """The phases left out of the rehearsal -> why: the user's --skip-phase is said as theirs
    (a phase this host also cannot build is still the user's choice); the rest this host's."""
    return {**unbuildable, **asked}


def _judged(step: Step, verdict: Verdict) -> Step:
    """The post-install row carries the verdict: installed but not ready fails, never an "ok"
    beside a verdict that says the trainer cannot start."""
    if step.name == _STEP_NAMES["post-install"] and verdict.code == EXIT_NOT_READY:
        return Step(step.name, "fail", step.seconds, step.detail)
    return step


def has_dry_run(manifest: Manifest) -> bool:
    """The bundle's verl has a trainer dry run (dryrun.json: verl 0.3 and later)."""
    from verl_bundle.airgap.postinstall import dryrun

    return dryrun.has_recipe(manifest)


def dry_run(
    cut: list[str], root: Path, work: Path, installed: Verdict, skip_phases: SkipPhases = ()
) -> tuple[Step, Verdict]:
    """`readiness --deep` in the rehearsed venv, in a network namespace of its own with its
    loopback up (Ray needs it): verl's own trainer started on a tiny model and dataset, up to
    the GPU boundary here, told the phases left out (`skip_phases`, so that what they would have
    brought says so, as install.sh's post-install does). Its verdict (readiness's checks and
    the dry run's, every failure counted) replaces the install's, which it includes; a run
    that gives no verdict fails, and is not ready unless the install's own verdict already
    says something worse."""
    from verl_bundle.bundle.server import command

    python = work / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(HOME=str(work))
    started = time.monotonic()
    # The bundle's own server program, isolated as install.sh runs it.
    argv = ["readiness", "--bundle", str(root), "--deep", "--json"]
    told = [a for phase in skip_phases for a in ("--skip-phase", phase)]
    cmd = command(str(python), root, [*argv, *told])
    proc = subprocess.run([*cut, *cmd], capture_output=True, text=True, env=env, cwd=work)
    if told and proc.returncode == EXIT_USAGE and not proc.stdout.strip():
        # A bundle built by an older verl-bundle: its readiness has no --skip-phase.
        cmd = command(str(python), root, argv)
        proc = subprocess.run([*cut, *cmd], capture_output=True, text=True, env=env, cwd=work)
    seconds = time.monotonic() - started
    try:
        doc = json.loads(proc.stdout)
        verdict = Verdict.from_dict(doc["verdict"])
        checks = [c for c in doc["result"]["checks"] if str(c["id"]).startswith("dryrun")]
    except (ValueError, KeyError, TypeError):
        tail = (proc.stderr.strip().splitlines() or [f"exited {proc.returncode}"])[-1]
        # Never the install's "ready" beside a dry run that failed: the trainer is not proven.
        unproven = of_error(
            EXIT_NOT_READY, f"not ready to train: the trainer dry run gave no result: {tail}"
        )
        kept = installed if not installed.ok else unproven
        return Step("trainer dry run", "fail", seconds, f"no result: {tail}"), kept
    failed = next((c for c in checks if c["status"] == "fail"), None)
    last = failed or next((c for c in reversed(checks) if c["status"] == "ok"), None)
    detail = f"{last['id']}: {last['summary']}" if last else verdict.line
    return Step("trainer dry run", "fail" if failed else "ok", seconds, detail), verdict


def verdict_of(events: list[Event], code: int) -> Verdict:
    """install.sh's verdict from its last result event; without one (it died before writing
    it), a failure naming its exit code."""
    for e in reversed(events):
        if e.get("event") == "result" and isinstance(e.get("verdict"), dict):
            try:
                return Verdict.from_dict(e["verdict"])
            except ValueError:
                break
    return of_error(code or EXIT_FAILED, f"install.sh exited {code} without a verdict")


def _bare(manifest: Manifest, bare: BareServer, work: Path, root: Path) -> tuple[str, list[str]]:
    """What the rehearsal calls its Python, and install.sh under `env -i` with a bare PATH."""
    carried = manifest.interpreter
    if carried is None:
        raise UsageError(
            "--no-system-python: this bundle carries no Python; build it with --with-python"
        )
    got = _python_version(bare.python3) if bare.python3 else None
    if got is not None and got != "unknown" and tuple(map(int, got.split("."))) >= (3, 8):
        raise UsageError(
            f"--server-python {bare.python3} is Python {got}: give one older than 3.8 (or none)"
        )
    path = bare_path(work / "server-bin", bare.python3)
    shown = f"the bundled CPython {carried.version} (PATH: " + (
        f"python3 is {bare.python3}, Python {got})" if bare.python3 else "no python3)"
    )
    env = ["env", "-i", f"HOME={work}", f"PATH={path}", "LANG=C.UTF-8"]
    return shown, [*env, str(root / "install.sh")]
