"""The command line's shared pieces: the options several commands take (declared once, as
`Annotated` aliases), the request they build, the session a run's commands share, and `show`,
the one place a command's result is written."""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from verl_bundle.airgap.render import printable
from verl_bundle.credentials import Redactor
from verl_bundle.errors import EXIT_FAILED, UsageError

if TYPE_CHECKING:
    from verl_bundle.cli.render.shown import Shown
    from verl_bundle.pipeline import Request


@dataclass
class Session:
    """One run's settings: made by `main`, reached by commands through typer's context (never a
    module global), read again by `main` when an error is reported."""

    debug: bool = False
    redact: Redactor = field(default_factory=Redactor)


def session_of(ctx: typer.Context) -> Session:
    found = ctx.find_object(Session)
    if found is None:  # run without `main` (typer's own runner): a session of its own
        found = ctx.ensure_object(Session)
    return found


def show(ctx: typer.Context, shown: Shown, json_out: bool) -> None:
    """The one place a command's result is written: the JSON envelope, or notes on stderr and
    text on stdout; then exit with the verdict's code (the server's table, airgap/errors.py),
    or 1 when a result without a verdict is a failure."""
    redact = session_of(ctx).redact
    if json_out:
        typer.echo(redact(shown.json()))
    else:
        # Text may quote a log or a tool's output: its control sequences are shown, not obeyed.
        for note in shown.notes:
            typer.echo(printable(redact(note)), err=True)
        typer.echo(printable(redact(shown.text)))
    if shown.verdict is not None and not shown.verdict.ok:
        raise typer.Exit(shown.verdict.code)
    if not shown.ok:
        raise typer.Exit(EXIT_FAILED)


# -- options used by several commands, declared once ----------------------------------------
Cuda = Annotated[
    str | None,
    typer.Option(
        help="Pick the built-in profile for this CUDA version (nvidia-smi's 'CUDA Version'), "
        "e.g. 11.8.",
        metavar="X.Y",
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="A built-in profile by name (see `verl-bundle profiles`) or a path to your own TOML.",
        metavar="NAME|PATH",
    ),
]
TargetPython = Annotated[
    str | None,
    typer.Option(
        "--python",
        help="The server's Python (default: the profile's). Wheels are chosen for it, not for "
        "the Python running this command.",
        metavar="X.Y",
    ),
]
Interpreter = Annotated[
    str | None,
    typer.Option(
        "--python",
        help="The interpreter to use: a path, or a version X.Y looked up on PATH and in pyenv.",
        metavar="PATH|X.Y",
    ),
]
Platform = Annotated[
    str | None,
    typer.Option(
        help="The server's wheel platform (default: the profile's, e.g. manylinux_2_17_x86_64)."
    ),
]
Mirror = Annotated[
    list[str] | None,
    typer.Option(
        help="Replace a profile location by name, e.g. pypi=https://nexus.corp/repository/pypi/simple "
        "or pytorch-cu118=https://artifactory.corp/api/pypi/torch-cu118/simple. Repeatable. "
        "Credentials in the URL are used and never shown.",
        metavar="NAME=URL",
    ),
]
VerlSpec = Annotated[
    str | None,
    typer.Option(
        "--verl",
        help="The verl to bundle instead of the profile's release: a source tree (a checkout or "
        "a fork, dirty or not), a wheel or sdist file, git+URL@REV (--mirror verl=PATH serves "
        "the repository), or a version. It is built here by its own build system; the rest "
        "of the stack stays the profile's.",
        metavar="SPEC",
    ),
]
FromLock = Annotated[
    Path | None,
    typer.Option(
        "--from-lock",
        help="Take the stack from upstream's own uv.lock (the pyproject.toml beside it): its "
        "pins as they are, for the extras given with --extra, verl built from the tree the "
        "lock lies in (or --verl). Its git sources are built here (--mirror NAME=PATH).",
        metavar="PATH/uv.lock",
    ),
]
Extra = Annotated[
    list[str] | None,
    typer.Option(
        "--extra",
        help="With --from-lock: an extra of the project to install (repeatable), e.g. vllm "
        "and fsdp: verl's rollout has no default, so name vllm or sglang.",
        metavar="NAME",
    ),
]
CacheDir = Annotated[
    Path | None,
    typer.Option(help="Download cache (content-addressed; default: $XDG_CACHE_HOME/verl-bundle)."),
]
Jobs = Annotated[int, typer.Option(min=1, max=64, help="Parallel downloads.")]
Json = Annotated[bool, typer.Option("--json", help="Print a JSON document instead of text.")]
# The one --skip-phase of every command (doctor, rehearse, slurm install, ansible install), as
# install.sh takes it; checked by airgap/contract/skip_phases.py, the one place for every side.
SkipPhases = Annotated[
    list[str] | None,
    typer.Option(
        "--skip-phase",
        help="Leave the install phase NAME out (repeatable; install.sh --skip-phase NAME): what "
        "only it needs is not required, and the verdict says it was left out.",
        metavar="NAME",
    ),
]


