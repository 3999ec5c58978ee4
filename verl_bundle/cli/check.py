"""The commands that check a written bundle (`verl-bundle verify`, `verl-bundle inspect`) or an
environment installed from one (`verl-bundle readiness`): thin, as cli/main.py's; registered there
after build, so that the help lists them in pipeline order."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from verl_bundle.cli.options import Json, show
from verl_bundle.errors import BundleError, UsageError


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
    each_file: Annotated[
        bool,
        typer.Option(
            "--each-file",
            help="Hash every file of a tarball too, when it matches its .sha256. By default the "
            "whole tarball is hashed, each byte once: its members are then the bytes the build "
            "hashed against the lock; a tarball that does not match is hashed file by file "
            "anyway, to name what changed.",
        ),
    ] = False,
    json_out: Json = False,
) -> None:
    """Recheck every file of a bundle against its manifest and SHA256SUMS.

    A tarball is also checked against its .sha256 file; a volume set volume by volume and as
    a whole; a delta without the files it leaves to its base. Exit 0 when intact, 3 naming
    each missing or altered file (or volume), or the signature's refusal."""
    import dataclasses

    from verl_bundle.airgap.verify.check import check
    from verl_bundle.cli.render import results as render
    from verl_bundle.progress import reporter, step

    if not path.exists() and not path.with_name(path.name + ".000").exists():
        raise UsageError(f"{path}: no such file or directory")
    with reporter(quiet=json_out) as rep, step(rep, f"verifying {path.name}"):
        # a minute for a 4.6 GB bundle: never silent
        signers = str(allowed_signers) if allowed_signers is not None else None
        checked = check(str(path), signers, each_file)
    notes = ((checked.signed,) if checked.signed else ()) + checked.notes
    show(ctx, dataclasses.replace(render.verify(checked.report), notes=notes), json_out)


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
    from verl_bundle.bundle.crossing.inspection import inspect
    from verl_bundle.cli.render import crossing as render_crossing

    show(ctx, render_crossing.inspect(inspect(tarball, base, allowed_signers)), json_out)


def readiness_cmd(
    ctx: typer.Context,
    bundle: Annotated[
        Path,
        typer.Option(
            help="The extracted bundle the environment was installed from.", metavar="DIR"
        ),
    ],
    python: Annotated[
        str,
        typer.Option(help="The installed environment's python, e.g. /opt/verl/bin/python."),
    ],
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Also start verl's own PPO trainer offline on a tiny model and dataset: up to "
            "the GPU boundary without a GPU, one PPO step where one is visible.",
        ),
    ] = False,
    model: Annotated[
        Path | None, typer.Option(help="With --deep: your own model directory.", metavar="DIR")
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(help="With --deep: your own parquet, in verl's RL format.", metavar="FILE"),
    ] = None,
    deadline: Annotated[
        float,
        typer.Option(help="With --deep: seconds before the dry run is stopped (not ready)."),
    ] = 900,
    override: Annotated[
        list[str] | None,
        typer.Option(help="With --deep: one more verl override (repeatable).", metavar="KEY=VALUE"),
    ] = None,
    require_gpu: Annotated[
        bool, typer.Option("--require-gpu", help="No GPU visible is not ready.")
    ] = False,
    json_out: Json = False,
) -> None:
    """Prove an installed environment can start the bundle's verl trainer.

    Runs the bundle's own server program (its lib/) with the environment's own python,
    isolated as install.sh runs it (nothing of this tool's site-packages on its path): verl's
    trainer, workers and rollout import, its config composes, the installed set is consistent;
    with --deep, verl's own PPO entry starts offline on a tiny model and dataset made on the
    spot (or yours: --model DIR --data FILE), then verl's workers are built and initialised up
    to the first GPU-only call, so a wrong chat template, a dataset in the wrong shape, a batch
    size verl refuses or a model verl cannot build is found before the GPU job is queued. The
    verdict is the last line and names what was not proven; exit 0 ready (or ready on the CPU
    side), 5 not ready, 2 bad input."""
    from verl_bundle.airgap.postinstall.readiness import ReadinessReport, render_text
    from verl_bundle.bundle.server import check_python, run_server
    from verl_bundle.cli.render.shown import Shown
    from verl_bundle.interpreter import interpreter

    if not (bundle / "manifest.json").is_file():
        raise UsageError(f"--bundle {bundle}: no manifest.json there (an extracted bundle)")
    if not deep and (model or data or override):
        raise UsageError("--model, --data and --override go with --deep (the dry run)")
    py = check_python(interpreter(python))
    argv = ["readiness", "--bundle", str(bundle.resolve()), "--json"]
    argv += ["--require-gpu"] if require_gpu else []
    if deep:
        argv += ["--deep", "--deadline", str(deadline)]
        argv += ["--model", str(model.resolve())] if model else []
        argv += ["--data", str(data.resolve())] if data else []
        for o in override or []:
            argv += ["--override", o]
    got = run_server(py, bundle.resolve(), argv, "readiness")
    try:
        report = ReadinessReport.from_dict(got.result)
    except (TypeError, ValueError) as exc:
        raise BundleError(f"readiness by {py} gave a result this tool cannot read: {exc}") from None
    v = got.verdict
    text = f"{render_text(report)}\n{v.line}"
    show(ctx, Shown("readiness", v.ok, got.result, text, verdict=v), json_out)


def register(app: typer.Typer) -> None:
    app.command("verify", short_help="Recheck a bundle against its manifest and sums.")(verify_cmd)
    app.command("inspect", short_help="What an approver asks of a bundle, without extracting it.")(
        inspect_cmd
    )
    app.command("readiness", short_help="Prove an installed venv can start verl's trainer.")(
        readiness_cmd
    )
