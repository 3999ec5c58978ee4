"""What a launcher needs from this node's variables, per launcher.

verl's main_ppo is launched by Ray (the default): `ray start` joins the nodes and Ray places the
workers, so RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are not read and not asked for.
Under torchrun (verl's SFT trainer, or a torchrun launch of one node's workers) torch's env://
rendezvous reads all four: a partial set is a hang or a crash at start-up, also on one node;
`--nproc_per_node` must start one process per GPU the config counts; MASTER_ADDR must resolve.
Standard library only, Python 3.8+."""

from __future__ import annotations

from typing import Mapping

from verl_bundle.airgap.doctor.devices import torchrun_problems
from verl_bundle.airgap.doctor.node import _resolves

LAUNCHERS = ("ray", "torchrun")
RENDEZVOUS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SHOWN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def shown(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={env[k]}" for k in SHOWN if k in env)


def ray_problems(env: Mapping[str, str], visible: int | None) -> list[str]:
    """Under Ray: the torchrun variables set here that contradict each other (a partial set,
    RANK not below WORLD_SIZE): `ray start` passes this environment to every worker, and a
    worker that does not set its own (torch.distributed in a user's task) inherits them."""
    if not any(env.get(k) for k in (*RENDEZVOUS, "LOCAL_RANK")):
        return []
    return torchrun_problems(env, visible)


def ray_summary(env: Mapping[str, str]) -> str:
    """Under Ray: nothing to ask; the torchrun variables set are named as unused."""
    unused = [k for k in RENDEZVOUS if env.get(k)]
    text = (
        "Ray launch: ray start joins the nodes; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not used"
    )
    return text + (f" ({', '.join(unused)} set here, ignored)" if unused else "")


def torchrun_launch_problems(
    env: Mapping[str, str],
    visible: int | None,
    nnodes: int,
    per_node: int,
    nproc: int | None,
    nnodes_key: str,
    per_node_key: str,
) -> list[str]:
    """Why a torchrun launch from this node with these variables would not start as the
    config says (empty: it would)."""
    problems = torchrun_problems(env, visible)  # a partial set of the four, on one node too
    missing = [k for k in RENDEZVOUS if not env.get(k)]
    if missing and nnodes > 1:
        problems.insert(0, f"{nnodes_key}={nnodes} but {', '.join(missing)} not set on this node")
    world = env.get("WORLD_SIZE", "")
    if world.isdigit() and per_node and int(world) not in (nnodes, nnodes * per_node):
        problems.append(
            f"WORLD_SIZE={world} is neither {nnodes_key}={nnodes} nor the {nnodes * per_node} GPUs"
        )
    want = per_node or visible
    if nproc is not None and want and nproc != want:
        whose = f"{per_node_key}={per_node}" if per_node else f"the {visible} visible GPU(s)"
        idle = f": {want - nproc} GPU(s) would sit idle" if nproc < want else ""
        problems.append(f"--nproc_per_node={nproc} but {whose}{idle}")
    master = (env.get("MASTER_ADDR") or "").strip()
    if master and not _resolves(master):
        problems.append(f"MASTER_ADDR={master} does not resolve on this node")
    return problems


def torchrun_fix(problems: list[str], per_node: int, visible: int | None) -> str:
    """The fix for `torchrun_launch_problems`, by what was found."""
    fixes = []
    if any(p.startswith("--nproc_per_node") for p in problems):
        fixes.append(f"torchrun --nproc_per_node={per_node or visible}")
    if any("does not resolve" in p for p in problems):
        fixes.append(
            "set MASTER_ADDR to the head node's address (an IP, or a name every node resolves)"
        )
    if any(not p.startswith("--nproc") and "does not resolve" not in p for p in problems):
        fixes.append(
            "export on every node RANK (this node's number, 0 on the head), WORLD_SIZE, "
            "MASTER_ADDR (the head's address) and MASTER_PORT (one free port, the same "
            "everywhere)"
        )
    return "; ".join(fixes)
