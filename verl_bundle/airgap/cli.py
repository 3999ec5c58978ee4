"""`python3 -m verl_bundle.airgap COMMAND ...`: the server program, one parser for every command.

This is the one entry point of the bundle's server side (install.sh, ./doctor and
install-assets.sh are thin shells that find a Python and call `main`) and the one place that
parses options; each command's run (its call and its rendered result and verdict) is
commands.py's. The stage packages (verify/, doctor/, install/, postinstall/, explain/, assets/,
launch/) take the typed manifest and return values; errors a user can act on are
`ServerError`s (errors.py), caught here, printed as their message, and turned into the exit
code of the one table. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any, Callable, NoReturn, Sequence

from verl_bundle.airgap import commands, render
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


# -- the parser -------------------------------------------------------------------------------


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
        "install",
        commands.install,
        "install the bundle DIR (what its install.sh runs)",
        add_help=False,
    )
    add_install_options(p)

    p = command(
        "verify",
        commands.verify,
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
    p.add_argument(
        "--each-file",
        action="store_true",
        help="hash every file of a tarball too, when it matches its .sha256 (by default the "
        "whole file is hashed, each byte once: its members are the bytes the build hashed "
        "against the lock)",
    )
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("doctor", commands.doctor, "check this server against the bundle's needs")
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

    p = command(
        "postinstall", commands.postinstall, "check the installed environment (venv's python)"
    )
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

    p = command(
        "readiness", commands.readiness, "prove the venv can start the bundle's verl trainer"
    )
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

    p = command(
        "explain", commands.explain, "match a failed install's log to known causes and fixes"
    )
    p.add_argument("log", metavar="LOGFILE", help="the log to read; - reads standard input")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("assets", commands.assets, "install an asset bundle, or check what was placed")
    p.add_argument("action", choices=("install", "check"))
    p.add_argument("bundle", nargs="?", metavar="BUNDLE_DIR")
    p.add_argument("--prefix", required=True, metavar="DIR", help="the stack's install prefix")
    p.add_argument("--assets-dir", metavar="DIR", help="a shared directory for the assets")
    p.add_argument("--python", metavar="PATH", help="the environment's python")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command("preflight", commands.preflight, "check this node before ray start / torchrun")
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
        commands.serve,
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
        commands.entry,
        "whether `python -m MODULE` starts verl's trainer (its Hydra config composes verl's "
        "trainer config), read without importing it; exit 0 yes, 1 no",
    )
    p.add_argument("module", metavar="MODULE")
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")

    p = command(
        "max-jobs", commands.max_jobs, "the MAX_JOBS a source build should use on this machine"
    )
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
