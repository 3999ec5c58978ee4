"""The commands that check a written bundle (`verl-bundle verify`, `verl-bundle inspect`): thin,
as cli.py's; registered there after build, so that the help lists them in pipeline order."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from verl_bundle.cli_options import Json, show
from verl_bundle.errors import UsageError


def verify_cmd(
    ctx: typer.Context,
    path: Annotated[
        Path,
        typer.Argument(
            help="A bundle tarball, its volumes (NAME.tar.sha256 or NAME.tar.000), or an "
            "extracted bundle directory."
        ),
    ],
    allowed_signers: Annotated[
        Path | None,
        typer.Option(
            "--allowed-signers",
            help="Refuse the bundle unless it is signed by a key in FILE (ssh-keygen's "
            "allowed-signers lines `PRINCIPAL KEYTYPE KEY`, or a GPG keyring from gpg --export).",
            metavar="FILE",
        ),
    ] = None,
    json_out: Json = False,
) -> None:
    """Recheck every file of a bundle against its manifest and SHA256SUMS.

    A tarball is also checked against its .sha256 file; a volume set volume by volume and as
    a whole; a delta without the files it leaves to its base. Exit 0 when intact, 3 naming
    each missing or altered file (or volume), or the signature's refusal."""
    import dataclasses

    from verl_bundle import render
    from verl_bundle.checking import check

    if not path.exists() and not path.with_name(path.name + ".000").exists():
        raise UsageError(f"{path}: no such file or directory")
    checked = check(path, allowed_signers)
    shown = render.verify(checked.report)
    show(ctx, dataclasses.replace(shown, notes=checked.notes), json_out)


def inspect_cmd(
    ctx: typer.Context,
    tarball: Annotated[
        Path,
        typer.Argument(
            help="A bundle tarball, its volumes (NAME.tar.sha256), an extracted bundle, or a "
            "manifest.json."
        ),
    ],
    base: Annotated[
        Path | None,
        typer.Option(
            "--base",
            help="The bundle approved before (tarball, directory or manifest.json): list the "
            "packages added, removed and changed since.",
            metavar="OLD",
        ),
    ] = None,
    allowed_signers: Annotated[
        Path | None,
        typer.Option(
            "--allowed-signers",
            help="Check the signature against this allowed-signers file (or GPG keyring); "
            "exit 3 when it is refused.",
            metavar="FILE",
        ),
    ] = None,
    json_out: Json = False,
) -> None:
    """Print what an approver asks: profile, target, counts and sizes, licences (the ones to
    review first: NVIDIA's, proprietary, unknown), the signer, the lock's sha256, and with
    --base what changed since the bundle approved before. Nothing is extracted."""
    from verl_bundle import render_crossing
    from verl_bundle.inspection import inspect

    show(ctx, render_crossing.inspect(inspect(tarball, base, allowed_signers)), json_out)


def register(app: typer.Typer) -> None:
    app.command("verify", short_help="Recheck a bundle against its manifest and sums.")(verify_cmd)
    app.command("inspect", short_help="What an approver asks of a bundle, without extracting it.")(
        inspect_cmd
    )
