"""`python3 -m verl_bundle.airgap COMMAND ...`: the server program, one parser for every command.

This is the one entry point of the bundle's server side (install.sh, ./doctor and
install-assets.sh are thin shells that find a Python and call `main`), the one place that
parses options and the one place that prints a command's result and its verdict. The stage
packages (verify/, doctor/, install/, postinstall/, explain/, assets/, launch/) take the typed
manifest and return values; errors a user can act on are `ServerError`s (errors.py), caught
here, printed as their message, and turned into the exit code of the one table.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Any, Callable, NoReturn, Sequence

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import of_verify
from verl_bundle.airgap.contract.skip_phases import skip_phases
from verl_bundle.airgap.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    ServerError,
    UsageError,
    exit_table,
)

TOP = "python3 -m verl_bundle.airgap"


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing and exiting, and
    takes no abbreviated options (`--pre` is not `--prefix`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


# -- the commands ---------------------------------------------------------------------------


def _bundle(path: str, command: str) -> Any:
    """The manifest of the bundle at `path`: a path with no manifest is a usage error (it is not
    a bundle); a manifest that cannot be read is damage (ManifestError, exit 3)."""
    from verl_bundle.airgap.contract.manifest import MANIFEST, find_root, load

    root = find_root(path)
    if not os.path.isfile(os.path.join(root, MANIFEST)):
        raise UsageError(
            f"{command}: cannot read {os.path.join(root, MANIFEST)}: not an extracted bundle "
            "(give the directory install.sh is in)"
        )
    return load(root)


EACH_FILE = (
    "hash every file of a tarball too, when it matches its .sha256 (by default the whole file is "
    "hashed, each byte once: its members are the bytes the build hashed against the lock)"
)


def _verify(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.verify import check

    if not os.path.exists(args.path):
        raise UsageError(f"verify: {args.path}: no such file or directory")
    from verl_bundle.airgap.heartbeat import heartbeat

    def say(text: str) -> None:  # progress goes to stderr: stdout is the result (--json)
        print(text.strip(), file=sys.stderr, flush=True)

    say(f"verifying {args.path} ...")
    with heartbeat(say, "verify"):
        found = check.check(args.path, args.allowed_signers, args.each_file)
    lines = [f"FAILED: {p}" for p in found.problems]
    if found.signed:
        lines.insert(0, f"signed: {found.signed}")
    report = found.report
    v = of_verify(found.problems, f"OK: {report.checked} {report.what}")
    lines.append(v.line)
    result = {"path": report.subject, "checked": report.checked, "problems": found.problems}
    result["signed_by"] = found.signer
    render.show("verify", v.ok, result, "\n".join(lines), args.json, v)
    return v.code


def _doctor(args: argparse.Namespace) -> int:
    from verl_bundle.airgap import doctor

    root = doctor.locate(args.bundle)
    manifest = _bundle(root, "doctor") if root is not None else None
    if manifest is None and args.skip_phases:
        raise UsageError("doctor: --skip-phase needs a bundle (--bundle DIR)")
    report = doctor.run_doctor(
        manifest, args.python, args.prefix, args.require_gpu, args.skip_phases, args.deep
    )
    v = report.verdict
    render.show(
        "doctor", v.ok, doctor.render_json(report), doctor.render_text(report), args.json, v
    )
    return v.code


def _entry(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.launch.entry import examine

    found = examine(args.module)
    text = f"{'trainer' if found.trainer else 'not a trainer'}: {found.why}"
    result = {"module": found.module, "trainer": found.trainer, "why": found.why}
    render.show("entry", found.trainer, result, render.printable(text), args.json)
    return EXIT_OK if found.trainer else EXIT_FAILED


def _max_jobs(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.doctor.resources import max_jobs

    if args.gib_per_job <= 0 or args.limit < 0:
        raise UsageError("max-jobs: --gib-per-job must be above 0 and --limit at least 0")
    render.say(str(max_jobs(args.gib_per_job, args.limit or None)))
    return EXIT_OK


def _postinstall(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.postinstall.run import run_checks

    manifest = _bundle(args.bundle, "postinstall")
    deep = _deep(args)
    found = run_checks(
        manifest,
        args.require_gpu,
        skip_phases(args.skip_phases, manifest.phase_names),
        args.check_files,
        sys.executable,
        deep,
        uv=args.uv,
    )
    v = found.verdict
    if args.result:  # for the installer: the typed findings, which it renders and judges
        _write_result(args.result, render.envelope("postinstall", v.ok, found.to_dict(), v))
        return EXIT_OK
    text = render.checks_text(found.installed + found.readiness, f"post-install: {v.line}")
    render.show("postinstall", v.ok, found.to_dict(), text, args.json, v)
    return v.code


def _write_result(path: str, doc: dict[str, Any]) -> None:
    """Write the envelope whole or not at all, in the directory given (the install's state
    directory): a fresh hidden name, renamed over the final one (airgap/confined.py)."""
    from verl_bundle.airgap.confined import Confined

    with Confined(os.path.dirname(os.path.abspath(path))) as where:
        where.write_atomic(os.path.basename(path), render.dumps(doc))


def _readiness(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.postinstall.probing import run_readiness
    from verl_bundle.airgap.postinstall.readiness import render_text

    manifest = _bundle(args.bundle, "readiness")
    deep = _deep(args)
    chosen = skip_phases(args.skip_phases, manifest.phase_names)
    report = run_readiness(
        manifest, args.python, args.require_gpu, args.purpose, args.timeout, deep, chosen
    )
    v = report.verdict
    render.show(
        "readiness", v.ok, report.to_dict(), f"{render_text(report)}\n{v.line}", args.json, v
    )
    return v.code


def _deep(args: argparse.Namespace) -> Any:
    """The trainer dry run's request (--deep and its options), or None; bad input is a usage
    error before anything runs."""
    from verl_bundle.airgap.postinstall.dryrun import dry_run_request

    given = args.model or args.data or args.override
    if not args.deep:
        if given:
            raise UsageError("--model, --data and --override go with --deep (the dry run)")
        return None
    return dry_run_request(args.model, args.data, args.deadline, 0, args.override)


def add_deep_options(p: Parser) -> None:
    """The trainer dry run's options (readiness and postinstall)."""
    p.add_argument(
        "--deep",
        action="store_true",
        help="also start verl's own PPO trainer offline on a tiny model and dataset, up to the "
        "GPU boundary on a host without a GPU, one PPO step where a GPU is visible",
    )
    p.add_argument("--model", metavar="DIR", help="with --deep: your own model directory")
    p.add_argument("--data", metavar="FILE", help="with --deep: your own parquet (verl's format)")
    p.add_argument(
        "--deadline",
        type=float,
        default=900,
        metavar="S",
        help="with --deep: seconds before the dry run is stopped and reported not ready (900)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --deep: one more verl override for the dry run (repeatable)",
    )


