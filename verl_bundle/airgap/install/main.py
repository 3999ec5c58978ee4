"""The install command (what install.sh runs): options -> steps -> one verdict, printed last.

install.sh (a short sh shim) finds a Python 3.8+ and runs the server program isolated (-I, no
bytecode read from the bundle, the bundle's lib/ alone on the path). The steps are in `steps`;
this reads the manifest and the options, runs them (or the dry run), and ends every run with
the verdict line and its exit code: 0 only when the environment is ready to train.
"""

from __future__ import annotations

import argparse
import os

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import Verdict, of_error
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.events import EventLog
from verl_bundle.airgap.errors import EXIT_OK, InterruptError, ServerError, UsageError, stopped
from verl_bundle.airgap.install.options import Options, options, usage
from verl_bundle.airgap.install.output import Output
from verl_bundle.airgap.install.steps import Installer


def install(args: argparse.Namespace) -> int:
    """One run of install.sh; returns the exit code."""
    try:
        m: mf.Manifest | None = mf.load(args.bundle)
    except mf.ManifestError:
        m = None
    if args.help:
        render.say(usage(m))
        return EXIT_OK
    opts = options(args, m)  # UsageError: one line, exit 2, before anything is written
    out = Output(to_stderr=opts.json)
    try:
        events = EventLog(opts.events)
    except OSError as exc:
        why = getattr(exc, "message", None) or f"--events {opts.events}: {exc.strerror or exc}"
        raise UsageError(f"{why}; give a file you can write") from None
    if opts.log and not out.open_log(os.path.abspath(opts.log)):
        out.err(f"cannot write the log {opts.log} ({out.why}); continuing without it")
    installer: Installer | None = None
    message = ""
    try:
        if m is None:
            mf.load(args.bundle)  # raises again, with the reason
            raise AssertionError("unreachable")
        installer = Installer(opts, m, out, events)
        if opts.dry_run:
            from verl_bundle.airgap.install.plan import dry_run

            dry_run(installer)
            verdict = Verdict(EXIT_OK, "can-install", "dry run: nothing was changed")
        else:
            verdict = installer.run()
    except mf.ManifestError as exc:
        message = f"{exc}; nothing was installed. Copy the bundle again."
        verdict = of_error(exc.code, stopped(exc.code))
    except ServerError as exc:
        message = exc.message
        verdict = of_error(exc.code, stopped(exc.code))
    except KeyboardInterrupt:
        where = installer.current if installer else "(start)"
        stop = InterruptError(
            f"interrupted during: {where}. Run ./install.sh again with the same options to continue."
        )
        message = stop.message
        verdict = of_error(stop.code, stopped(stop.code))
    if message:
        out.err(message)
    out.say(verdict.line)
    events.emit(
        "result",
        ok=verdict.ok,
        exit_code=verdict.code,
        message=message,
        log=out.log_path,
        verdict=verdict.to_dict(),
    )
    if opts.json:
        result = _result(opts, installer, verdict, message, out, events)
        render.show("install", verdict.ok, result, "", True, verdict)
    events.close()
    out.close()
    return verdict.code


def _result(
    opts: Options,
    installer: Installer | None,
    verdict: Verdict,
    message: str,
    out: Output,
    events: EventLog,
) -> dict[str, object]:
    findings = installer.findings if installer else None
    return {
        "bundle": opts.bundle,
        "target": installer.target if installer else None,
        "exit_code": verdict.code,
        "message": message,
        "log": out.log_path,
        "steps": events.ended("step"),
        "phases": events.ended("phase"),
        "checks": findings.to_dict() if findings else None,
    }
