"""`verl-bundle slurm ray`: an sbatch script from templates/slurm-ray.sbatch.j2 that starts a Ray
cluster from each node's installed venv the way verl's examples/slurm/ray_on_slurm.slurm does,
and goes further: the CPUs, memory and GPUs Slurm gives the job are the ones Ray is told
(default: whole nodes, all their GPUs), the head's address is its first non-loopback one (or
the given interface's) and sets NCCL/GLOO_SOCKET_IFNAME, workers start together, the trainer
starts only once every node registered with its GPUs, with RAY_ADDRESS and verl's
trainer.nnodes/n_gpus_per_node set, and its exit code is the job's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.cluster import values
from verl_bundle.cluster.slurm import Written, write_script
from verl_bundle.errors import UsageError

ALL = "all"
MEM = re.compile(r"[0-9]{1,9}[KMGT]?")
# Ray's own ports on a node (its defaults): a head port there meets another job's Ray.
RAY_WORKER_PORTS = (10002, 19999)
RAY_FIXED_PORTS = {10001: "its client server", 8265: "its dashboard", 52365: "its dashboard agent"}
IFNAME = re.compile(r"[A-Za-z0-9._:-]{1,15}")  # Linux interface names: at most 15 bytes


@dataclass(frozen=True)
class SlurmRay:
    output: Path
    prefix: str = "/opt/verl"  # each node's venv; %n is the node's name
    nodes: int = 2
    gpus_per_node: str = ALL  # "all" (whole nodes), or a count (0: a CPU-only cluster)
    cpus_per_task: int = 0  # 0: every CPU of the node (the job takes whole nodes)
    mem: str = "0"  # sbatch --mem; 0: all of each node's memory
    port: int = 0  # 0: a free one Ray chooses for each job
    ifname: str = ""  # the cluster network's interface; '': the head's first non-loopback
    wait: int = 600  # seconds for every node to register with Ray
    min_open_files: int = 65536


def _gpus(value: str) -> tuple[str, str]:
    """(the script's GPUS, the #SBATCH --gpus-per-node value or '')."""
    if value == ALL:
        return ALL, ""
    if not value.isdigit() or int(value) > 1024:
        raise UsageError(f"--gpus-per-node {value[:20]!r}: give a count (8), 0 for none, or all")
    count = int(value)
    return str(count), str(count) if count else ""


def check_port(port: int) -> None:
    """The head's port: 0 (Ray chooses a free one per job), or one outside Ray's own ranges
    (its workers' 10002-19999 and its fixed defaults), refused in one line otherwise."""
    low, high = RAY_WORKER_PORTS
    keep = "give 0 (the default: a free port Ray chooses for each job) or a port outside it"
    if port == 0:
        return
    if not 1024 <= port <= 65535:
        raise UsageError(f"--port {port}: not a port Ray's head can take (1024-65535); {keep}")
    if low <= port <= high:
        raise UsageError(
            f"--port {port}: inside Ray's worker-port range ({low}-{high}), where Ray binds its "
            f"workers (another job's Ray on the node may hold it); {keep}"
        )
    if port in RAY_FIXED_PORTS:
        raise UsageError(f"--port {port}: Ray's default port for {RAY_FIXED_PORTS[port]}; {keep}")


def write_ray(req: SlurmRay) -> Written:
    if req.nodes < 1:
        raise UsageError(f"--nodes {req.nodes}: give at least 1")
    check_port(req.port)
    if req.cpus_per_task < 0 or req.wait < 1 or req.min_open_files < 0:
        raise UsageError(
            "--cpus-per-task, --wait and --min-open-files take counts >= 0 (--wait >= 1)"
        )
    if not MEM.fullmatch(req.mem):
        raise UsageError(f"--mem {req.mem[:20]!r}: give sbatch's size (200G, 512000M) or 0 for all")
    if req.ifname and not IFNAME.fullmatch(req.ifname):
        raise UsageError(f"--ifname {req.ifname[:20]!r}: not a network interface name")
    gpus, request = _gpus(req.gpus_per_node)
    exclusive = gpus == ALL or req.cpus_per_task == 0
    text = values.render(
        "slurm-ray.sbatch.j2",
        {
            "script": values.path_value(req.output, "--output"),
            "nodes": req.nodes,
            "prefix": values.path_value(req.prefix, "--prefix"),
            "gpus": gpus,
            "gpus_request": request,
            "cpus": req.cpus_per_task,
            "mem": req.mem,
            "exclusive": exclusive,
            "port": req.port,
            "ifname": req.ifname,
            "wait": req.wait,
            "open_files": req.min_open_files,
            "cpus_text": f"{req.cpus_per_task} CPU(s)" if req.cpus_per_task else "all CPUs",
            "mem_text": "all memory" if req.mem == "0" else f"{req.mem} of memory",
            "gpus_text": "all GPUs (--exclusive)"
            if gpus == ALL
            else (f"{gpus} GPU(s)" if request else "no GPU"),
        },
    )
    write_script(req.output, text, secret=False)
    return Written(
        req.output,
        f"sbatch {values.sh_quote(req.output)} python3 -m verl.trainer.main_ppo ...",
    )
