"""install.sh's entry: `main([bundle_dir, *options])` -> exit code.

install.sh (a short sh shim) finds a Python 3.8+ and runs this isolated (-I, no bytecode read
from the bundle, the bundle's lib/ alone added to the path). The steps are in `steps`; this
reads the manifest and the options, runs them (or the dry run), and renders the result.
"""

from __future__ import annotations

import os
import sys

from verl_bundle.airgap.install import bytecode

bytecode.switch()  # first: what follows loads the interpreter's modules from their bytecode

from verl_bundle.airgap.contract import manifest as mf  # noqa: E402
from verl_bundle.airgap.contract.events import EventLog  # noqa: E402
from verl_bundle.airgap.install.options import (  # noqa: E402
    EXIT_DAMAGED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    InstallError,
    parse,
    usage,
)
from verl_bundle.airgap.install.output import Output  # noqa: E402
from verl_bundle.airgap.install.steps import Installer  # noqa: E402
from verl_bundle.airgap.render import dumps, envelope  # noqa: E402


def main(argv: list[str]) -> int:
    """install.sh's entry: argv is [bundle_dir, *options]. Returns the exit code."""
    if any(a == "--from" or a.startswith("--from=") for a in argv):  # a served bundle
        from verl_bundle.airgap.verify.served import main as from_url

        return from_url(argv[1:] if argv and not argv[0].startswith("-") else argv)
    bundle = argv[0] if argv else "."
    try:
        m: mf.Manifest | None = mf.load(bundle)
    except mf.ManifestError:
        m = None
    try:
        opts = parse(argv, m)
    except InstallError as exc:
        print(f"install.sh: {exc.message}", file=sys.stderr)
        return exc.code
    if opts.help:
        print(usage(m))
        return EXIT_OK
    out = Output(to_stderr=opts.json)
    events = EventLog(opts.events)
    if opts.log and not out.open_log(os.path.abspath(opts.log)):
        out.err(f"cannot write the log {opts.log}; continuing without it")
    code, message = EXIT_OK, ""
    installer = None
    try:
        if m is None:
            mf.load(bundle)  # raises again, with the reason
            raise AssertionError("unreachable")
        installer = Installer(opts, m, out, events)
        if opts.dry_run:
            from verl_bundle.airgap.install.plan import dry_run

            dry_run(installer)
        else:
            installer.run()
    except mf.ManifestError as exc:
        code, message = EXIT_DAMAGED, f"{exc}; nothing was installed. Copy the bundle again."
    except InstallError as exc:
        code, message = exc.code, exc.message
    except KeyboardInterrupt:
        where = installer.current if installer else "(start)"
        code = EXIT_INTERRUPTED
        message = f"interrupted during: {where}. Run ./install.sh again with the same options to continue."
    if message:
        out.err(message)
    events.emit("result", ok=code == 0, exit_code=code, message=message, log=out.log_path)
    if opts.json:
        result = {
            "bundle": opts.bundle,
            "target": installer.target if installer else None,
            "exit_code": code,
            "message": message,
            "log": out.log_path,
            "steps": events.ended("step"),
            "phases": events.ended("phase"),
        }
        print(dumps(envelope("install", code == 0, result)))
    events.close()
    out.close()
    return code
