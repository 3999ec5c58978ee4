"""The install's steps, in order: verify, Python, doctor, venv, phases, post-install, done.

Each step is announced and emitted as events by stepping.Steps; the bundle's files are verified
ahead of the steps that read them by verification.Verification (its docstring has the design).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import stat
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import Verdict
from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.events import EventLog
from verl_bundle.airgap.errors import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    DamagedError,
    ServerError,
    ServerNotReadyError,
    StepError,
    UsageError,
)
from verl_bundle.airgap.heartbeat import heartbeat
from verl_bundle.airgap.install import bundled
from verl_bundle.airgap.install import env as envs
from verl_bundle.airgap.install import phases as ph
from verl_bundle.airgap.install.options import Options
from verl_bundle.airgap.install.output import Output
from verl_bundle.airgap.install.state import State
from verl_bundle.airgap.install.stepping import STEPS, Steps, heading
from verl_bundle.airgap.install.verification import Verification, empty_new_prefix, unlisted_code
from verl_bundle.airgap.postinstall.run import Findings
from verl_bundle.airgap.verify.bundle import Report

SERVER_PROGRAM = "lib"  # <prefix>/.verl-bundle/lib: the bundle's lib/, kept by the install
# The interpreter flags and bootstrap every server tool runs with: no PYTHON* variables, no
# user site, no current directory on the path, no bytecode read from or written to the bundle.
ISOLATED = ("-I", "-B")
BOOT = (
    "import sys; sys.pycache_prefix = '/dev/null/none'; sys.path.insert(0, sys.argv.pop(1)); "
    "from verl_bundle.airgap.install import bytecode; bytecode.switch(); "
    "from verl_bundle.airgap.cli import main; sys.exit(main(sys.argv[1:]))"
)


class Installer(Steps):
    """One run of install.sh over a bundle's typed manifest."""

    def __init__(self, opts: Options, m: mf.Manifest, out: Output, events: EventLog) -> None:
        super().__init__(out, events)
        self.opts, self.m = opts, m
        self.target = opts.target
        self.state = State(self.target)
        self.target_py = os.path.join(self.target, "bin", "python")
        self.resumed = False
        self.kind = ""
        self.checking: Verification | None = None
        self.existed = False  # whether the prefix was there before this run
        self.early_uv: envs.EarlyUv | None = None  # uv unpacked while the doctor runs
        self.findings: Findings | None = None  # what post-install found (for --json)
        self.image_path: str | None = None  # --image FILE, checked
        self.pip_due = False  # the bundled pip is still to come into the new venv
        self.tools: envs.Tools | None = None  # pip and uv, once the venv step found them
        self.examined: Future[Any] | None = None  # the fingerprint's examination, on a thread
        self.sweeps: list[threading.Thread] = []  # uv caches being removed (sweep_uv_cache)
        self.prefix: Confined | None = None  # the prefix, held open and locked for the run
        self.tmp = envs.RunTmp(self.state)  # this run's own TMPDIR, from the venv step on

    # -- the steps ------------------------------------------------------------------------------

    def verify(self) -> None:
        """The signature (--allowed-signers) and a delta's base (--base) first; then the lists,
        lib/ and the generated files now, the payload behind the install
        (install/verification.py has the design)."""
        with self.step("verify", STEPS[0][1]) as result:
            self.signed()
            self.no_downgrade()
            self.completed()
            self.checking = Verification(self.opts.bundle, self.m)
            planted = unlisted_code(self.opts.bundle, self.m)
            if not self.checking.begin() or planted:
                quick = self.checking.absent()  # a truncated copy: said at once, unhashed
                self.damaged(self.checking.quick() if quick else self.checking.finish(), planted)
            now, later = len(self.checking.first), len(self.checking.later)
            result["detail"] = f"{now} files; {later} more while the install goes on"

    def signed(self) -> None:
        """--allowed-signers: a bundle not signed by one of them, or altered since, is refused
        before anything of it is trusted (airgap/verify/signature.py)."""
        if not self.opts.allowed_signers:
            return
        from verl_bundle.airgap.verify import signature

        found = signature.check_bundle(self.opts.bundle, self.opts.allowed_signers)
        if not found.ok:
            raise DamagedError(found.line)
        self.out.say(f"    {found.line}")
        self.out.say(
            "    (this bundle's own check: it catches a damaged or unsigned copy, not a forged "
            "one; the gate or verl-bundle-verify on the tarball is what decides)"
        )

    def no_downgrade(self) -> None:
        """A bundle older than the one installed in the prefix (its release number) is refused
        unless --allow-downgrade (airgap/trust/release.py). Against accidents: the installed
        verifier is what refuses a forged one."""
        from verl_bundle.airgap.trust import release

        old = release.installed(self.state.dir)
        why = release.downgrade(self.m, old, f"installed in {self.target}") if old else None
        if old is None or why is None:
            return
        if not self.opts.allow_downgrade:
            raise DamagedError(why)
        self.out.say(f"    --allow-downgrade: release {self.m.release} replaces {old.release}")

    def base_plan(self) -> tuple[list[Any], int] | None:
        """--base: the usage errors, then where each file a delta leaves to its base comes
        from, each checked by its sha256 (install/base.py `plan`: BaseError, exit 3, for one
        in neither place); nothing is placed. None for a full bundle. The dry run asks the
        same, so it fails as the real run would."""
        if self.m.delta is None:
            if self.opts.base:
                raise UsageError(
                    f"--base {self.opts.base}: this bundle is a full one, not a delta; "
                    "run ./install.sh without --base"
                )
            return None
        if not self.opts.base:
            raise UsageError(
                f"this bundle is a delta: it left {len(self.m.delta.omitted)} file(s) to its base "
                f"{self.m.delta.base}; give --base OLD_DIR (that bundle extracted, or its wheels)"
            )
        from verl_bundle.airgap.install import base

        return base.plan(self.m, self.opts.bundle, self.opts.base)

    def completed(self) -> None:
        """A delta bundle takes the files it left out from --base OLD_DIR, each checked against
        this manifest, before the whole is verified as a full bundle (install/base.py)."""
        planned = self.base_plan()
        if planned is None:
            return
        from verl_bundle.airgap.install import base

        done = base.place(self.opts.bundle, *planned)
        copied = len(done.taken) - done.linked
        self.out.say(
            f"    took {len(done.taken)} file(s) from {self.opts.base} ({done.linked} linked, "
            f"{copied} copied; {done.already} already here), each checked against the manifest"
        )

    def require(self, paths: Iterable[str]) -> None:
        """Wait until the background verification has these files; stop if any is damaged."""
        if self.checking is not None and not self.checking.require(paths):
            self.damaged(self.checking.finish())

    def damaged(self, report: Report, planted: Iterable[str] = ()) -> None:
        """Exit 3 naming every problem; a new prefix this run filled is emptied first."""
        if self.checking is not None:
            self.checking.stop()
        problems = [p.line() for p in report.problems]
        problems += [
            f"{p}: not listed in the manifest (planted code?)"
            for p in planted
            if p not in report.extra
        ]
        if not problems:
            return  # the quick check was stricter than the judgement: intact after all
        if self.kind == "new":
            self.swept()  # no thread still removing inside the prefix while it is emptied
            if (self.out.log_path or "").startswith(self.target + os.sep):
                self.out.close()
                self.out.log_path = None
            self.tmp.close()
            self.state.close()
            if self.prefix is not None:
                empty_new_prefix(self.prefix, keep=self.existed)
        raise DamagedError(
            "the bundle is damaged; these files do not match SHA256SUMS or the manifest:\n"
            + "\n".join(f"    {p}" for p in _summary(problems))
            + f"\n{self.nothing()} Copy the tarball again and check it against its .sha256 file."
        )

    def python(self) -> str:
        with self.step("python") as result:
            py = envs.choose_python(self.opts, self.m, self.target)
            carried = bundled.checked(self.opts, self.m, py)
            got = envs.python_version(py)
            self.out.say(
                heading(
                    "python",
                    f"Python: {py} is {got or envs.NO_VERSION}; this bundle is for Python {self.m.target.python} ({self.m.target.python_tag})",
                )
            )
            if carried:
                self.out.say(f"    the {carried}: {bundled.why(self.opts, self.m)}")
            envs.check_python(py, self.m, got)
            result["detail"] = f"{py} is {got or envs.NO_VERSION}" + (
                f" ({carried})" if carried else ""
            )
        return py

    def doctor(self, python: str) -> None:
        if self.opts.skip_doctor:
            with self.step("doctor", "doctor skipped (--skip-doctor)") as result:
                result.update(status="skip", detail="doctor skipped (--skip-doctor)")
            return
        with self.step(
            "doctor", "doctor: checking this server against the bundle's needs"
        ) as result:
            from verl_bundle.airgap import doctor

            report = doctor.run_doctor(
                self.m, python, self.target, self.opts.require_gpu, self.opts.skip_phases
            )
            for line in doctor.render_text(report).splitlines():
                self.out.say(line)
            if not report.ok:
                raise ServerNotReadyError(
                    f"the doctor found problems (above, each with its fix); {self.nothing()}\n"
                    "Fix them and run ./install.sh again, or pass --skip-doctor if you know better."
                )
            result["detail"] = "ready to install"

    def confirm(self) -> None:
        """Say what an install into an existing environment changes, and ask (unless --yes)."""
        changes: list[str] = []
        if self.kind == "env":
            have = envs.versions_in(self.target_py)
            for f in self.m.installed:
                old = have.get(f.name)
                if old is not None and old.lower() != f.version.lower():
                    changes.append(f"{f.name} {old} -> {f.version}")
            if changes:
                self.out.say(
                    f"Installing into {self.target} changes {len(changes)} distribution(s) it has:"
                )
                for c in changes:
                    self.out.say(f"    {c}")
        if self.opts.yes:
            return
        if not sys.stdin.isatty():
            if changes:
                raise UsageError(
                    f"--into-env {self.target} would change the distributions above; pass --yes to accept"
                )
            return
        sys.stdout.write(f"Install {self.m.name} into {self.target}? [y/N] ")
        sys.stdout.flush()
        answer = sys.stdin.readline().strip()
        if answer not in ("y", "Y", "yes", "YES"):
            raise StepError(
                f"nothing was installed: the answer was {answer or 'no'!r}, not yes "
                "(pass --yes to install without asking)"
            )

    def venv(self, python: str) -> envs.Tools:
        if self.kind == "env":
            text = f"installing into the existing environment {self.target}"
        elif self.kind == "ours" and os.access(self.target_py, os.X_OK):
            text = f"venv {self.target} exists; continuing in it"
        else:
            text = f"creating the venv {self.target}"
        with self.step("venv", text):
            self.state.create()
            if self.kind != "env" and not self.state.made_venv():
                self.state.mark_venv(self.m.name)  # before the venv: a killed run resumes
            if self.opts.log is None:
                where = self.state.path("install.log")
                if not self.out.open_log(where, lambda: self.state.log("install.log")):
                    self.out.err(
                        f"cannot write the log {where} ({self.out.why}); going on without it"
                    )
            self.tmp.start()
            self.require(f.path for f in self.m.bootstrap)
            tools = envs.find_tools(
                self.m, self.opts.bundle, self.target_py, self.state, False, self.early_uv
            )
            if self.early_uv is not None:  # taken (or not): its directory goes now
                self.early_uv.close()
            if self.kind != "env" and not os.access(self.target_py, os.X_OK):
                self.make_venv(python, tools)
            boot = ph.pip_bootstrap(tools, self.state) if self.kind != "env" else None
            if boot is not None and not self.state.done("pip", ph.pip_key(self.m)):
                self.pip_due = True  # with the first uv phase, else on its own (below)
                plans = ph.plan_phases(self.m, self.opts, self.target, tools, self.state)
                if ph.first_uv_phase(plans) is None:
                    self.state.start("pip")
                    self.run_or_fail("pip", boot, "pip.log")
                    self.state.finish("pip", ph.pip_key(self.m))
                    self.pip_due = False
        return tools

    def make_venv(self, python: str, tools: envs.Tools) -> None:
        """The venv, by the bundled uv where it runs (python -m venv where uv cannot make it)."""
        if tools.uv is not None:
            self.guard_uv_cache()
            made = ph.Command(
                tuple(envs.venv_command(python, self.target, tools.uv)),
                tuple(tools.uv_env(self.state).items()),
            )
            with self.state.log("venv.log") as log:
                if ph.run_logged(made, log, self.out.say) == 0:
                    return
        cmd = ph.Command(tuple(envs.venv_command(python, self.target)))
        with self.state.log("venv.log") as log:
            code = ph.run_logged(cmd, log, self.out.say)
        if code != 0:
            raise ServerNotReadyError(
                f"could not create a venv with {python}. On Debian/Ubuntu: apt install "
                f"python{self.m.target.python}-venv (from the intranet mirror or install media)"
            )

    def phases(self, tools: envs.Tools) -> list[str]:
        """Install every phase not yet installed; returns the phases skipped on purpose."""
        with self.step("phases") as result:
            paths = envs.site_paths(self.target_py, self.target)
            self.confine(paths, tools)
            if self.kind != "env":
                for gone in ph.remove_departed(self.m, self.state, paths):
                    self.out.say(f"    removed {gone}: no longer in the bundle")
            repairs = self.repairs(paths)
            plans = ph.plan_phases(
                self.m, self.opts, self.target, tools, self.state, repairs, self.pip_due
            )
            if self.kind != "new":  # an environment that existed: nothing changes unverified
                self.require(self.checking.files if self.checking else ())
            for plan in plans:
                if plan.action == "install":
                    self.require(f.path for f in self.m.files_of(plan.phase))
                self.phase(plan, paths)
            if self.checking is not None:
                self.damaged(self.checking.finish())
            self.state.record_installed({f.name: f.version for f in self.m.installed})
            skip_phases = [p.phase for p in plans if p.action == "skip"]
            result["detail"] = f"skipped: {', '.join(skip_phases)}" if skip_phases else ""
        return skip_phases

    def confine(self, paths: Any, tools: envs.Tools) -> None:
        """Before a phase writes into the environment: the links there that lead outside the
        prefix removed, never their targets (refused into an environment this installer did
        not make, unless --repair); the baseline of what no RECORD lists recorded once, when
        the venv is new or an existing environment is first installed into
        (install/strays.py)."""
        from verl_bundle.airgap.install import strays

        assert self.prefix is not None
        plans = ph.plan_phases(self.m, self.opts, self.target, tools, self.state)
        if self.opts.repair or any(p.action == "install" for p in plans):
            ours = self.kind != "env" or self.opts.repair
            strays.clear_links(self.prefix, paths, self.out.say, ours)
        if self.kind == "new" or (self.kind == "env" and not self.state.installed()):
            strays.record_baseline(self.prefix)

    def repairs(self, paths: Any) -> dict[str, list[str]]:
        """--repair: what differs from the bundle, by phase, said before anything changes;
        what no RECORD lists and came after the install is said and removed first."""
        if not self.opts.repair:
            return {}
        from verl_bundle.airgap.install import strays

        assert self.prefix is not None
        self.require(self.checking.files if self.checking else ())  # reinstalled from these
        strays.remove_unlisted(self.prefix, self.out.say)
        found = ph.differing(self.m, self.opts.skip_phases, paths)
        self.resumed = True  # post-install then checks every installed file too
        count = sum(len(v) for v in found.values())
        self.out.say(
            f"    --repair: {count} distribution(s) differ from the bundle"
            if count
            else "    --repair: every distribution's files and version are as bundled"
        )
        for phase, lines in found.items():
            for line in lines:
                self.out.say(f"      {phase}: {line}")
        return found

    def phase(self, plan: ph.PhasePlan, paths: Any) -> None:
        self.current = f"phase {plan.phase}"
        started = time.monotonic()
        self.events.emit("phase", phase=plan.phase, status="start", tool=plan.tool, why=plan.why)
        if plan.action != "install":
            if plan.action == "skip":
                self.out.say(heading("phases", f"phase {plan.phase}: skipped (--skip-phase)"))
            else:
                self.out.say(f"    phase {plan.phase}: already installed")
            self._end("phase", plan.phase, "skip", started, plan.why, tool=plan.tool, why=plan.why)
            return
        if plan.why == "interrupted":
            self.resumed = True
            self.out.say(
                f"    phase {plan.phase} was interrupted before; its half-written distributions are removed by their files and it is installed again"
            )
        elif plan.why == "repair":
            self.out.say(
                f"    phase {plan.phase}: reinstalling what differs from the bundle (--repair)"
            )
        elif plan.why == "changed":
            self.out.say(
                f"    phase {plan.phase} changed since it was installed (a newer bundle); installing what changed"
            )
        for gone in ph.reconcile(
            self.m, plan.phase, self.opts.bundle, paths, plan.why in ("interrupted", "repair")
        ):
            self.out.say(f"    removed {gone}")
        if plan.max_jobs is not None:
            words = " ".join(f"{k}={v}" for k, v in plan.build_env)
            self.out.say(
                heading(
                    "phases",
                    f"phase {plan.phase}: building on this server (MAX_JOBS={plan.max_jobs}; {words})",
                )
            )
            from verl_bundle.airgap.doctor.resources import phase_estimates

            for line in phase_estimates(self.m, plan.phase, plan.max_jobs):
                self.out.say(f"    {line}")
        else:
            self.out.say(heading("phases", f"phase {plan.phase} ({plan.tool})"))
        if plan.pip:  # the bundled pip comes with this uv call
            ph.write_pip_requirement(self.m, self.state)
            self.state.start("pip")
        self.state.start(plan.phase)
        try:
            with heartbeat(self.out.say, f"phase {plan.phase}"):
                self.run_or_fail(plan.phase, plan.command, f"phase-{plan.phase}.log")
        except (ServerError, KeyboardInterrupt) as exc:
            detail = (
                "interrupted"
                if isinstance(exc, KeyboardInterrupt)
                else f"phase '{plan.phase}' failed"
            )
            self._end("phase", plan.phase, "fail", started, detail, tool=plan.tool, why=plan.why)
            raise
        self.state.finish(plan.phase, plan.key)
        if plan.pip:
            self.state.finish("pip", ph.pip_key(self.m))
            self.pip_due = False
        self._end("phase", plan.phase, "ok", started, plan.why, tool=plan.tool, why=plan.why)

    def run_or_fail(self, what: str, cmd: ph.Command, logname: str) -> None:
        """Run `cmd` with its output shown and kept in the state directory's `logname`
        (emptied first); a failure says why (explain) and how to continue."""
        logfile = self.state.path(logname)
        self.guard_uv_cache()
        with self.state.log(logname, fresh=True) as log:
            code = ph.run_logged(cmd, log, self.out.say)
        self.sweep_uv_cache(later=code == 0)
        if code == 0:
            return
        lines = [
            f"phase '{what}' failed.",
            f"command: {cmd.show()}",
            f"last lines of its output ({logfile}):",
        ]
        lines += [f"    {line}" for line in ph.tail(logfile)]
        self.out.err("\n".join(lines))
        self.out.say("")
        from verl_bundle.airgap.explain import engine

        text = engine.read_log(logfile)
        need = f"{self.m.installed_size / 1e9:.1f} GB" if self.m.installed_size else ""
        findings = engine.explain_text(text, {"need": need} if need else None)
        for line in engine.render_text(findings, text).splitlines():
            self.out.say(line)
        raise StepError(
            f"fix the cause and run ./install.sh again: it continues from phase '{what}'."
        )

    def guard_uv_cache(self) -> None:
        """uv writes its cache by path (UV_CACHE_DIR, in the state directory): anything there
        but a directory of ours (a link planted there) goes first, the link itself."""
        st = self.state.confined.lstat("uv-cache")
        if st is not None and not stat.S_ISDIR(st.st_mode):
            self.state.remove("uv-cache")

    def sweep_uv_cache(self, later: bool) -> None:
        """Remove the command's uv cache (the installed files are hard links or copies, not
        references into it). After a success, off the critical path: renamed aside and removed
        on a thread while the install goes on (tens of thousands of files on a real stack);
        every sweep is joined before the run ends, and a killed run's leftovers go next time."""
        state = self.state.confined
        st = state.lstat("uv-cache")
        if st is None:
            return
        if not later or not stat.S_ISDIR(st.st_mode):
            state.remove("uv-cache")  # a link planted there: the link, never its target
            return
        aside = f"uv-cache.old-{len(self.sweeps)}"
        try:
            state.remove(aside)
            state.replace("uv-cache", aside)
        except OSError:
            state.remove("uv-cache")
            return
        sweep = threading.Thread(target=_quietly_remove, args=(state, aside), daemon=True)
        sweep.start()
        self.sweeps.append(sweep)

    def swept(self) -> None:
        """Wait for the uv caches being removed (and remove a killed run's leftovers)."""
        for sweep in self.sweeps:
            sweep.join()
        if self.state.exists():
            state = self.state.confined
            for name in state.listdir():
                if name.startswith("uv-cache.old-"):
                    _quietly_remove(state, name)

    def postinstall_command(self, skip_phases: list[str], result: str) -> ph.Command:
        argv = [self.target_py, *ISOLATED, "-c", BOOT, os.path.join(self.opts.bundle, "lib")]
        argv += ["postinstall", "--bundle", self.opts.bundle, "--result", result]
        argv += ["--require-gpu"] if self.opts.require_gpu else []
        argv += ["--uv", self.tools.uv] if self.tools is not None and self.tools.uv else []
        # pip and uv check every wheel's hash as they install; after an interrupted phase,
        # every installed file is also checked against its RECORD.
        argv += ["--check-files"] if self.resumed else []
        argv += ["--deep"] if self.dry_run else []
        for name in skip_phases:
            argv += ["--skip-phase", name]
        return ph.Command(tuple(argv))

    def postinstall(self, skip_phases: list[str]) -> Findings:
        """Post-install's checks, run by the venv's python, read back as typed findings from
        the JSON envelope it writes, and shown here (the verdict is judged from them)."""
        title = STEPS[5][1]
        if self.dry_run:  # minutes: say what is coming (the deadline bounds it)
            title += ", then verl's trainer started offline on a tiny model (the dry run)"
        with self.step("post-install", title) as result:
            where = self.state.path("checks.json")
            self.state.remove("checks.json")
            self.run_or_fail(
                "post-install checks", self.postinstall_command(skip_phases, where), "checks.log"
            )
            found = _read_findings(where)
            if self.opts.quick and self.recipe:
                found = self.left_out(found)
            self.findings = found
            for line in render.checks_text(found.installed + found.readiness).splitlines():
                self.out.say(f"    {line}" if line else "")
            result["detail"] = found.verdict.line
            if found.verdict.code == EXIT_FAILED:  # not installed as bundled
                result["status"] = "fail"
        return found

    def examine(self) -> Future[Any] | None:
        """The installed environment examined for its fingerprint on a thread, beside
        post-install (about 2.5 s of stat calls for 30,000 files, off the critical path)."""
        from verl_bundle.airgap.doctor import fingerprint

        pool = ThreadPoolExecutor(max_workers=1)
        try:
            return pool.submit(fingerprint.examine, self.target)
        finally:
            pool.shutdown(wait=False)

    @property
    def recipe(self) -> bool:
        """The bundle's verl has a trainer dry run (verl 0.3 and later)."""
        from verl_bundle.airgap.postinstall import dryrun

        return dryrun.has_recipe(self.m)

    @property
    def dry_run(self) -> bool:
        """Post-install starts verl's trainer (readiness --deep), unless --quick."""
        return not self.opts.quick and self.recipe

    def left_out(self, found: Findings) -> Findings:
        """--quick: the trainer's start is not proven, and the verdict says so."""
        from verl_bundle.airgap.postinstall.dryrun_report import left_out

        program = os.path.join(self.opts.bundle, "lib", "verl_bundle", "airgap")
        prove = (  # isolated: nothing from the current directory or PYTHONPATH runs instead
            f"{shlex.quote(os.path.join(self.target, 'bin', 'python'))} -I -B "
            f"{shlex.quote(program)} readiness --bundle {shlex.quote(self.opts.bundle)} --deep"
        )
        check = left_out("--quick", prove)
        kept = tuple(c for c in found.readiness if c.id != check.id)  # its "not started" too
        return dataclasses.replace(found, readiness=(*kept, check))

    def done(self, skip_phases: list[str]) -> None:
        with self.step("done", f"done: {self.m.name} is installed in {self.target}") as result:
            from verl_bundle.airgap.doctor import fingerprint

            # What the doctor and the fleet report compare: examined while post-install ran
            # (it stats every installed file; post-install changes none of them).
            try:
                examined = self.examined.result() if self.examined else None
            except OSError:
                examined = None  # examined again below, as it was before the thread
            fingerprint.record(self.target, examined, self.prefix)
            self.record_release()
            self.keep_server_program()
            self.out.say(
                f"    activate it with:  source {shlex.quote(self.target + '/bin/activate')}"
            )
            if skip_phases:
                self.out.say(
                    f"    skipped phases: {', '.join(skip_phases)} (--skip-phase): their packages "
                    "are not installed"
                )
                result["detail"] = f"skipped: {', '.join(skip_phases)}"
            if self.out.log_path:
                self.out.say(f"    log: {self.out.log_path}")

    def record_release(self) -> None:
        """What a later bundle's release is compared with (`no_downgrade`)."""
        from verl_bundle.airgap.trust import release

        done = release.Release.of(self.m, release.manifest_sha256(self.opts.bundle))
        release.record(self.state.confined, done)

    def keep_server_program(self) -> None:
        """A copy of the bundle's lib/ (the server program, under 1 MB) in the state directory,
        so that preflight and the doctor run on the node after the bundle is gone (the Ray
        sbatch runs `preflight --launcher ray` from it on every node before `ray start`)."""
        lib, keep = os.path.join(self.opts.bundle, "lib"), self.state.path(SERVER_PROGRAM)
        state = self.state.confined
        partial = f"{SERVER_PROGRAM}.partial"  # the install holds the prefix's lock: one run
        try:
            state.remove(partial)  # what a killed run left
            state.copytree_in(lib, partial)
            state.remove(SERVER_PROGRAM)
            state.replace(partial, SERVER_PROGRAM)
        except OSError as exc:
            _quietly_remove(state, partial)
            self.out.say(f"    note: the server program was not kept in {keep}: {exc}")

    def nothing(self) -> str:
        """What the failure left: nothing, or an earlier install as it was."""
        if self.state.exists():
            return f"nothing was changed in {self.target} (it keeps what an earlier run installed)."
        return "nothing was installed."

    # -- the whole run ----------------------------------------------------------------------------

    def run(self) -> Verdict:
        """The whole install; the verdict is judged from post-install's typed findings."""
        self.kind = envs.check_prefix(self.opts, self.target)
        self.existed = os.path.lexists(self.target)
        if self.opts.image:
            from verl_bundle.airgap.install.image import check_target

            self.image_path = check_target(self.opts.image, self.target)
        self.prefix = envs.lock_prefix(self.target)
        self.state.attach(self.prefix)
        try:
            return self._run()
        finally:
            self.tmp.close()
            self.state.close()
            envs.unlock_prefix(self.prefix, made=not self.existed)

    def _run(self) -> Verdict:
        try:
            self.verify()
            if not os.path.exists(self.state.path(os.path.join("uv", "uv"))):
                self.early_uv = envs.EarlyUv(self.m, self.opts.bundle)
            try:
                python = self.python()
                self.doctor(python)
                self.confirm()
                tools = self.tools = self.venv(python)
            except ServerError as exc:  # damage outranks what failed while it was checked
                if exc.code != EXIT_DAMAGED and self.checking is not None:
                    self.damaged(self.checking.finish())
                raise
            skip_phases = self.phases(tools)
        except BaseException:
            self.swept()
            raise
        finally:
            if self.checking is not None:
                self.checking.stop()
            if self.early_uv is not None:
                self.early_uv.close()
        self.examined = self.examine()
        try:
            found = self.postinstall(skip_phases)
            if found.verdict.code != EXIT_FAILED:  # installed as bundled (ready to train or not)
                self.done(skip_phases)
        finally:
            self.swept()  # before an image packs the prefix: no uv cache left in it
            self.tmp.close()  # nor this run's TMPDIR
        if found.verdict.code != EXIT_FAILED and self.image_path is not None:
            self.image(self.image_path)
        return found.verdict

    def image(self, path: str) -> None:
        """--image FILE: the installed prefix, compiled and packed read-only (install/image.py)."""
        from verl_bundle.airgap.install import image

        with self.step("image") as result:
            self.out.say(
                f"==> image: compiling every module, then packing {self.target} into {path}"
            )
            packed = image.pack(self.target, path, self.target_py)
            mount = shlex.quote(self.target)
            self.out.say(
                f"    {packed.path}: {packed.size / 1e6:.1f} MB, sha256 {packed.sha256} "
                f"(in {packed.path}.sha256); bytecode {packed.compiled_seconds:.1f} s, "
                f"packed in {packed.packed_seconds:.1f} s"
            )
            self.out.say(
                f"    on each node, read-only at the same path: squashfuse {shlex.quote(path)} "
                f"{mount}  (or: mount -t squashfs -o ro,loop {shlex.quote(path)} {mount})"
            )
            base = image.interpreter_outside(self.target)
            if base:
                self.out.say(
                    f"    its python is {base}, outside the image: every node that mounts it "
                    f"needs that interpreter at that path (a bundle built --with-python carries "
                    "its own, which --image then uses)"
                )
            result["detail"] = f"{packed.path} sha256 {packed.sha256}"


