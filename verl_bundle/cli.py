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
from verl_bundle.pipeline import Request, build, check_lock, make_lock
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
    # A profile file may carry credentials in its own location URLs: keep those out too.
    _state["redact"] = Redactor.for_urls([loc.url for loc in chosen.locations.values() if loc.url])
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


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"verl-bundle {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    _state["debug"] = debug


@app.command()
def lock(
    cuda: Cuda = None,
    profile: ProfileOpt = None,
    python: Python = None,
    platform: Platform = None,
    mirror: Mirror = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o", "--output", help="Where to write the lock (default: ./pylock.<bundle>.toml)."
        ),
    ] = None,
    cache_dir: CacheDir = None,
    jobs: Jobs = 8,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Do not write: resolve again and say whether the lock (-o FILE, or the "
            "profile's committed one) still matches. Exit 1 with the differences.",
        ),
    ] = False,
    json_out: Json = False,
) -> None:
    """Resolve a profile for the server's Python and platform and write the lock.

    The lock (a pylock.toml) holds every package with its version and the one file chosen,
    with location, URL, sha256 and size. Nothing else is downloaded, except direct artifacts
    whose hash the profile does not give."""
    req = _request(cuda, profile, python, platform, mirror, cache_dir, jobs)
    if check:
        with reporter(quiet=json_out) as rep:
            checked = check_lock(req, output, rep)
        if json_out:
            _emit(render.dumps(render.lock_check_json(checked)))
        else:
            _emit(render.lock_check_text(checked))
        if not checked.current:
            raise typer.Exit(EXIT_FAILED)
        return
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
        typer.Option(
            "--lock", help="Build exactly this lock instead of resolving (no cut-off needed)."
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory for the tarball.")
    ] = Path("."),
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
    path: Annotated[
        Path, typer.Argument(help="A bundle tarball, or an extracted bundle directory.")
    ],
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


@app.command("rehearse")
def rehearse_cmd(
    tarball: Annotated[Path, typer.Argument(help="The bundle tarball made by `build`.")],
    python: Annotated[
        str | None,
        typer.Option(help="The interpreter to install with (default: pythonX.Y for the bundle)."),
    ] = None,
    keep: Annotated[
        Path | None,
        typer.Option(help="Rehearse in this new directory and leave it (bundle/ and venv/) there."),
    ] = None,
    json_out: Json = False,
) -> None:
    """Prove here, before the bundle travels, that it installs with the network cut.

    The bundle is extracted into a temporary directory and its install.sh runs under
    `unshare -n` into a throwaway venv; each phase is reported with its time. A source build
    this host cannot do (its nvcc is not the bundle's CUDA) is reported as not rehearsed."""
    from verl_bundle.rehearse import rehearse

    with reporter(quiet=json_out) as rep:
        result = rehearse(tarball, python, rep, keep)
    if json_out:
        _emit(render.dumps(render.rehearsal_json(result)))
    else:
        _emit(render.rehearsal_text(result))
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command("doctor")
def doctor_cmd(
    bundle: Annotated[
        Path | None,
        typer.Option(help="Check against this extracted bundle's needs (its manifest.json)."),
    ] = None,
    cuda: Cuda = None,
    profile: ProfileOpt = None,
    python: Annotated[
        str | None,
        typer.Option(help="The interpreter the venv will be made from (default: this python3)."),
    ] = None,
    prefix: Annotated[
        Path | None, typer.Option(help="Where the venv will go (for the disk-space check).")
    ] = None,
    require_gpu: Annotated[
        bool,
        typer.Option(
            "--require-gpu", help="Make the driver and GPU checks failures, not warnings."
        ),
    ] = False,
    json_out: Json = False,
) -> None:
    """Check this machine before installing: OS and glibc, Python and its headers, gcc/g++ that
    nvcc accepts, ninja, nvcc and CUDA_HOME, CUDA libraries, the driver, GPU placement
    (CUDA_VISIBLE_DEVICES, busy GPUs, RANK/LOCAL_RANK...), disk and memory. Each problem comes
    with its fix. Exit 0 with no failure, 1 with any."""
    from verl_bundle.airgap import doctor
    from verl_bundle.needs import needs_for

    try:
        report = doctor.run_doctor(
            needs_for(bundle, cuda, profile),
            python=python,
            prefix=str(prefix) if prefix else None,
            require_gpu=require_gpu,
        )
    except ValueError as exc:  # a manifest that does not say what the doctor needs
        raise UsageError(f"--bundle {bundle}: {exc}") from None
    if json_out:
        _emit(render.dumps(doctor.render_json(report)))
    else:
        _emit(doctor.render_text(report))
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command("explain")
def explain_cmd(
    logfile: Annotated[Path, typer.Argument(help="An install or build log (`-` for stdin).")],
    json_out: Json = False,
) -> None:
    """Match a failed install's output to known causes (missing Python.h, gcc that nvcc rejects,
    CUDA mismatch, flash-attn reaching for GitHub, invalid device ordinal, NCCL timeouts, a
    compiler killed for memory, ...) and say how to fix each. Exit 0 when a cause is known,
    1 when not (the log's tail is shown)."""
    from verl_bundle.airgap import explain

    if str(logfile) != "-" and not logfile.is_file():
        raise UsageError(f"{logfile}: no such file")
    text = sys.stdin.read() if str(logfile) == "-" else explain.read_log(str(logfile))
    findings = explain.explain_text(text)
    if json_out:
        _emit(render.dumps(explain.render_json(findings, text)))
    else:
        _emit(explain.render_text(findings, text))
    if not findings:
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