class CompileMode(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


CompileOpt = Annotated[
    CompileMode,
    typer.Option(
        "--compile",
        help="Compile source builds (flash-attn) into wheels here: auto (when a fitting "
        "toolkit is found, else the server builds them), always (fail without one), never.",
    ),
]
CudaArchs = Annotated[
    str | None,
    typer.Option(
        help="GPU architectures to compile for (TORCH_CUDA_ARCH_LIST), e.g. '9.0' "
        "(default: the profile's, else 8.0;9.0).",
        metavar="X.Y;X.Y",
    ),
]
CudaHome = Annotated[
    Path | None,
    typer.Option(
        help="The CUDA toolkit to compile with (default: CUDA_HOME, PATH, /usr/local/cuda-X.Y)."
    ),
]
Cc = Annotated[str | None, typer.Option("--cc", help="The C compiler (default: CC, gcc).")]
Cxx = Annotated[str | None, typer.Option("--cxx", help="The C++ compiler (default: CXX, g++).")]
HostPython = Annotated[
    str | None,
    typer.Option(
        help="An interpreter of the target's Python here, for its headers (default: pythonX.Y "
        "on PATH or in pyenv).",
        metavar="PATH",
    ),
]


WithPython = Annotated[
    bool | None,
    typer.Option(
        "--with-python/--no-with-python",
        help="Carry a relocatable CPython for the target (python-build-standalone's, location "
        "python-build-standalone), used on a server with no fitting Python (default: as the "
        "profile's [interpreter] bundled asks).",
        show_default=False,
    ),
]


NoSystemPython = Annotated[
    bool,
    typer.Option(
        "--no-system-python",
        help="As a server with no Python 3.8+: env -i, a PATH with no Python (the bundle's own "
        "CPython must do; build --with-python).",
    ),
]
ServerPython = Annotated[
    str | None,
    typer.Option(
        help="With --no-system-python: the old python3 the server has (a path or X.Y, e.g. "
        "3.6); default none.",
        metavar="PATH|X.Y",
    ),
]

# The cluster commands' (slurm, ansible): the bundle, the nodes, the results, the file written.
Tarball = Annotated[
    Path | None,
    typer.Argument(help="The bundle tarball, on this machine (not with --from-url)."),
]
NodeVenv = Annotated[str, typer.Option(help="The venv on each node (%n: the node's name).")]
Nodes = Annotated[int, typer.Option(help="How many nodes.")]
Gather = Annotated[
    Path,
    typer.Option(
        help="Where each node's doctor JSON is gathered (for `verl-bundle fleet report`)."
    ),
]
Written = Annotated[Path, typer.Option("-o", "--output", help="The file to write.")]
# install.sh's options every node's install is given (cluster/values.py InstallOptions).
NodeQuick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="Each node runs install.sh --quick: no trainer dry run (it costs a minute or two "
        "per node); each verdict then says the trainer's start is not proven there.",
    ),
]
NodeRepair = Annotated[
    bool,
    typer.Option(
        "--repair",
        help="Each node runs install.sh --repair: reinstall, offline, exactly the "
        "distributions whose files or versions differ from the bundle (what `fleet report` "
        "names after a package was removed or a file changed on a node).",
    ),
]
NodeRequireGpu = Annotated[
    bool,
    typer.Option(
        "--require-gpu", help="Each node runs install.sh --require-gpu (no usable GPU fails)."
    ),
]


class Compress(str, enum.Enum):
    none = "none"
    gz = "gz"
    zstd = "zstd"