def _quietly_remove(state: Confined, name: str) -> None:
    """Remove `name` from the state directory; what cannot be removed goes next run."""
    with contextlib.suppress(OSError):
        state.remove(name)


def _read_findings(path: str) -> Findings:
    """Post-install's envelope -> its typed findings; a missing or malformed one is a failed
    step (the checks could not run), never a silent pass."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        if not isinstance(doc, dict) or doc.get("command") != "postinstall":
            raise ValueError("not a postinstall envelope")
        return Findings.from_dict(doc["result"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StepError(
            f"the post-install checks left no result ({path}: {exc}); run ./install.sh again"
        ) from None


def _summary(problems: list[str], shown: int = 5) -> list[str]:
    """Problems as counts plus the first few names, so a truncated bundle is a few lines, not
    one per file (`verify` lists them all)."""
    missing = [p for p in problems if p.endswith(": missing")]
    others = [p for p in problems if not p.endswith(": missing")]
    out = others[:shown]
    if len(others) > shown:
        out.append(f"... and {len(others) - shown} more problem(s) (verify lists them all)")
    if missing:
        names = ", ".join(p[: -len(": missing")] for p in missing[:shown])
        more = f" and {len(missing) - shown} more" if len(missing) > shown else ""
        out.append(f"{len(missing)} file(s) missing: {names}{more}")
    return out
