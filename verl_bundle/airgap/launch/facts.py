"""What launch preflight reads, gathered once: verl's settings, the environment, the GPUs, the
topology and the open-file limit, for one launcher. Standard library only, Python 3.8+."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Mapping

from verl_bundle.airgap.doctor.commands import Run, run
from verl_bundle.airgap.doctor.devices import Gpu, visible_devices
from verl_bundle.airgap.doctor.gpus import GpuListing, list_gpus
from verl_bundle.airgap.doctor.node import RayToken, open_files_limit, probe_ray_token
from verl_bundle.airgap.launch import verlconfig as vc
from verl_bundle.airgap.launch.ranks import NO_RENDEZVOUS, Rendezvous

MIN_OPEN_FILES = 65536
NGPUS, NNODES = "trainer.n_gpus_per_node", "trainer.nnodes"


@dataclass(frozen=True)
class Launch:
    """What preflight reads, gathered once: verl's settings, the environment, the GPUs."""

    values: dict[str, str]
    env: Mapping[str, str]
    gpus: GpuListing
    topo: Run | None  # `nvidia-smi topo -m`; None without nvidia-smi
    open_files: int | None
    launcher: str = "ray"  # "ray" or "torchrun" (ranks.py)
    nproc_per_node: int | None = None  # torchrun's --nproc_per_node, when given
    proposal: bool = False  # a fix's proposed settings, being checked: propose nothing
    min_open_files: int = MIN_OPEN_FILES
    rendezvous: Rendezvous = NO_RENDEZVOUS  # torchrun's rendezvous flags, when given
    ray_token: RayToken | None = None  # a token an earlier ray.init() left in ~/.ray

    def number(self, key: str) -> int | None:
        return vc.integer(self.values, key)

    def visible(self) -> tuple[list[Gpu], list[str]]:
        return visible_devices(self.env.get("CUDA_VISIBLE_DEVICES"), self.gpus.gpus)


def gather(
    values: dict[str, str],
    env: Mapping[str, str],
    launcher: str = "ray",
    nproc_per_node: int | None = None,
    min_open_files: int = MIN_OPEN_FILES,
    rendezvous: Rendezvous = NO_RENDEZVOUS,
) -> Launch:
    smi = shutil.which("nvidia-smi")
    topo = run([smi, "topo", "-m"]) if smi else None
    found = list_gpus()
    return Launch(
        values,
        dict(env),
        found,
        topo,
        open_files_limit(),
        launcher,
        nproc_per_node,
        False,
        min_open_files,
        rendezvous,
        probe_ray_token(env),
    )
