"""The command line: parse options, call one core function, render its result. Nothing else."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from verl_bundle import __version__, render
from verl_bundle.airgap.verify import verify
from verl_bundle.credentials import Redactor
from verl_bundle.errors import EXIT_FAILED, BundleError, UsageError
from verl_bundle.fetch import default_cache_dir
from verl_bundle.pipeline import Request, build, make_lock
from verl_bundle.profile import builtin_profiles, find_profile, parse_mirror, select_profile
from verl_bundle.progress import reporter

app = typer.Typer(
    name="verl-bundle",
    help=(
        "Build verified offline bundles of the verl CUDA stack on an online host, and install "
        "them on air-gapped GPU servers.\n\n"
        "Online:  verl-bundle build --cuda 11.8 --python 3.10  ->  one .tar with every wheel, "
        "the sources to build on the server, a manifest, SHA256SUMS and install.sh.\n\n"
        "Server:  tar xf BUNDLE.tar && ./BUNDLE/install.sh"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
profiles_app = typer.Typer(
    help="List the built-in profiles, or show one (`verl-bundle profiles show cu118`).",
    invoke_without_command=True,
)
app.add_typer(profiles_app, name="profiles")

_state = {"debug": False, "redact": Redactor()}

# -- options used by several commands, declared once ----------------------------------------
Cuda = Annotated[
    str | None,
    typer.Option(help="Pick the built-in profile for this CUDA version, e.g. 11.8.", metavar="X.Y"),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="A built-in profile by name (see `verl-bundle profiles`) or a path to your own TOML.",
        metavar="NAME|PATH",
    ),
]
Python = Annotated[
    str | None,
    typer.Option(
        help="The server's Python (default: the profile's). Wheels are chosen for it, not for "
        "the Python running this command.",
        metavar="X.Y",
    ),
]
Platform = Annotated[
    str | None,
    typer.Option(help="The server's wheel platform (default: the profile's, e.g. manylinux_2_17_x86_64)."),
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
CacheDir = Annotated[
    Path | None,
    typer.Option(help="Download cache (content-addressed; default: $XDG_CACHE_HOME/verl-bundle)."),
]
Jobs = Annotated[int, typer.Option(min=1, max=64, help="Parallel downloads.")]
Json = Annotated[bool, typer.Option("--json", help="Print a JSON document instead of text.")]


class Compress(str, enum.Enum):
    none = "none"
    gz = "gz"
    zstd = "zstd"


def _request(
    cuda: str | None,
    profile: str | None,
    python: str | None,
    platform: str | None,
    mirror: list[str] | None,
    cache_dir: Path | None,
    jobs: int,
) -> Request:
    mirrors = dict(parse_mirror(m) for m in (mirror or []))
    _state["redact"] = Redactor.for_urls(list(mirrors.values()))
    chosen = select_profile(cuda, profile).with_mirrors(mirrors)
    return Request(
        profile=chosen,
        target=chosen.target(python, platform),
        mirrors=mirrors,
        cache_dir=cache_dir or default_cache_dir(),
        jobs=jobs,
    )


def _emit(text: str) -> None:
    redact: Redactor = _state["redact"]  # type: ignore[assignment]
    typer.echo(redact(text))


def _notes(notes: tuple[str, ...]) -> None:
    redact: Redactor = _state["redact"]  # type: ignore[assignment]
    for note in notes:
        typer.echo(redact(note if note.startswith("note:") else f"note: {note}"), err=True)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    _state["debug"] = debug
    if version:
        typer.echo(f"verl-bundle {__version__}")
        raise typer.Exit(0)


@app.command()
def lock(
    cuda: Cuda = None,
    profile: ProfileOpt = None,
    python: Python = None,
    platform: Platform = None,
    mirror: Mirror = None,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Where to write the lock (default: ./pylock.<bundle>.toml)."),
    ] = None,
    cache_dir: CacheDir = None,
    jobs: Jobs = 8,
    json_out: Json = False,
) -> None:
    """Resolve a profile for the server's Python and platform and write the lock (pylock.toml):
    every package with its version and the one file chosen, with location, URL, sha256 and size.
    Nothing else is downloaded, except direct artifacts whose hash the profile does not give."""
    req = _request(cuda, profile, python, platform, mirror, cache_dir, jobs)
    with reporter(quiet=json_out) as rep:
        result = make_lock(req, output, rep)
    if json_out:
        _emit(render.dumps(render.lock_json(result)))
    else:
        _notes(result.notes)
        _emit(render.lock_text(result))


@app.command("build")
def build_cmd(
    cuda: Cuda = None,
    profile: ProfileOpt = None,
    python: Python = None,
    platform: Platform = None,
    mirror: Mirror = None,
    lock_file: Annotated[
        Path | None,
        typer.Option("--lock", help="Build exactly this lock instead of resolving (no cut-off needed)."),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory for the tarball.")] = Path("."),
    cache_dir: CacheDir = None,
    jobs: Jobs = 8,
    compress: Annotated[
        Compress,
        typer.Option(help="Wheels are already compressed, so the default tar is not."),
    ] = Compress.none,
    json_out: Json = False,
) -> None:
    """Resolve (or take --lock), fetch every file once with its hash, and write one tarball with
    wheels, sources, bootstrap pip, manifest.json, SHA256SUMS and install.sh. The last line
    printed is the tarball's path; <tarball>.sha256 is written beside it."""
    req = _request(cuda, profile, python, platform, mirror, cache_dir, jobs)
    with reporter(quiet=json_out) as rep:
        result = build(req, lock_file, python is not None, output, compress.value, rep)
    if json_out:
        _emit(render.dumps(render.build_json(result)))
    else:
        _notes(result.notes)
        _emit(render.build_text(result))


