"""What a launcher needs from this node's variables, per launcher.

verl's main_ppo is launched by Ray (the default): `ray start` joins the nodes and Ray places the
workers, so RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are not read and not asked for.
Under torchrun (verl's SFT trainer, or a torchrun launch of one node's workers) torch's env://
rendezvous reads all four: a partial set is a hang or a crash at start-up, also on one node;
`--nproc_per_node` must start one process per GPU the config counts; MASTER_ADDR must resolve.
Standard library only, Python 3.8+."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Tuple

from verl_bundle.airgap.doctor.devices import torchrun_findings, torchrun_problems
from verl_bundle.airgap.doctor.node import resolves

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


@dataclass(frozen=True)
class Rendezvous:
    """How torchrun meets the other nodes, as its flags (or their PET_* variables) give it: a
    c10d endpoint (--rdzv_endpoint HOST:PORT) or a static master (--master_addr, --master_port,
    --node_rank). With either, torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT for every process it starts: none is asked of the environment."""

    endpoint: str = ""
    master_addr: str = ""
    master_port: str = ""
    node_rank: str = ""

    def with_env(self, env: Mapping[str, str]) -> Rendezvous:
        """The flags given, else torchrun's own PET_* variables for them."""
        return Rendezvous(
            self.endpoint or env.get("PET_RDZV_ENDPOINT", ""),
            self.master_addr or env.get("PET_MASTER_ADDR", ""),
            self.master_port or env.get("PET_MASTER_PORT", ""),
            self.node_rank or env.get("PET_NODE_RANK", ""),
        )

    @property
    def given(self) -> bool:
        return bool(self.endpoint or self.master_addr)

    def shown(self) -> str:
        if self.endpoint:
            return f"rendezvous at {self.endpoint} (c10d)"
        rank = f", node rank {self.node_rank}" if self.node_rank else ""
        return f"static master {self.master_addr}:{self.master_port or 29500}{rank}"


NO_RENDEZVOUS = Rendezvous()
Finding = Tuple[str, str]  # (problem, its fix)
RESOLVE_FIX = "give the head node's address (an IP, or a name every node resolves)"
PORT_FIX = "a free port from 1024 to 65535, the same on every node"


def _port_ok(text: str) -> bool:
    return text.isdigit() and 1 <= int(text) <= 65535


