"""What every node of a run must agree on (Ray and NCCL need it): the driver, CUDA, GPUs, glibc,
Python's patch version, the installed distributions and bundle, and the variables that change a
run. A difference is a `Drift`: each value seen with the nodes that have it, and its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from verl_bundle.airgap.doctor.node import run_var, shown_value
from verl_bundle.cluster.fleet.results import NodeResult

GIB = 1 << 30
SHOWN = 120  # characters of a value shown in a drift line
SHOWN_DISTS = 10  # distributions named under a fingerprint drift


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
    detail: tuple[str, ...] = ()  # what differs inside the fact (the distributions)


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
        "same distributions at the same versions, with the same files",
        SAME + "; on a node where a distribution was removed or a file changed (named below), "
        "run the bundle's ./install.sh --repair with the same --prefix",
        _short,
    ),
    Fact(
        "image",
        "how the environment is provided",
        "a node running its own venv copy where the others mount the shared image (or the "
        "reverse) runs files nobody compared",
        "mount the same image at the prefix on every node (squashfuse FILE PREFIX), or "
        "install into a directory on every node",
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


BUNDLE = Fact(
    "bundle",
    "bundle (its SHA256SUMS)",
    "nodes that installed different bundles run different code",
    SAME,
    _short,
)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _groups(
    fact: Fact, values: list[tuple[str, Any]], show_missing: str = "unknown"
) -> Drift | None:
    groups: dict[str, list[str]] = {}
    shown: dict[str, str] = {}
    for name, value in values:
        key = _key(value)
        groups.setdefault(key, []).append(name)
        shown[key] = fact.show(value)[:SHOWN] if value is not None else show_missing
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    return Drift(fact, tuple((shown[k], tuple(v)) for k, v in ordered))


def _drift(fact: Fact, nodes: list[NodeResult]) -> Drift | None:
    get: Callable[[NodeResult], Any] = (
        (lambda n: n.bundle) if fact is BUNDLE else (lambda n: n.host.get(fact.key))
    )
    return _groups(fact, [(n.name, get(n)) for n in nodes])


def _distributions(nodes: list[NodeResult]) -> tuple[str, ...]:
    """Under a fingerprint drift: each distribution whose entry differs, with the nodes on
    each side ("not installed" where a node lacks it)."""
    maps = [(n.name, n.host.get("distributions")) for n in nodes]
    known = [(name, m) for name, m in maps if isinstance(m, dict)]
    if len(known) < 2:
        return ()
    lines = []
    for dist in sorted({d for _, m in known for d in m}):
        groups: dict[str, list[str]] = {}
        for name, m in known:
            groups.setdefault(str(m.get(dist, "not installed")), []).append(name)
        if len(groups) > 1:
            ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
            lines.append(
                f"{dist}: " + "; ".join(f"{v[:SHOWN]} on {', '.join(ns)}" for v, ns in ordered)
            )
    if len(lines) > SHOWN_DISTS:
        lines = [*lines[:SHOWN_DISTS], f"... and {len(lines) - SHOWN_DISTS} more distribution(s)"]
    return tuple(lines)


def _env_fact(var: str) -> Fact:
    """A run-changing variable as a fact, with the why of its entry in the doctor's table
    (doctor/node.py RUN_VARS)."""
    entry = run_var(var)
    why = entry.why if entry else "it changes a run"
    fix = (
        f"set {var} the same on every node (in the job script, not one node's profile) or unset it"
    )
    return Fact(f"env:{var}", var, why, fix)


def _env_drift(nodes: list[NodeResult]) -> list[Drift]:
    """One drift per run-changing variable that differs (unset counts as a value); a secret's
    value is compared and shown as its hash (NCCL/GLOO_SOCKET_IFNAME are the doctor's
    socket_ifnames)."""
    recorded = [n for n in nodes if n.env is not None]
    names = sorted({var for n in recorded for var in n.env or {} if run_var(var) is not None})
    found = []
    for var in names:
        values = [(n.name, (n.env or {}).get(var)) for n in recorded]
        shown = [(name, None if v is None else shown_value(var, v)) for name, v in values]
        found.append(_groups(_env_fact(var), shown, "unset"))
    return [d for d in found if d is not None]


def drift_among(nodes: list[NodeResult]) -> list[Drift]:
    """Every fact, the bundle and each run-changing variable on which `nodes` differ; under a
    fingerprint drift, the distributions that differ."""
    found = [d for d in (_drift(f, nodes) for f in (*FACTS, BUNDLE)) if d is not None]
    found = [
        replace(d, detail=_distributions(nodes)) if d.fact.key == "fingerprint" else d
        for d in found
    ]
    return found + _env_drift(nodes)
