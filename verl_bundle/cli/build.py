"""The build commands (`verl-bundle lock`, `verl-bundle build`): thin, as cli/main.py's; registered
there, first, so that the help lists them in pipeline order."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from verl_bundle.cli import options as opt
from verl_bundle.cli.options import (
    Compress,
    Json,
    StackOptions,
    session_of,
    show,
    takes_stack,
    terminal_question,
)


@takes_stack
def lock_cmd(
    ctx: typer.Context,
    stack: StackOptions,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o", "--output", help="Where to write the lock (default: ./pylock.<bundle>.toml)."
        ),
    ] = None,
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
    from verl_bundle.cli.render import results as render
    from verl_bundle.pipeline import check_lock, make_lock
    from verl_bundle.profile.mirrors import naming_the_rest
    from verl_bundle.progress import reporter

    req = stack.request(session_of(ctx))
    with reporter(quiet=json_out) as rep, naming_the_rest(req.profile, req.mirrors):
        if check:
            shown = render.lock_check(check_lock(req, output, rep))
        else:
            shown = render.lock(make_lock(req, output, rep))
    show(ctx, shown, json_out)


@takes_stack
def build_cmd(
    ctx: typer.Context,
    stack: StackOptions,
    lock_file: Annotated[
        Path | None,
        typer.Option(
            "--lock", help="Build exactly this lock instead of resolving (no cut-off needed)."
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory for the tarball.")
    ] = Path("."),
    compress: Annotated[
        Compress,
        typer.Option(help="Wheels are already compressed, so the default tar is not."),
    ] = Compress.none,
    compile_mode: opt.CompileOpt = opt.CompileMode.auto,
    cuda_archs: opt.CudaArchs = None,
    cuda_home: opt.CudaHome = None,
    cc: opt.Cc = None,
    cxx: opt.Cxx = None,
    host_python: opt.HostPython = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Start a host compile estimated over 30 min without asking (without a "
            "terminal, such a compile is refused unless --yes or --compile always).",
        ),
    ] = False,
    with_python: opt.WithPython = None,
    base: Annotated[
        Path | None,
        typer.Option(
            "--base",
            help="Write a delta: leave out every file this earlier bundle already has (OLD: its "
            "tarball, volumes, extracted directory or manifest.json). The server installs it "
            "with install.sh --base OLD_DIR, the old bundle's extracted directory.",
            metavar="OLD",
        ),
    ] = None,
    split_size: Annotated[
        str | None,
        typer.Option(
            "--split-size",
            help="Write volumes NAME.tar.000, .001, ... of at most SIZE each (2G, 4.7G for a "
            "DVD, 700M; decimal units, GiB for binary) and one NAME.tar.sha256 for them: "
            "`cat NAME.tar.[0-9][0-9][0-9] | sha256sum -c NAME.tar.sha256` checks each and the whole.",
            metavar="SIZE",
        ),
    ] = None,
    sign: Annotated[
        str | None,
        typer.Option(
            "--sign",
            help="Sign manifest.json (inside) and NAME.tar.sha256 (beside: .sig) with this SSH "
            "key (ssh-keygen -Y sign -n verl-bundle), or gpg:KEYID to sign with GnuPG (.asc). "
            "The server checks it before anything of the bundle runs: with the gate the build "
            "prints (ssh-keygen -Y verify, then sha256sum -c) or the installed "
            "verl-bundle-verify. install.sh's own signature check runs the bundle's code: it "
            "catches accidents, never forgery.",
            metavar="KEY|gpg:KEYID",
        ),
    ] = None,
    release: Annotated[
        int | None,
        typer.Option(
            "--release",
            help="The bundle's release number, signed with its manifest (default: the lock's "
            "time, YYYYMMDDhhmmss). The server refuses a bundle older than the one installed "
            "unless --allow-downgrade.",
            metavar="N",
            min=1,
        ),
    ] = None,
    json_out: Json = False,
) -> None:
    """Resolve (or take --lock), fetch every file once with its hash, and write one tarball.

    The tarball holds wheels, sources, bootstrap pip, manifest.json, SHA256SUMS, install.sh,
    sbom.cdx.json (CycloneDX) and LICENSES.txt. The last line printed is the tarball's path
    (with --split-size: its .sha256 list); <tarball>.sha256 is written beside it."""
    from verl_bundle.airgap.verify.volumes import parse_size
    from verl_bundle.cli.render import results as render
    from verl_bundle.compile.compiler import CompileOptions
    from verl_bundle.pipeline import BuildRequest, build
    from verl_bundle.profile.mirrors import naming_the_rest
    from verl_bundle.progress import reporter

    compiling = CompileOptions(
        compile_mode.value,
        cuda_archs,
        cuda_home,
        cc,
        cxx,
        host_python,
        yes,
        None if json_out else terminal_question(),
    )
    chosen = stack.request(session_of(ctx))
    split = parse_size(split_size) if split_size is not None else None
    req = BuildRequest(
        chosen,
        output,
        lock_file,
        compress.value,
        compiling,
        with_python,
        base,
        split,
        sign,
        release,
    )
    with reporter(quiet=json_out) as rep, naming_the_rest(chosen.profile, chosen.mirrors):
        shown = render.build(build(req, rep))
    show(ctx, shown, json_out)


def register(app: typer.Typer) -> None:
    """Add lock and build to the top-level app (first: the help lists commands as registered)."""
    app.command("lock", short_help="Resolve a stack for the server and write its lock.")(lock_cmd)
    app.command("build", short_help="Resolve, fetch and write the bundle tarball.")(build_cmd)
