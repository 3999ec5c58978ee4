"""The fleet report: the doctor's JSON results gathered from every node of a cluster (one file
per node), compared. Ray and NCCL need the nodes to agree on the driver, CUDA, GPUs, glibc,
Python's patch version and the installed distributions; a difference is drift, named with the
nodes on each side and its fix. Rendering lives in render.py; `fleet_report(DIR)` is the core."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_bundle.errors import UsageError

GIB = 1 << 30


class FleetError(UsageError):
    """The gathered results cannot be read (no files, not a doctor's JSON): one line."""


@dataclass(frozen=True)
class NodeResult:
    """One node's doctor result: its name (host name, else the file's stem), the file it came
    from, the checks' statuses in the doctor's order, and the `host` facts."""

    name: str
    source: str
    ok: bool
    checks: tuple[tuple[str, str], ...]
    host: dict[str, Any]


@dataclass(frozen=True)
class Fact:
    """A fact every node must agree on: where it is in the doctor's `host`, and why it matters."""

    key: str
    label: str
    why: str
    fix: str
    show: Callable[[Any], str] = str


@dataclass(frozen=True)
class Drift:
    """Nodes that differ in one fact: each value seen, with the nodes that have it."""

    fact: Fact
    groups: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Problem:
    """A node whose network setting cannot work on its own (no such interface, no address)."""

    node: str
    what: str
    fix: str


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[NodeResult, ...]
    drift: tuple[Drift, ...]
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        """No drift and no node-level network problem (failed doctor checks are shown, and
        each node's own doctor run already failed for them)."""
        return not self.drift and not self.problems

    def check_ids(self) -> list[str]:
        return list(dict.fromkeys(cid for n in self.nodes for cid, _ in n.checks))


def _gib(value: Any) -> str:
    return f"{value / GIB:.1f} GiB" if isinstance(value, int) else "unknown"


def _models(value: Any) -> str:
    if not value:
        return "no GPU"
    counts: dict[str, int] = {}
    for model in value:
        counts[str(model)] = counts.get(str(model), 0) + 1
    return ", ".join(f"{n} x {m}" for m, n in counts.items())


def _short(value: Any) -> str:
    return str(value)[:12] if value else "none (no fingerprint under the prefix)"


SAME = "install the same bundle (the same tarball, the same --skip-phase) on every node"
FACTS = (
    Fact(
        "driver",
        "NVIDIA driver",
        "NCCL and CUDA IPC between nodes expect one driver version",
        "install the same NVIDIA driver on every node (from the intranet mirror) and reboot",
    ),
    Fact(
        "cuda_driver",
        "CUDA (driver)",
        "a node whose driver supports an older CUDA cannot run the bundle's kernels",
        "upgrade the older nodes' NVIDIA driver to the newest nodes' version",
    ),
    Fact(
        "gpu_models",
        "GPU model and memory",
        "verl sizes each worker's share per GPU: the smallest GPU sets the limit",
        "give the job nodes of one GPU kind (a Slurm partition or --constraint per kind)",
        _models,
    ),
    Fact(
        "glibc",
        "glibc",
        "wheels and compiled extensions built on one node may not load on another",
        "run every node on one OS release, or build the bundle for the oldest glibc",
    ),
    Fact(
        "python",
        "Python patch version",
        "Ray refuses to join nodes whose Python versions differ",
        "make every node's venv from the same Python build (./install.sh --python PATH)",
    ),
    Fact(
        "fingerprint",
        "environment fingerprint",
        "Ray workers unpickle objects with their own packages: every node must have the "
        "same distributions at the same versions",
        SAME,
        _short,
    ),
    Fact(
        "open_files",
        "ulimit -n",
        "Ray and NCCL open many sockets and files; the lowest limit fails first",
        "raise the limit to the same value everywhere (ulimit -n 65536 in the job script, "
        "or nofile in /etc/security/limits.conf)",
    ),
    Fact(
        "shm_bytes",
        "/dev/shm size",  # noqa: S108 - a label, not a file this writes
        "NCCL and the dataloaders use shared memory; a small /dev/shm fails on one node",
        "give /dev/shm the same size everywhere (mount -o remount,size=64G /dev/shm, or "
        "--shm-size for containers)",
        _gib,
    ),
    Fact(
        "socket_ifnames",
        "NCCL/GLOO interface names",
        "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME must pick the same network on every node",
        "export the same NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on every node (the "
        "interface of the cluster network, e.g. from `ip -br addr`)",
        lambda v: ", ".join(f"{k}={x}" for k, x in sorted(v.items())) if v else "not set",
    ),
)


def _read(path: Path) -> NodeResult:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FleetError(f"{path}: not readable JSON ({exc}); gather `doctor --json`") from None
    result = doc.get("result") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("command") != "doctor" or not isinstance(result, dict):
        raise FleetError(
            f"{path}: not a doctor result; gather each node's `doctor --json` output, one file "
            "per node"
        )
    found = result.get("host")
    host: dict[str, Any] = found if isinstance(found, dict) else {}
    checks = tuple(
        (str(c.get("id")), str(c.get("status")))
        for c in result.get("checks") or []
        if isinstance(c, dict)
    )
    name = str(host.get("hostname") or path.stem)
    return NodeResult(name, path.name, bool(result.get("ok")), checks, dict(host))


def load_results(directory: Path) -> list[NodeResult]:
    """Every *.json in `directory`, one node each; the file's stem names a node whose host name
    is missing or already taken (several nodes reporting one name)."""
    if not directory.is_dir():
        raise FleetError(f"{directory}: no such directory of gathered doctor results")
    paths = sorted(directory.glob("*.json"))
    if not paths:
        raise FleetError(f"{directory}: no *.json doctor results in it (one per node)")
    nodes = [_read(p) for p in paths]
    names = [n.name for n in nodes]
    return [
        NodeResult(Path(n.source).stem, n.source, n.ok, n.checks, n.host)
        if names.count(n.name) > 1
        else n
        for n in nodes
    ]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _drift(fact: Fact, nodes: list[NodeResult]) -> Drift | None:
    groups: dict[str, list[str]] = {}
    shown: dict[str, str] = {}
    for n in nodes:
        value = n.host.get(fact.key)
        key = _key(value)
        groups.setdefault(key, []).append(n.name)
        shown[key] = fact.show(value) if value is not None else "unknown"
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    return Drift(fact, tuple((shown[k], tuple(v)) for k, v in ordered))


def _problems(node: NodeResult) -> list[Problem]:
    out: list[Problem] = []
    missing = node.host.get("missing_ifnames") or {}
    for var, value in sorted(missing.items()):
        out.append(
            Problem(
                node.name,
                f"{var}={value} names no network interface of this node",
                f"export {var} as one of this node's interfaces (`ip -br link`), the same "
                "network on every node",
            )
        )
    if node.host.get("master_addr_resolves") is False:
        addr = node.host.get("master_addr")
        out.append(
            Problem(
                node.name,
                f"MASTER_ADDR={addr} does not resolve on this node",
                "set MASTER_ADDR to the head node's IP address, or add its name to /etc/hosts "
                "on every node",
            )
        )
    return out


def compare(nodes: list[NodeResult]) -> FleetReport:
    """The drift among `nodes` (each fact that is not the same everywhere) and each node's own
    network problems."""
    drift = [d for d in (_drift(f, nodes) for f in FACTS) if d is not None]
    problems = [p for n in nodes for p in _problems(n)]
    return FleetReport(tuple(nodes), tuple(drift), tuple(problems))


def fleet_report(directory: Path) -> FleetReport:
    """Read the gathered doctor results in `directory` and compare them."""
    return compare(load_results(directory))