def _explain(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.explain import engine

    try:
        text = engine.read_log(args.log)
    except OSError as exc:
        raise UsageError(f"explain: {args.log}: {exc.strerror or exc}") from None
    findings = engine.explain_text(text)
    v = engine.verdict_of(findings)
    json_doc = engine.result_json(findings, text)
    render.show("explain", v.ok, json_doc, engine.render_text(findings, text), args.json, v)
    return v.code


def _assets(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.assets import place

    if args.action == "install":
        if not args.bundle:
            raise UsageError("assets install: give the asset bundle directory")
        result = place.install_assets(args.bundle, args.prefix, args.assets_dir, args.python)
    else:
        result = place.check_prefix(args.prefix, args.python)
    v = result.verdict
    text = f"{place.result_text(result)}\n{v.line}"
    render.show(f"assets {args.action}", v.ok, place.result_json(result), text, args.json, v)
    return v.code


def rendezvous_of(args: argparse.Namespace) -> Any:
    """torchrun's rendezvous flags as preflight was given them (only with --launcher torchrun)."""
    from verl_bundle.airgap.launch.ranks import Rendezvous

    given = Rendezvous(
        args.rdzv_endpoint or "",
        args.master_addr or "",
        args.master_port or "",
        args.node_rank or "",
    )
    if (given.endpoint or given.master_addr or given.master_port or given.node_rank) and (
        args.launcher != "torchrun"
    ):
        raise UsageError(
            "preflight: --rdzv-endpoint, --master-addr, --master-port and --node-rank are "
            "torchrun's; give --launcher torchrun"
        )
    if given.endpoint and given.master_addr:
        raise UsageError("preflight: give --rdzv-endpoint or --master-addr, as torchrun takes one")
    if (given.master_port or given.node_rank) and not given.master_addr:
        raise UsageError("preflight: --master-port and --node-rank go with --master-addr")
    return given


def _preflight(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.launch import preflight

    if args.nproc_per_node is not None and args.launcher != "torchrun":
        raise UsageError("preflight: --nproc-per-node is torchrun's; give --launcher torchrun")
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        raise UsageError("preflight: --nproc-per-node must be 1 or more")
    if args.min_open_files < 0:
        raise UsageError("preflight: --min-open-files must be 0 or more")
    result = preflight.run_preflight(
        args.overrides,
        args.config,
        os.environ,
        args.launcher,
        args.nproc_per_node,
        args.min_open_files,
        rendezvous_of(args),
    )
    text = render.printable(preflight.render_text(result))
    v = result.verdict
    render.show("preflight", v.ok, preflight.render_json(result), text, args.json, v)
    return v.code


def _serve(args: argparse.Namespace) -> int:
    from verl_bundle.airgap import serve

    root = os.path.abspath(args.dir)
    server = serve.make_server(root, args.bind, args.port)
    port = server.server_address[1]
    everywhere = args.bind in ("", "0.0.0.0", "::")  # noqa: S104 - the nodes' addresses
    url = f"http://{os.uname().nodename if everywhere else args.bind}:{port}/"
    render.say(
        f"serving {root} at {url} (threaded, backlog {serve.BACKLOG}, at most {serve.HANDLERS} "
        f"at once, {serve.TIMEOUT:.0f} s idle timeout, HTTP Range); Ctrl-C stops"
    )
    for b in serve.bundles(root):
        render.say(f"  install.sh --from {url}{b.path} --bundle-sha256 {b.pin}")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return EXIT_OK


def _install(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.install.main import install

    return install(args)


# -- the parser -------------------------------------------------------------------------------


COMMANDS = (
    "install",
    "verify",
    "doctor",
    "postinstall",
    "readiness",
    "explain",
    "assets",
    "preflight",
    "max-jobs",
    "serve",
)


def parser() -> Parser:
    top = Parser(
        prog=TOP,
        description="The server side of a verl-bundle: verify, doctor, install, post-install.",
        epilog="Exit codes:\n" + exit_table(),
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    def command(
        name: str, run: Callable[[argparse.Namespace], int], text: str, **kw: Any
    ) -> Parser:
        p: Parser = sub.add_parser(name, help=text, description=text, prog=f"{TOP} {name}", **kw)
        p.set_defaults(run=run)
        return p

    p = command(
        "install", _install, "install the bundle DIR (what its install.sh runs)", add_help=False
    )
    add_install_options(p)

    p = command(
        "verify",
        _verify,
        "check every file of a bundle (a directory, a tarball, or a volume set by its "
        "NAME.tar.sha256 or one of its volumes)",
    )
    p.add_argument("path", metavar="BUNDLE_DIR|TARBALL|NAME.tar.sha256")
    p.add_argument(
        "--allowed-signers",
        metavar="FILE",
        help="refuse a bundle not signed by a key in FILE (ssh allowed-signers, or a GPG "
        "keyring). Run from a bundle's own lib/, this catches a damaged or unsigned copy, not a "
        "forged one (a forged bundle forges this code too): check the tarball with the OS's "
        "tools first (ssh-keygen -Y verify of NAME.tar.sha256.sig, then sha256sum -c "
        "NAME.tar.sha256), or with the installed verl-bundle-verify",
    )
    p.add_argument("--each-file", action="store_true", help=EACH_FILE)
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("doctor", _doctor, "check this server against the bundle's needs")
    p.add_argument("--bundle", metavar="DIR", help="the bundle (default: the one I am in)")
    p.add_argument("--python", metavar="PATH", help="the interpreter the venv will use")
    p.add_argument("--prefix", metavar="DIR", help="where the bundle will be installed")
    p.add_argument("--require-gpu", action="store_true", help="no driver or GPU is a failure")
    p.add_argument(
        "--skip-phase",
        action="append",
        default=[],
        metavar="NAME",
        dest="skip_phases",
        help="a phase the install leaves out (repeatable): what only it needs is not required",
    )
    p.add_argument(
        "--deep",
        action="store_true",
        help="hash every installed file under --prefix for the environment fingerprint "
        "(default: each file's presence and size against its RECORD)",
    )
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("postinstall", _postinstall, "check the installed environment (venv's python)")
    p.add_argument("--bundle", required=True, metavar="DIR", help="the extracted bundle")
    p.add_argument("--require-gpu", action="store_true", help="no GPU is not ready")
    p.add_argument("--skip-phase", action="append", default=[], metavar="NAME", dest="skip_phases")
    p.add_argument(
        "--check-files",
        action="store_true",
        help="also check every installed file against its RECORD (after an interrupted install)",
    )
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    p.add_argument("--result", metavar="FILE", help="write the envelope to FILE (the installer)")
    add_deep_options(p)
    p.add_argument(
        "--uv",
        metavar="PATH",
        help="a uv to check the requirements with (`uv pip check`; the installer passes the "
        "bundled one); default: pip's own requirement parser",
    )

    p = command("readiness", _readiness, "prove the venv can start the bundle's verl trainer")
    p.add_argument("--bundle", required=True, metavar="DIR", help="the bundle directory")
    p.add_argument("--python", default=sys.executable, help="the environment's python")
    p.add_argument("--purpose", help="e.g. ppo-fsdp-vllm (default: the bundle's)")
    p.add_argument("--require-gpu", action="store_true", help="add a GPU smoke test")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for the probe")
    p.add_argument(
        "--skip-phase",
        action="append",
        default=[],
        metavar="NAME",
        dest="skip_phases",
        help="a phase left out of the install (install.sh --skip-phase): what it would have "
        "brought is named as left out (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    add_deep_options(p)

    p = command("explain", _explain, "match a failed install's log to known causes and fixes")
    p.add_argument("log", metavar="LOGFILE", help="the log to read; - reads standard input")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("assets", _assets, "install an asset bundle, or check what was placed")
    p.add_argument("action", choices=("install", "check"))
    p.add_argument("bundle", nargs="?", metavar="BUNDLE_DIR")
    p.add_argument("--prefix", required=True, metavar="DIR", help="the stack's install prefix")
    p.add_argument("--assets-dir", metavar="DIR", help="a shared directory for the assets")
    p.add_argument("--python", metavar="PATH", help="the environment's python")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("preflight", _preflight, "check this node before ray start / torchrun")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="verl's overrides")
    p.add_argument(
        "--launcher",
        choices=("ray", "torchrun"),
        default="ray",
        help="what starts the workers (default: ray, as verl's main_ppo): under ray no "
        "RANK/WORLD_SIZE/MASTER_* are asked for; under torchrun all four must be set together "
        "and MASTER_ADDR must resolve",
    )
    p.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="N",
        help="the processes torchrun will start per node (its nproc_per_node), checked "
        "against trainer.n_gpus_per_node",
    )
    p.add_argument(
        "--min-open-files",
        type=int,
        default=65536,
        metavar="N",
        help="the ulimit -n the launch needs (default 65536; the Ray sbatch passes its own)",
    )
    for flag, text in (
        ("--rdzv-endpoint", "HOST:PORT: torchrun's c10d rendezvous, as given to torchrun"),
        ("--master-addr", "HOST: torchrun's static rendezvous, its master address"),
        ("--master-port", "PORT: with --master-addr, torchrun's master port"),
        ("--node-rank", "N: with --master-addr, this node's number among the nodes"),
    ):
        p.add_argument(
            flag,
            metavar=text.split(":")[0],
            help=f"{text}: torchrun then sets RANK, WORLD_SIZE and MASTER_* itself, so none is "
            "asked of the environment (its PET_* variables are read too)",
        )
    p.add_argument("--config", metavar="YAML", help="verl settings (nested maps of scalars)")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command(
        "serve",
        _serve,
        "serve extracted bundles to the nodes (install.sh --from URL): a threaded server with "
        "a backlog of 1024 and HTTP Range; prints each bundle's --from and --bundle-sha256",
    )
    p.add_argument("dir", metavar="DIR", help="the directory above the extracted bundle(s)")
    p.add_argument("--port", type=int, default=8000, help="the port (0: any free one)")
    p.add_argument(
        "--bind",
        default="0.0.0.0",  # noqa: S104 - served to the cluster's nodes
        metavar="ADDR",
        help="the address to listen on (default: every interface)",
    )

    p = command(
        "entry",
        _entry,
        "whether `python -m MODULE` starts verl's trainer (its Hydra config composes verl's "
        "trainer config), read without importing it; exit 0 yes, 1 no",
    )
    p.add_argument("module", metavar="MODULE")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("max-jobs", _max_jobs, "the MAX_JOBS a source build should use on this machine")
    p.add_argument("--gib-per-job", type=float, default=9.0, metavar="F")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="0 means no limit")
    return top


def add_install_options(p: Parser) -> None:
    """install.sh's options (its --help text is install/options.py's `usage`)."""
    p.prog = "install.sh"
    p.add_argument("bundle", metavar="BUNDLE_DIR")
    p.add_argument("--prefix", metavar="DIR")
    p.add_argument("--python", metavar="PATH")
    p.add_argument("--bundled-python", metavar="DIR")  # given by install.sh, not by people
    p.add_argument("--into-env", metavar="PATH")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--skip-doctor", action="store_true")
    p.add_argument("--require-gpu", action="store_true")
    p.add_argument("--skip-phase", action="append", default=[], metavar="NAME", dest="skip_phases")
    p.add_argument("--repair", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--image", metavar="FILE")
    p.add_argument("--yes", "-y", action="store_true")
    p.add_argument("--log", metavar="FILE")
    p.add_argument("--events", metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--allowed-signers", metavar="FILE")
    p.add_argument("--allow-downgrade", action="store_true")
    p.add_argument("--base", metavar="OLD_DIR")
    p.add_argument("--from", dest="from_url", metavar="URL")
    p.add_argument("--work", metavar="DIR")
    p.add_argument("--bundle-sha256", metavar="H")
    p.add_argument("--deadline", metavar="SECONDS")
    p.add_argument("--help", "-h", action="store_true")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run one command, print; every ServerError is one message and its exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if (
        args_list
        and args_list[0] == "install"
        and any(a == "--from" or a.startswith("--from=") for a in args_list)
    ):
        from verl_bundle.airgap.verify.served import main as from_url

        rest = args_list[1:]  # install.sh passes its own directory first: not the served one's
        return from_url(rest[1:] if rest and not rest[0].startswith("-") else rest)
    top = parser()
    name = args_list[0] if args_list else ""
    prog = "install.sh" if name == "install" else (name if name in COMMANDS else "error")
    try:
        try:
            args, extra = top.parse_known_args(args_list)
        except SystemExit as done:  # --help printed its text
            return done.code if isinstance(done.code, int) else EXIT_OK
        if name == "preflight":  # verl's overrides may follow the options, as on its command line
            args.overrides += [e for e in extra if not e.startswith("-")]
            extra = [e for e in extra if e.startswith("-")]
        if extra:
            shown = "./install.sh" if prog == "install.sh" else f"{TOP} {name}"
            raise UsageError(f"{prog}: unknown option {extra[0]!r} (see {shown} --help)")
        code: int = args.run(args)
        return code
    except ServerError as exc:
        for line in exc.message.splitlines() or [""]:
            said = line.startswith((f"{prog}:", f"{TOP}", "install.sh:"))
            render.say(line if said else f"{prog}: {line}", sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        render.say("interrupted; run the same command again", sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # a full disk or quota: one line, where, and what to do
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        render.say(
            f"{prog}: {exc.strerror or 'no space left on device'}{where}; free space there "
            "(df -h shows how much is left) and run the same command again",
            sys.stderr,
        )
        return EXIT_FAILED
