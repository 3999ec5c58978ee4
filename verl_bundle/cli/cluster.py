"""The cluster commands (`verl-bundle fleet report`, `verl-bundle preflight`): thin, as cli/main.py's;
registered there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from verl_bundle.cli.options import (
    Gather,
    Json,
    NodeQuick,
    NodeRepair,
    NodeRequireGpu,
    Nodes,
    NodeVenv,
    SkipPhases,
    Tarball,
    Written,
    command_group,
    show,
)
from verl_bundle.cli.render.shown import Shown

if TYPE_CHECKING:
    from verl_bundle.cluster.slurm import Written as Script

fleet_app = command_group(
    "Compare the doctor results gathered from every node of a cluster.",
    "Compare the doctor results gathered from every node.",
)


@fleet_app.command("report")
def fleet_report_cmd(
    ctx: typer.Context,
    directory: Annotated[
        Path,
        typer.Argument(
            help="The gathered results: one NODE.json per node (written by the slurm or "
            "ansible install, or a doctor --json per node) and the run's .run.json."
        ),
    ],
    expect: Annotated[
        str | None,
        typer.Option(
            help="The nodes that must have reported: a list (gpu01,gpu02), Slurm's compressed "
            "form (gpu[01-04]), or a file of names. Default: the run's own list (.run.json).",
            metavar="NODES",
        ),
    ] = None,
    doctor_only: Annotated[
        bool,
        typer.Option(
            "--doctor-only",
            help="Also read plain doctor --json results gathered by hand (no install record): "
            "their doctor checks, fingerprints and hosts are compared, their installs are not, "
            "and the verdict says so. Without it such a result is refused (exit 2).",
        ),
    ] = False,
    json_out: Json = False,
) -> None:
    """One table of nodes by checks, then each node that is missing, stale (from another run or
    bundle) or failed (its install exit code, each doctor check, no live fingerprint, no or
    another bundle hash), and what differs between
    nodes that breaks Ray or NCCL (driver, CUDA, GPUs, glibc, Python patch, environment
    fingerprint, the bundle, ulimit -n, /dev/shm, NCCL/GLOO interfaces, and the variables that
    change a run: HF_*, TRANSFORMERS_OFFLINE, PYTHONPATH, LD_LIBRARY_PATH, NCCL_*, GLOO_*,
    TORCH_NCCL_*, CUDA_*, VLLM_*, PYTORCH_CUDA_ALLOC_CONF, WANDB_MODE, OMP_NUM_THREADS,
    NVIDIA_VISIBLE_DEVICES, RAY_*; secrets compared by a hash). Exit 0 when every expected node
    reported, passed and agrees; 1 when not; 2 when the results cannot be read."""
    from verl_bundle.cli.render import results as render
    from verl_bundle.cluster.fleet.report import fleet_report

    show(ctx, render.fleet(fleet_report(directory, expect, doctor_only)), json_out)


def preflight_cmd(
    ctx: typer.Context,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="verl's overrides, as on its command line (trainer.nnodes=2 ...)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="verl settings as YAML (nested maps of scalars).")
    ] = None,
    launcher: Annotated[
        str,
        typer.Option(
            help="What starts the workers: ray (verl's main_ppo; no RANK/WORLD_SIZE/MASTER_* "
            "asked for) or torchrun (all four set together, MASTER_ADDR resolves)."
        ),
    ] = "ray",
    nproc_per_node: Annotated[
        int | None,
        typer.Option(help="torchrun's --nproc_per_node, checked against trainer.n_gpus_per_node."),
    ] = None,
    rdzv_endpoint: Annotated[
        str,
        typer.Option(
            help="torchrun's c10d rendezvous (HOST:PORT, as given to torchrun): torchrun then "
            "sets each process's ranks, so none is asked of the environment.",
            metavar="HOST:PORT",
        ),
    ] = "",
    master_addr: Annotated[
        str,
        typer.Option(help="torchrun's static rendezvous (--master_addr).", metavar="HOST"),
    ] = "",
    master_port: Annotated[
        str, typer.Option(help="With --master-addr: torchrun's --master_port.", metavar="PORT")
    ] = "",
    node_rank: Annotated[
        str, typer.Option(help="With --master-addr: this node's --node_rank.", metavar="N")
    ] = "",
    json_out: Json = False,
) -> None:
    """Check this node right before `ray start` or torchrun: CUDA_VISIBLE_DEVICES against the
    GPUs and trainer.n_gpus_per_node x trainer.nnodes, busy GPUs, mixed GPU memory, NVLink,
    the launcher's rank variables, ulimit -n, the offline variables, and verl's batch-size and
    tensor-parallel rules; a fix that proposes GPUs is checked against every rule first. Exit
    0 ready, 1 not, 2 on a bad override or YAML."""
    import argparse
    import os

    from verl_bundle.airgap.commands import rendezvous_of
    from verl_bundle.airgap.errors import UsageError as ServerUsageError
    from verl_bundle.airgap.launch import preflight
    from verl_bundle.airgap.launch.verlconfig import ConfigError
    from verl_bundle.cli.render import results as render
    from verl_bundle.errors import UsageError

    if launcher not in ("ray", "torchrun"):
        raise UsageError(f"--launcher {launcher}: give ray or torchrun")
    if nproc_per_node is not None and launcher != "torchrun":
        raise UsageError("--nproc-per-node is torchrun's; give --launcher torchrun")
    if nproc_per_node is not None and nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be 1 or more")
    flags = argparse.Namespace(
        launcher=launcher,
        rdzv_endpoint=rdzv_endpoint,
        master_addr=master_addr,
        master_port=master_port,
        node_rank=node_rank,
    )
    try:
        result = preflight.run_preflight(
            list(overrides or []),
            str(config) if config else None,
            os.environ,
            launcher,
            nproc_per_node,
            rendezvous=rendezvous_of(flags),
        )
    except (ConfigError, ServerUsageError) as exc:
        raise UsageError(str(exc).removeprefix("preflight: ")) from None
    show(ctx, render.preflight(result), json_out)


FromUrl = Annotated[
    str,
    typer.Option(
        help="Install from one served copy instead: the URL of the extracted bundle behind "
        "python3 -m http.server or nginx (each node runs install.sh --from URL)."
    ),
]


BundleSha256 = Annotated[
    str,
    typer.Option(
        "--bundle-sha256",
        help="With --from-url: the sha256 of the bundle's SHA256SUMS (sha256sum SHA256SUMS in "
        "your own extracted copy). Each node installs only that bundle (install.sh "
        "--bundle-sha256), and checks the install.sh it fetched against it first.",
        metavar="H",
    ),
]


def _written(ctx: typer.Context, command: str, written: Script) -> None:
    """A written script, through the one render path: its last line is the command that
    submits it (what a script wants)."""
    result = {"script": str(written.script), "submit": written.submit}
    show(ctx, Shown(command, True, result, written.submit), False)


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
    ctx: typer.Context,
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
    bundle_sha256: BundleSha256 = "",
    quick: NodeQuick = False,
    repair: NodeRepair = False,
    require_gpu: NodeRequireGpu = False,
    skip_phases: SkipPhases = None,
    output: Written = Path("verl-bundle-install.sbatch"),
) -> None:
    """Write an sbatch script that copies the tarball onto every node (sbcast --compress, read
    where the batch step runs: the path must be the same file there, else the job says so in
    one line), reads it from --shared-path, or has each node install from --from-url; each
    node checks that the bundle is the one this script was written for before it installs;
    installs and runs the doctor on every node (srun --ntasks-per-node=1), writes each node's
    result (install exit code, doctor verdict, bundle, environment) into --gather, removes
    each node's copy once installed (keeps it on failure, and says where) and ends with the
    exit code of `verl-bundle fleet report` (5 when it cannot be reached from the batch
    node). Prints the command to submit it."""
    from verl_bundle.cluster.slurm import SlurmInstall, write_install
    from verl_bundle.cluster.values import InstallOptions

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
        bundle_sha256,
        InstallOptions(quick, repair, require_gpu, tuple(skip_phases or ())),
    )
    _written(ctx, "slurm install", write_install(req))


@slurm_app.command("ray")
def slurm_ray_cmd(
    ctx: typer.Context,
    prefix: NodeVenv = "/opt/verl",
    nodes: Nodes = 2,
    gpus_per_node: Annotated[
        str,
        typer.Option(
            help="GPUs per node: all (whole, exclusive nodes with every GPU), a count (asked "
            "of sbatch per node), or 0 for a CPU-only cluster.",
            metavar="all|N",
        ),
    ] = "all",
    cpus_per_task: Annotated[
        int, typer.Option(help="CPUs per node for Ray (0: all of the node's).")
    ] = 0,
    mem: Annotated[str, typer.Option(help="Memory per node, as sbatch --mem (0: all).")] = "0",
    port: Annotated[
        int,
        typer.Option(
            help="The Ray head's port: 0 (the default) lets Ray choose a free one for each job, "
            "so two jobs on one node never meet; a fixed one must lie outside Ray's own "
            "(workers 10002-19999, 10001, 8265, 52365)."
        ),
    ] = 0,
    ifname: Annotated[
        str,
        typer.Option(
            help="The cluster network's interface (NCCL/GLOO_SOCKET_IFNAME and Ray's "
            "addresses); default: the head's first non-loopback address's interface."
        ),
    ] = "",
    wait: Annotated[int, typer.Option(help="Seconds for every node to register with Ray.")] = 600,
    min_open_files: Annotated[
        int, typer.Option(help="The ulimit -n the job needs; it stops in one line below it.")
    ] = 65536,
    output: Written = Path("verl-ray.sbatch"),
) -> None:
    """Write an sbatch script that starts Ray from each node's installed venv (by absolute
    path) with the offline variables set and the CPUs and GPUs Slurm gave the job, waits until
    every node registered with its GPUs, then runs the command given after the script on the
    head with RAY_ADDRESS set (and, for verl's trainer, trainer.nnodes and
    trainer.n_gpus_per_node). The job's exit code is the command's."""
    from verl_bundle.cluster.slurm_ray import SlurmRay, write_ray

    req = SlurmRay(
        output.resolve(),
        prefix,
        nodes,
        gpus_per_node,
        cpus_per_task,
        mem,
        port,
        ifname,
        wait,
        min_open_files,
    )
    _written(ctx, "slurm ray", write_ray(req))


ansible_app = command_group(
    "Write an Ansible playbook that installs and checks the bundle on every host.",
    "Write an Ansible playbook: install on every host, gather.",
)


@ansible_app.command("install")
def ansible_install_cmd(
    ctx: typer.Context,
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
    bundle_sha256: BundleSha256 = "",
    serial: Annotated[
        str,
        typer.Option(
            help="Hosts per batch (a count, or a percentage such as 25%); default: all at once."
        ),
    ] = "",
    quick: NodeQuick = False,
    repair: NodeRepair = False,
    require_gpu: NodeRequireGpu = False,
    skip_phases: SkipPhases = None,
    output: Written = Path("verl-bundle-install.yml"),
) -> None:
    """Write a playbook that copies the tarball to every host (or has each fetch it from --url,
    or install from one served copy with --from-url, so this controller sends nothing). The
    bundle is pinned now (the sha256 of its SHA256SUMS): each host checks it before it
    installs, so a tarball rebuilt under the same name needs the playbook written again. A host
    whose live environment is the one the install left is only checked (a second run changes
    nothing); one that changed since is installed again (with --repair: what differs). Runs
    the doctor on every host, gathers each host's result here and ends with `verl-bundle fleet
    report` (a failed host is named there; a batch where every host failed ends the install,
    never the report). Per-host inventory variables: verl_prefix, verl_python, verl_work.
    Prints the command to run it."""
    from verl_bundle.cluster.ansible import AnsibleInstall, write_playbook
    from verl_bundle.cluster.values import InstallOptions

    req = AnsibleInstall(
        _tarball(tarball, from_url).resolve(),
        output.resolve(),
        gather.resolve(),
        prefix,
        hosts,
        url,
        from_url,
        serial,
        bundle_sha256,
        InstallOptions(quick, repair, require_gpu, tuple(skip_phases or ())),
    )
    _written(ctx, "ansible install", write_playbook(req))


def register(app: typer.Typer) -> None:
    """Add the cluster commands to the top-level app."""
    app.command("preflight", short_help="Check a node before ray start or torchrun.")(preflight_cmd)
    app.add_typer(fleet_app, name="fleet")
    app.add_typer(slurm_app, name="slurm")
    app.add_typer(ansible_app, name="ansible")
