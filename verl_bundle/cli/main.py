"""The command line: parse options, call one core function, render its result. Nothing else.

Each command builds a request, calls one core function (imported when the command runs, so that
`verl-bundle profiles` never loads the resolver), and hands the result to `cli/options.show`, the
one place output is written. lock and build live in cli/build.py, assets in cli/assets.py, the
cluster commands in cli/cluster.py. `main` is the one place errors become a line on stderr and an exit code.
`--version` and `--help` are answered before this module is imported (verl_bundle/__main__.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from verl_bundle import __version__
from verl_bundle.airgap.errors import ServerError
from verl_bundle.cli import options as opt
from verl_bundle.cli.assets import assets_cmd
from verl_bundle.cli.build import register as register_build
from verl_bundle.cli.check import register as register_check
from verl_bundle.cli.cluster import register as register_cluster
from verl_bundle.cli.options import (
    Cuda,
    Interpreter,
    Json,
    ProfileOpt,
    Session,
    SkipPhases,
    TargetPython,
    session_of,
    show,
)
from verl_bundle.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Terminated,
    UsageError,
)

INTERRUPTED = "interrupted; run the same command again to resume: finished downloads are cached"
TERMINATED = (
    "terminated (SIGTERM); run the same command again to resume: finished downloads are cached"
)

HELP = (
    "Build verified offline bundles of the verl CUDA stack on an online host, and install "
    "them on air-gapped GPU servers.\n\n"
    "Online:  verl-bundle build --cuda 11.8 --python 3.10  ->  one .tar with every wheel, "
    "the sources to build on the server, a manifest, SHA256SUMS and install.sh.\n\n"
    "Server:  tar xf BUNDLE.tar && ./BUNDLE/install.sh"
)

app = typer.Typer(
    name="verl-bundle",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help, no rich import; errors are our one line anyway
    context_settings={"help_option_names": ["-h", "--help"]},
)
profiles_app = typer.Typer(
    help="List the built-in profiles, or show one (`verl-bundle profiles show cu118`).",
    short_help="List the built-in profiles, or show one.",
    invoke_without_command=True,
    rich_markup_mode=None,
)
app.add_typer(profiles_app, name="profiles")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"verl-bundle {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    session_of(ctx).debug = debug


register_build(app)  # lock, build: cli/build.py
register_check(app)  # verify, inspect: cli/check.py


@app.command("rehearse", short_help="Install a bundle here with the network cut.")
def rehearse_cmd(
    ctx: typer.Context,
    tarball: Annotated[Path, typer.Argument(help="The bundle tarball made by `build`.")],
    python: Interpreter = None,
    keep: Annotated[
        Path | None,
        typer.Option(help="Rehearse in this new directory and leave it (bundle/ and venv/) there."),
    ] = None,
    no_system_python: opt.NoSystemPython = False,
    server_python: opt.ServerPython = None,
    skip_phases: SkipPhases = None,
    json_out: Json = False,
) -> None:
    """Prove here, before the bundle travels, that it installs with the network cut.

    The bundle is extracted into a temporary directory and its install.sh runs under
    `unshare -n` into a throwaway venv; each phase is reported with its time. A source build
    this host cannot do (its nvcc is not the bundle's CUDA) is reported as not rehearsed, and
    so is a phase named by --skip-phase (e.g. flash-attn, whose server build takes hours):
    post-install then says what leaving it out means for readiness.
    --python defaults to pythonX.Y for the bundle."""
    from verl_bundle.cli.render import results as render
    from verl_bundle.interpreter import interpreter
    from verl_bundle.progress import reporter
    from verl_bundle.rehearse.rehearsal import BareServer, rehearse

    py = interpreter(python) if python else None
    if server_python and not no_system_python:
        raise UsageError("--server-python needs --no-system-python")
    old = interpreter(server_python, "--server-python") if server_python else None
    bare = BareServer(old) if no_system_python else None
    with reporter(quiet=json_out) as rep:
        shown = render.rehearsal(rehearse(tarball, py, rep, keep, bare, tuple(skip_phases or ())))
    show(ctx, shown, json_out)


@app.command("doctor", short_help="Check a machine before installing, with fixes.")
def doctor_cmd(
    ctx: typer.Context,
    bundle: Annotated[
        Path | None,
        typer.Option(help="Check against this extracted bundle's needs (its manifest.json)."),
    ] = None,
    cuda: Cuda = None,
    profile: ProfileOpt = None,
    python: Interpreter = None,
    prefix: Annotated[
        Path | None, typer.Option(help="Where the venv will go (for the disk-space check).")
    ] = None,
    require_gpu: Annotated[
        bool,
        typer.Option(
            "--require-gpu", help="Make the driver and GPU checks failures, not warnings."
        ),
    ] = False,
    skip_phases: SkipPhases = None,
    json_out: Json = False,
) -> None:
    """Check this machine before installing; each problem comes with its fix.

    OS and glibc, Python and its headers, gcc/g++ that nvcc accepts, ninja, nvcc and
    CUDA_HOME, CUDA libraries, the driver, GPU placement (CUDA_VISIBLE_DEVICES, busy GPUs,
    RANK/LOCAL_RANK...), disk and memory. Without --bundle, --cuda or --profile it checks the
    bundle it is run from, or else the host on its own. --python (default: this python3) is the
    interpreter the venv will be made from. Exit 0 with no failure, 1 with any."""
    from verl_bundle.airgap import doctor
    from verl_bundle.airgap.contract.manifest import load
    from verl_bundle.cli.render import results as render
    from verl_bundle.interpreter import interpreter

    py = interpreter(python) if python else None
    if bundle is not None and (cuda or profile):
        raise UsageError("give --bundle, or --cuda/--profile, not both")
    manifest = None  # none: the host on its own
    if cuda or profile:  # what a bundle of that profile would need, before it is built
        from verl_bundle.bundle.plan import manifest_for_profile
        from verl_bundle.profile.catalog import select_profile

        chosen = select_profile(cuda, profile)
        manifest = manifest_for_profile(chosen, chosen.target())
    elif (root := doctor.locate(str(bundle) if bundle else None)) is not None:
        try:
            manifest = load(root)
        except ValueError as exc:  # no manifest there, or one the doctor cannot read
            raise UsageError(f"--bundle {bundle or root}: {exc}") from None
    if skip_phases and manifest is None:
        raise UsageError("--skip-phase needs a bundle: give --bundle DIR, --cuda or --profile")
    where = str(prefix) if prefix else None
    report = doctor.run_doctor(manifest, py, where, require_gpu, skip_phases or ())
    show(ctx, render.doctor(report), json_out)


@app.command("explain", short_help="Match a failed install's log to causes and fixes.")
def explain_cmd(
    ctx: typer.Context,
    logfile: Annotated[Path, typer.Argument(help="An install or build log (`-` for stdin).")],
    json_out: Json = False,
) -> None:
    """Match a failed install's output to known causes and say how to fix each.

    Known causes include a missing Python.h, a gcc that nvcc rejects, a CUDA mismatch,
    flash-attn reaching for GitHub, an invalid device ordinal, NCCL timeouts and a compiler
    killed for memory. Exit 0 when a cause is known, 1 when not (the log's tail is shown)."""
    from verl_bundle.airgap.explain import engine as explain
    from verl_bundle.cli.render import results as render

    if str(logfile) != "-" and not logfile.is_file():
        raise UsageError(f"{logfile}: no such file")
    text = explain.read_log(str(logfile))  # an archive or binary file: refused from its start
    show(ctx, render.explain(explain.explain_text(text), text), json_out)


@profiles_app.callback()
def profiles_list(ctx: typer.Context, json_out: Json = False) -> None:
    """List the built-in profiles."""
    if ctx.invoked_subcommand is not None:
        return
    from verl_bundle.cli.render import profile as render_profile
    from verl_bundle.profile.catalog import builtin_profiles

    show(ctx, render_profile.profiles(builtin_profiles()), json_out)


@profiles_app.command("show")
def profiles_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A built-in profile name or a path.")],
    mirrors: Annotated[
        bool,
        typer.Option(
            "--mirrors",
            help="Print only the locations a build needs, what each serves, and the whole "
            "--mirror NAME=URL line to build behind intranet mirrors (its last line).",
        ),
    ] = False,
    json_out: Json = False,
) -> None:
    """Print one profile: where its files come from, then the profile file itself."""
    from verl_bundle.cli.render import profile as render_profile
    from verl_bundle.profile.catalog import find_profile

    found = find_profile(name)
    shown = render_profile.mirrors(found) if mirrors else render_profile.profile(found)
    show(ctx, shown, json_out)


# `verl-bundle assets` (models and datasets for the air gap) lives in cli/assets.py.
app.command("assets", short_help="Fetch models and datasets into an asset bundle.")(assets_cmd)
register_cluster(app)  # preflight, fleet, slurm, ansible: cli/cluster.py


@app.command("toolchain", short_help="What this host can compile for each profile.")
def toolchain_cmd(
    ctx: typer.Context,
    python: TargetPython = None,
    cuda_home: opt.CudaHome = None,
    cc: opt.Cc = None,
    cxx: opt.Cxx = None,
    host_python: opt.HostPython = None,
    json_out: Json = False,
) -> None:
    """For each built-in profile with source builds (flash-attn): the nvcc, gcc and target
    Python headers found here to compile them into wheels (`build --compile`), or why not."""
    from verl_bundle.cli.render import results as render
    from verl_bundle.compile.toolchain import survey
    from verl_bundle.compile.toolkit import ToolkitRequest
    from verl_bundle.profile.catalog import builtin_profiles

    found = survey(builtin_profiles(), ToolkitRequest(cuda_home, cc, cxx, host_python), python)
    show(ctx, render.toolchain(found), json_out)


# -- the boundary ------------------------------------------------------------------------------


def _fail(session: Session, message: str, code: int, json_for: str | None) -> int:
    """The error as one line on stderr; with --json also the envelope on stdout (`ok: false`,
    the message and the exit code), so that a script reading stdout gets a document."""
    line = session.redact(message)
    typer.echo(f"error: {line}", err=True)
    if json_for is not None:
        from verl_bundle.cli.render.shown import error_json

        typer.echo(error_json(json_for, line, code))
    return code


def command_of(command: object, args: list[str]) -> str:
    """The command an argument list names (`profiles show`), by walking typer's groups; the
    program's name when it names none."""
    names: list[str] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            break
        names.append(arg)
        command = sub
    return " ".join(names) or "verl-bundle"


def run(args: list[str], session: Session) -> int:
    """Run one command line; return its exit code. Every error ends here as one line."""
    click_error = opt.click_error()
    command = typer.main.get_command(app)
    json_for = command_of(command, args) if "--json" in args else None
    try:
        if not args:  # `verl-bundle` alone: the help, and the usage exit code
            command.main(["--help"], prog_name="verl-bundle", standalone_mode=False)
            return EXIT_USAGE
        code = command.main(args, prog_name="verl-bundle", obj=session, standalone_mode=False)
    except ServerError as exc:  # the one root: the host's errors and the server program's
        if session.debug:
            raise
        return _fail(session, exc.message, exc.code, json_for)
    except typer.Abort:  # older typer turns Ctrl-C into Abort
        return _fail(session, INTERRUPTED, EXIT_INTERRUPTED, json_for)
    except click_error as exc:
        code = getattr(exc, "exit_code", EXIT_USAGE)
        return _fail(session, opt.usage_line(exc), code, json_for)
    except KeyboardInterrupt:
        return _fail(session, INTERRUPTED, EXIT_INTERRUPTED, json_for)
    except Terminated:  # SIGTERM during a host compile (compile/stop.py)
        return _fail(session, TERMINATED, Terminated.code, json_for)
    except OSError as exc:
        if session.debug:
            raise
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return _fail(session, f"{where}{exc.strerror or exc}", EXIT_FAILED, json_for)
    if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C inside a command into Exit(130)
        return _fail(session, INTERRUPTED, EXIT_INTERRUPTED, json_for)
    return code if isinstance(code, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command line and exit with its code.

    Usage errors (unknown option, bad value) are one line and exit 2. A BundleError from any
    stage (the one root, ServerError) is one line with its exit code, no traceback unless --debug. Ctrl-C is one line and
    exit 130."""
    args = sys.argv[1:] if argv is None else argv
    sys.exit(run(args, Session(debug="--debug" in args)))


if __name__ == "__main__":  # pragma: no cover
    main()
