"""`verl-bundle slurm install` / `slurm ray`: sbatch scripts from templates/slurm-*.sbatch.j2.
The install script copies the tarball to every node (sbcast, or a shared path), installs and
runs the doctor on every node (srun --ntasks-per-node=1), and gathers each node's JSON into
one directory for `verl-bundle fleet report`."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.credentials import redact_url
from verl_bundle.errors import UsageError


@dataclass(frozen=True)
class SlurmInstall:
    tarball: Path  # as the submitting host sees it
    output: Path  # the sbatch script to write
    gather: Path  # where each node's doctor JSON lands (a directory every node can write)
    prefix: str  # the venv on each node; %n is the node's name
    nodes: int = 2
    shared_path: Path | None = None  # the tarball (or extracted bundle) on a shared filesystem
    no_network: bool = False  # each node's install and doctor run under `unshare -n`
    python: str = ""  # the Python each node's venv is made from (default: install.sh's choice)
    from_url: str = ""  # a served, extracted bundle each node installs from (install.sh --from)


@dataclass(frozen=True)
class Written:
    script: Path
    submit: str  # the command that submits it


def bundle_name(tarball: Path) -> str:
    """The bundle's directory inside the tarball (its first member's top directory)."""
    try:
        with tarfile.open(tarball) as tf:
            first = tf.next()
    except (OSError, tarfile.TarError) as exc:
        raise UsageError(f"{tarball}: not a readable bundle tarball ({exc})") from None
    if first is None:
        raise UsageError(f"{tarball}: an empty tarball, not a bundle")
    return first.name.split("/", 1)[0]


def served_url(url: str, no_network: bool = False) -> None:
    """A --from-url the nodes can fetch from: http(s), and the network left on."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(
            f"--from-url {redact_url(url)}: give the http:// or https:// URL of the extracted "
            "bundle as served (python3 -m http.server or nginx in the directory above it)"
        )
    if no_network:
        raise UsageError("--from-url needs the network; leave out --no-network")


def render(template: str, context: dict[str, object]) -> str:
    from verl_bundle.bundle.plan import render_install

    return render_install(context, template)


def write_install(req: SlurmInstall) -> Written:
    if req.nodes < 1:
        raise UsageError(f"--nodes {req.nodes}: give at least 1")
    if req.from_url:
        served_url(req.from_url, req.no_network)
        name = req.from_url.rstrip("/").rsplit("/", 1)[-1]
    elif req.shared_path is None and not req.tarball.is_file():
        raise UsageError(f"{req.tarball}: no such tarball")
    else:
        name = (
            req.shared_path.name
            if req.shared_path is not None and req.shared_path.is_dir()
            else bundle_name(req.shared_path or req.tarball)
        )
    text = render(
        "slurm-install.sbatch.j2",
        {
            "name": name,
            "script": req.output,
            "nodes": req.nodes,
            "gather": req.gather.absolute(),
            "prefix": req.prefix,
            "shared": req.shared_path.absolute() if req.shared_path else "",
            "tarball": req.tarball.absolute(),
            "wrap": "unshare -n" if req.no_network else "",
            "python": req.python,
            "from_url": req.from_url.rstrip("/"),
        },
    )
    # Slurm opens the job's output file there before the script runs: it must exist.
    req.gather.mkdir(parents=True, exist_ok=True)
    req.output.write_text(text, encoding="utf-8")
    req.output.chmod(0o755)
    return Written(req.output, f"sbatch {req.output}")


def write_ray(output: Path, prefix: str, nodes: int, gpus_per_node: int, port: int) -> Written:
    text = render(
        "slurm-ray.sbatch.j2",
        {
            "script": output,
            "nodes": nodes,
            "prefix": prefix,
            "gpus_per_node": gpus_per_node,
            "port": port,
        },
    )
    output.write_text(text, encoding="utf-8")
    output.chmod(0o755)
    return Written(
        output, f"sbatch {output} python3 -m verl.trainer.main_ppo trainer.nnodes={nodes}"
    )