@dataclass(frozen=True)
class StackOptions:
    """The options that name a stack and where its files come from (lock and build)."""

    cuda: str | None
    profile: str | None
    python: str | None
    platform: str | None
    mirror: list[str] | None
    cache_dir: Path | None
    jobs: int
    verl: str | None = None
    from_lock: Path | None = None
    extras: tuple[str, ...] = ()

    def request(self, session: Session) -> Request:
        from verl_bundle.net.cache import default_cache_dir
        from verl_bundle.pipeline import Request
        from verl_bundle.profile.catalog import select_profile, target_for
        from verl_bundle.profile.model import parse_mirror

        mirrors = dict(parse_mirror(m) for m in (self.mirror or []))
        session.redact = Redactor.for_urls(list(mirrors.values()))
        chosen = select_profile(self.cuda, self.profile)
        if self.verl is not None:
            chosen = chosen.with_verl(self.verl)
        if self.from_lock is not None:
            from verl_bundle.resolve.uvproject import with_from_lock

            chosen = with_from_lock(chosen, self.from_lock, self.extras, self.verl is not None)
        elif self.extras:
            raise UsageError("--extra goes with --from-lock (an extra of upstream's project)")
        chosen = chosen.with_mirrors(mirrors)
        # A profile file may carry credentials in its own location URLs: keep those out too.
        urls = [loc.url for loc in chosen.locations.values() if loc.url]
        session.redact = Redactor.for_urls(urls)
        return Request(
            profile=chosen,
            target=target_for(chosen, self.python, self.platform),
            mirrors=mirrors,
            cache_dir=self.cache_dir or default_cache_dir(),
            jobs=self.jobs,
            python_given=self.python is not None,
            verl_given=self.verl is not None or self.from_lock is not None,
        )


# The options that name a stack and where its files come from, in the order --help lists them:
# lock and build both take them, and typer has no group of options, so `takes_stack` puts them
# into each command's signature in place of its `stack` parameter.
STACK_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("cuda", Cuda, None),
    ("profile", ProfileOpt, None),
    ("python", TargetPython, None),
    ("platform", Platform, None),
    ("mirror", Mirror, None),
    ("verl", VerlSpec, None),
    ("from_lock", FromLock, None),
    ("extra", Extra, None),
    ("cache_dir", CacheDir, None),
    ("jobs", Jobs, 8),
)


def takes_stack(command: Callable[..., None]) -> Callable[..., None]:
    """`command(ctx, stack: StackOptions, ...)` as typer reads it: `stack` stands for the
    options of STACK_OPTIONS in the signature typer sees, and they reach `command` as one
    `StackOptions`."""
    signature = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name != "stack":
            params.append(param)
            continue
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params += [
            inspect.Parameter(name, kind, default=default, annotation=annotation)
            for name, annotation, default in STACK_OPTIONS
        ]

    @functools.wraps(command)
    def run(**given: Any) -> None:
        named = {name: given.pop(name) for name, _, _ in STACK_OPTIONS}
        extras = tuple(named.pop("extra") or ())
        command(stack=StackOptions(**named, extras=extras), **given)

    setattr(run, "__signature__", signature.replace(parameters=params))  # noqa: B010 - read by typer
    return run


def command_group(help: str, short_help: str) -> typer.Typer:
    """A group of subcommands (fleet, slurm, ansible): plain help, shown when no command is given."""
    return typer.Typer(
        help=help, short_help=short_help, no_args_is_help=True, rich_markup_mode=None
    )


# -- the error boundary's helpers ------------------------------------------------------


def click_error() -> type[Exception]:
    """click's base exception, from typer's own copy of click or from click (older typer)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def usage_line(exc: Any) -> str:
    """click's usage error as one line: what, where, and where to read more."""
    message = " ".join(str(exc.format_message()).split()).rstrip(".")
    message = message.replace("Value error, ", "")  # typer's validator prefixes some messages
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "verl-bundle"
    return f"{where}: {message}; see `{where} --help`"


def terminal_question() -> Callable[[str], bool] | None:
    """A yes/no question asked on the terminal (stderr, answered on stdin), for the core to
    call before it commits to hours; None when there is no terminal to ask on."""
    import sys

    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None

    def ask(question: str) -> bool:
        try:
            return bool(typer.confirm(question, default=False, err=True))
        except (RuntimeError, EOFError):  # click's Abort (Ctrl-D, Ctrl-C at the prompt): a no
            return False

    return ask
