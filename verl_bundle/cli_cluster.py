"""The cluster commands (`verl-bundle fleet report`, `verl-bundle preflight`): thin, as cli.py's;
registered there."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from verl_bundle.cli_options import (
    Gather,
    Json,
    Nodes,
    NodeVenv,
    Tarball,
    Written,
    command_group,
    show,
)

fleet_app = command_group(
    "Compare the doctor results gathered from every node of a cluster.",
    "Compare the doctor results gathered from every node.",
)


@fleet_app.command("report")
def fleet_report_cmd(
    ctx: typer.Context,
    directory: Annotated[
        Path, typer.Argument(help="A directory of doctor --json results, one file per node.")
    ],
    json_out: Json = False,
) -> None:
    """One table of nodes by checks, then what differs between nodes that breaks Ray or NCCL
    (driver, CUDA, GPUs, glibc, Python patch, environment fingerprint, ulimit -n, /dev/shm,
    NCCL/GLOO interfaces) and nodes whose interface or MASTER_ADDR does not work. Exit 0 when
    the nodes agree, 1 on drift, 2 when the results cannot be read."""
    from verl_bundle import render
    from verl_bundle.fleet import fleet_report

    show(ctx, render.fleet(fleet_report(directory)), json_out)


def preflight_cmd(
    ctx: typer.Context,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="verl's overrides, as on its command line (trainer.nnodes=2 ...)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="verl settings as YAML (nested maps of scalars).")
    ] = None,
    json_out: Json = False,
) -> None:
    """Check this node right before `ray start` or torchrun: CUDA_VISIBLE_DEVICES against the
    GPUs and trainer.n_gpus_per_node x trainer.nnodes, busy GPUs, mixed GPU memory, NVLink,
    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, ulimit -n, the offline variables, and verl's
    batch-size and tensor-parallel rules. Exit 0 ready, 1 not, 2 on a bad override or YAML."""
    import os

    from verl_bundle import render
    from verl_bundle.airgap.launch import preflight
    from verl_bundle.airgap.launch.verlconfig import ConfigError
    from verl_bundle.errors import UsageError

    try:
        result = preflight.run_preflight(
            list(overrides or []), str(config) if config else None, os.environ
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    show(ctx, render.preflight(result), json_out)


FromUrl = Annotated[
    str,
    typer.Option(
        help="Install from one served copy instead: the URL of the extracted bundle behind "
        "python3 -m http.server or nginx (each node runs install.sh --from URL)."
    ),
]


def _tarball(tarball: Path | None, from_url: str) -> Path:
    from verl_bundle.errors import UsageError

    if tarball is None and not from_url:
        raise UsageError("give the bundle tarball, or --from-url URL of a served bundle")
    return tarball or Path()


slurm_app = command_group(
    "Write sbatch scripts that install and check the bundle on every node of a Slurm job.",
    "Write sbatch scripts: install on every node, start Ray.",
)


@slurm_app.command("install")
def slurm_install_cmd(
    tarball: Tarball = None,
    shared_path: Annotated[
        Path | None,
        typer.Option(help="The tarball or extracted bundle on a filesystem every node sees."),
    ] = None,
    prefix: NodeVenv = "/opt/verl",
    nodes: Nodes = 2,
    gather: Gather = Path("verl-bundle-results"),  # a directory every node sees
    no_network: Annotated[
        bool, typer.Option("--no-network", help="Run each node's install under unshare -n.")
    ] = False,
    python: Annotated[
        str, typer.Option(help="The Python each node's venv is made from (install.sh --python).")
    ] = "",
    from_url: FromUrl = "",
    output: Written = Path("verl-bundle-install.sbatch"),
) -> None:
    """Write an sbatch script that copies the tarball to every node (sbcast) or reads it from a
    shared path, installs it and runs the doctor on every node (srun --ntasks-per-node=1), and
    gathers each node's JSON for `verl-bundle fleet report`. Prints the command to submit it."""
    from verl_bundle.cluster.slurm import SlurmInstall, write_install

    req = SlurmInstall(
        _tarball(tarball, from_url).resolve(),
        output.resolve(),
        gather.resolve(),
        prefix,
        nodes,
        shared_path.resolve() if shared_path else None,
        no_network,
        python,
        from_url,
    )
    typer.echo(write_install(req).submit)


@slurm_app.command("ray")
def slurm_ray_cmd(
    prefix: NodeVenv = "/opt/verl",
    nodes: Nodes = 2,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node (0: do not ask).")] = 0,
    port: Annotated[int, typer.Option(help="The Ray head's port.")] = 6379,
    output: Written = Path("verl-ray.sbatch"),
) -> None:
    """Write an sbatch script that starts a Ray head and workers from the installed venv with the
    offline variables set, then runs the given command (verl's trainer) on the head."""
    from verl_bundle.cluster.slurm import write_ray

    typer.echo(write_ray(output.resolve(), prefix, nodes, gpus_per_node, port).submit)


ansible_app = command_group(
    "Write an Ansible playbook that installs and checks the bundle on every host.",
    "Write an Ansible playbook: install on every host, gather.",
)


@ansible_app.command("install")
def ansible_install_cmd(
    tarball: Tarball = None,
    prefix: Annotated[
        str, typer.Option(help="The venv on each host (an inventory verl_prefix overrides it).")
    ] = "/opt/verl",
    hosts: Annotated[str, typer.Option(help="The inventory pattern to install on.")] = "all",
    url: Annotated[
        str, typer.Option(help="Fetch the tarball from this intranet URL instead of copying it.")
    ] = "",
    gather: Gather = Path("verl-bundle-results"),  # on this controller
    from_url: FromUrl = "",
    output: Written = Path("verl-bundle-install.yml"),
) -> None:
    """Write a playbook that copies (or fetches) the tarball to every host, installs it, runs the
    doctor and gathers each host's JSON here for `verl-bundle fleet report`. Per-host inventory
    variables: verl_prefix, verl_python, verl_work. Prints the command to run it."""
    from verl_bundle.cluster.ansible import AnsibleInstall, write_playbook

    where = _tarball(tarball, from_url).resolve()
    req = AnsibleInstall(where, output.resolve(), gather.resolve(), prefix, hosts, url, from_url)
    typer.echo(write_playbook(req).submit)


def register(app: typer.Typer) -> None:
    """Add the cluster commands to the top-level app."""
    app.command("preflight", short_help="Check a node before ray start or torchrun.")(preflight_cmd)
    app.add_typer(fleet_app, name="fleet")
    app.add_typer(slurm_app, name="slurm")
    app.add_typer(ansible_app, name="ansible")