def _endpoint(text: str) -> tuple[str, str]:
    """(host, port) of HOST[:PORT] or [IPV6]:PORT; port '' when not given."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    host, colon, port = text.rpartition(":")
    return (host, port) if colon and host else (text, "")


def _rendezvous_problems(rdzv: Rendezvous, nnodes: int, nnodes_key: str) -> list[Finding]:
    out: list[Finding] = []
    if rdzv.endpoint:
        host, port = _endpoint(rdzv.endpoint)
        if not host or not resolves(host):
            out.append(
                (
                    f"--rdzv_endpoint {rdzv.endpoint}: {host or '(no host)'} does not resolve on this node",
                    RESOLVE_FIX,
                )
            )
        if port and not _port_ok(port):
            out.append(
                (
                    f"--rdzv_endpoint {rdzv.endpoint}: {port} is not a port (1-65535)",
                    f"give --rdzv_endpoint HOST:PORT with {PORT_FIX} (29400 is torchrun's)",
                )
            )
        return out
    if not resolves(rdzv.master_addr):
        out.append((f"--master_addr {rdzv.master_addr} does not resolve on this node", RESOLVE_FIX))
    if rdzv.master_port and not _port_ok(rdzv.master_port):
        out.append(
            (
                f"--master_port {rdzv.master_port} is not a port (1-65535)",
                f"give --master_port {PORT_FIX} (29500 is torchrun's)",
            )
        )
    if not rdzv.node_rank and nnodes > 1:
        out.append(
            (
                f"--master_addr without --node_rank and {nnodes_key}={nnodes}: every node "
                "would be node 0",
                f"give each node its own --node_rank, from 0 (the head) to {nnodes - 1}",
            )
        )
    elif rdzv.node_rank and (not rdzv.node_rank.isdigit() or int(rdzv.node_rank) >= nnodes):
        out.append(
            (
                f"--node_rank {rdzv.node_rank} is not one of 0-{nnodes - 1} ({nnodes_key}={nnodes})",
                f"give each node its own --node_rank, from 0 (the head) to {nnodes - 1}",
            )
        )
    return out


def _fix(kind: str, env: Mapping[str, str], visible: int | None) -> str:
    """What fixes one finding of torchrun_findings, by its kind."""
    number = [k for k in SHOWN if k in env and not env[k].strip().isdigit()]
    given = [k for k in RENDEZVOUS if k in env]
    unset = [k for k in RENDEZVOUS if k not in env]
    world, local = env.get("WORLD_SIZE", "").strip(), env.get("LOCAL_RANK", "").strip()
    fixes = {
        "partial": f"export {' '.join(unset)} as well (torch reads all four together), or unset "
        f"{' '.join(given)} and give torchrun a rendezvous (--rdzv_endpoint HEAD:29400)",
        "number": f"export {', '.join(number) or 'it'} as a whole number",
        "zero": "export WORLD_SIZE and LOCAL_WORLD_SIZE as process counts (1 or more)",
        "rank": f"export RANK as this node's number, from 0 to "
        f"{int(world) - 1 if world.isdigit() else 'WORLD_SIZE - 1'}",
        "local-rank": "export LOCAL_RANK below LOCAL_WORLD_SIZE, or unset both: torchrun sets "
        "them for each process",
        "local-world": "export LOCAL_WORLD_SIZE at most WORLD_SIZE (the processes on this node)",
        "visible": "unset LOCAL_RANK (torchrun sets it for each process), or make "
        f"{int(local) + 1 if local.isdigit() else 'more'} GPUs visible (CUDA_VISIBLE_DEVICES)",
        "local-visible": f"start at most {visible} process(es) per node (LOCAL_WORLD_SIZE, "
        "torchrun --nproc_per_node), or make more GPUs visible",
        "port": f"export MASTER_PORT as {PORT_FIX} (29500 is torchrun's)",
        "addr": "export MASTER_ADDR as the head node's address (an IP, or a name every node "
        "resolves)",
    }
    return fixes.get(kind, "unset the torchrun variables and let torchrun set them")


def torchrun_launch_problems(
    env: Mapping[str, str],
    visible: int | None,
    nnodes: int,
    per_node: int,
    nproc: int | None,
    nnodes_key: str,
    per_node_key: str,
    rdzv: Rendezvous = NO_RENDEZVOUS,
) -> list[Finding]:
    """Why a torchrun launch from this node with these variables (or its rendezvous) would not
    start as the config says, each with its own fix (empty: it would)."""
    problems: list[Finding] = []
    if rdzv.given:
        problems += _rendezvous_problems(rdzv, nnodes, nnodes_key)
    else:
        # a partial set of the four breaks torch's env:// start, on one node too
        problems += [
            (text, _fix(kind, env, visible)) for text, kind in torchrun_findings(env, visible)
        ]
        missing = [k for k in RENDEZVOUS if not env.get(k)]
        if missing and nnodes > 1:
            problems.insert(
                0,
                (
                    f"{nnodes_key}={nnodes} but {', '.join(missing)} not set on this node",
                    "give torchrun a rendezvous on every node (--rdzv_endpoint HEAD:29400, or "
                    "--master_addr HEAD --node_rank N), and the same to preflight; or export on "
                    "every node RANK (this node's number, 0 on the head), WORLD_SIZE, "
                    "MASTER_ADDR (the head's address) and MASTER_PORT (one free port, the same "
                    "everywhere)",
                ),
            )
        world = env.get("WORLD_SIZE", "")
        if world.isdigit() and per_node and int(world) not in (nnodes, nnodes * per_node):
            problems.append(
                (
                    f"WORLD_SIZE={world} is neither {nnodes_key}={nnodes} nor the "
                    f"{nnodes * per_node} GPUs",
                    f"export WORLD_SIZE={nnodes * per_node} (the processes: {nnodes_key} x "
                    f"{per_node_key})",
                )
            )
        master = (env.get("MASTER_ADDR") or "").strip()
        if master and not resolves(master):
            problems.append(
                (
                    f"MASTER_ADDR={master} does not resolve on this node",
                    "set MASTER_ADDR to the head node's address (an IP, or a name every node "
                    "resolves)",
                )
            )
    want = per_node or visible
    if nproc is not None and want and nproc != want:
        whose = f"{per_node_key}={per_node}" if per_node else f"the {visible} visible GPU(s)"
        idle = f": {want - nproc} GPU(s) would sit idle" if nproc < want else ""
        problems.append(
            (f"--nproc_per_node={nproc} but {whose}{idle}", f"torchrun --nproc_per_node={want}")
        )
    return problems