@app.command("verify")
def verify_cmd(
    path: Annotated[Path, typer.Argument(help="A bundle tarball, or an extracted bundle directory.")],
    json_out: Json = False,
) -> None:
    """Recheck every file of a bundle against its manifest and SHA256SUMS (and the tarball
    against its .sha256 file). Exit 0 when intact, 1 naming each missing or altered file."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    report = verify(str(path))
    _emit(render.dumps(render.verify_json(report)) if json_out else render.verify_text(report))
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


@profiles_app.callback()
def profiles_list(ctx: typer.Context, json_out: Json = False) -> None:
    """List the built-in profiles."""
    if ctx.invoked_subcommand is not None:
        return
    profiles = builtin_profiles()
    if json_out:
        _emit(render.dumps([render.profile_summary(p) for p in profiles]))
    else:
        _emit(render.profiles_text(profiles))


@profiles_app.command("show")
def profiles_show(
    name: Annotated[str, typer.Argument(help="A built-in profile name or a path.")],
    json_out: Json = False,
) -> None:
    """Print one profile: where its files come from, then the profile file itself."""
    p = find_profile(name)
    _emit(render.dumps(render.profile_summary(p)) if json_out else render.profile_show(p))


def _fail(message: str, code: int) -> NoReturn:
    redact: Redactor = _state["redact"]  # type: ignore[assignment]
    typer.echo(f"error: {redact(message)}", err=True)
    sys.exit(code)


def main() -> None:
    """Entry point: the one place errors become a line on stderr and an exit code.

    Usage errors (unknown option, bad value) are typer's: a message and exit 2. A BundleError
    from any stage is printed as one line, with no traceback unless --debug."""
    try:
        app(prog_name="verl-bundle")
    except BundleError as exc:
        if _state["debug"]:
            raise
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted; run the command again: finished downloads are cached", 130)
    except OSError as exc:
        if _state["debug"]:
            raise
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _fail(f"{where}{exc.strerror or exc}", EXIT_FAILED)


if __name__ == "__main__":  # pragma: no cover
    main()
