"""The fleet report: the results gathered from every node of a cluster (one file per node, as the
Slurm or Ansible install writes them, or a plain `doctor --json` with --doctor-only), checked and
compared. A node agrees only on evidence: its install record (the exit code), each of its
doctor's checks (never the `ok` flag alone), its live environment fingerprint and the hash of the
bundle it installed, each present and equal to the run's; a missing, stale or failed node is
named in one line. Ray and NCCL also need the nodes to agree on the driver, CUDA, GPUs, glibc,
Python's patch version, the installed distributions and bundle, and the variables that change a
run; a difference is drift named with the nodes on each side; each with its fix. Reading is
results.py, --expect is hostlist.py, rendering is cli/render/results.py; `fleet_report(DIR,
EXPECT)` is the core."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from verl_bundle.airgap.checks import STATUSES
from verl_bundle.airgap.doctor.node import run_var, shown_value
from verl_bundle.airgap.errors import EXIT_CODES, EXIT_NOT_READY
from verl_bundle.cluster.fleet import hostlist
from verl_bundle.cluster.fleet.results import FleetError, NodeResult, Run, load

__all__ = ["FleetError", "FleetReport", "NodeResult", "compare", "exit_words", "fleet_report"]

GIB = 1 << 30
SHA256 = re.compile(r"[0-9a-f]{64}")
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


@dataclass(frozen=True)
class Problem:
    """What stops one node (its install, its doctor, its network), or the whole run (`node`
    None: which nodes or which run the results are cannot be told)."""

    node: str | None
    what: str
    fix: str


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[NodeResult, ...]
    drift: tuple[Drift, ...]
    problems: tuple[Problem, ...]
    run: str | None = None  # this run's id (None: the results carry none)
    expected: tuple[str, ...] | None = None  # None: no list of nodes to expect
    missing: tuple[str, ...] = ()
    uncompared: tuple[str, ...] = ()  # --doctor-only: nodes with no install record to compare
    images: tuple[str, ...] = ()  # nodes on a read-only image: the image's install record

    @property
    def ok(self) -> bool:
        """Every expected node reported in this run and passed, and no drift."""
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


def _changed(node: NodeResult) -> list[Problem]:
    """A node whose environment changed since its own install (seen with one node too)."""
    changed = node.host.get("changed_since_install") or []
    if not changed:
        return []
    shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
    return [
        Problem(
            node.name,
            f"changed since its install: {shown}",
            "on the node, run the bundle's ./install.sh --repair with the same --prefix: it "
            "reinstalls exactly what differs, offline",
        )
    ]


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


def _network(node: NodeResult) -> list[Problem]:
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


def exit_words(rc: int) -> str:
    """What an install's exit code means, in the server program's own words (EXIT_CODES, up to
    its first colon); a signal's name past 128."""
    if rc in EXIT_CODES:
        return EXIT_CODES[rc].split(": ", 1)[0]
    if rc > 128:
        try:
            return f"killed by {signal.Signals(rc - 128).name}"
        except ValueError:
            return f"killed by signal {rc - 128}"
    return "not one of install.sh's exit codes: read its log"


def _install(node: NodeResult) -> list[Problem]:
    """The node's install record: present (for a result the engines wrote) and exit 0."""
    log = f" ({node.install_log} on {node.name})" if node.install_log else ""
    if node.install_rc is None:
        if not node.engine:
            return []  # a plain doctor result, read with --doctor-only: said in the verdict
        return [
            Problem(
                node.name,
                "no install record (result.install.rc): what its install did cannot be told",
                "run the slurm or ansible install again; it writes the record on every node",
            )
        ]
    if node.install_rc == 0:
        return []
    rc = node.install_rc
    what = "installed, not ready to train" if rc == EXIT_NOT_READY else "install failed"
    step = f": {node.install_error}" if node.install_error else ""
    return [
        Problem(
            node.name,
            f"{what}: exit {rc} ({exit_words(rc)}){step}",
            f"read its log{log}, fix what it names, and run the install again",
        )
    ]


def _doctor(node: NodeResult) -> list[Problem]:
    """The node's doctor: a result with checks, each passing; its `ok` and its exit code must
    agree with them (a result that says ok over a failed check is not the doctor's own)."""
    log = f" ({node.install_log} on {node.name})" if node.install_log else ""
    run_it = "run ./doctor --prefix PREFIX on the node: each failure is shown with its fix"
    if node.doctor_error is not None:
        return [
            Problem(
                node.name,
                f"{node.doctor_error.split(';')[0]}",
                f"read {node.name}.doctor.err, or run ./doctor --json --prefix PREFIX on the node",
            )
        ]
    if node.ok is None and not node.checks:
        code = f" (doctor exit {node.doctor_rc})" if node.doctor_rc is not None else ""
        return [
            Problem(
                node.name,
                f"no doctor result{code}",
                f"the install left no bundle to run the doctor from; read its log{log}",
            )
        ]
    failed = [cid for cid, status in node.checks if status == "fail"]
    odd = [f"{cid} ({status[:16]!r})" for cid, status in node.checks if status not in STATUSES]
    out: list[Problem] = []
    if failed:
        out.append(Problem(node.name, f"the doctor found failures: {', '.join(failed)}", run_it))
    if odd:
        out.append(
            Problem(
                node.name,
                f"doctor check(s) with no known status: {', '.join(odd)}",
                "gather the doctor's own --json output (checks are ok, warn, fail, skip or "
                "untested)",
            )
        )
    if not node.checks:
        out.append(Problem(node.name, "the doctor result holds no checks", run_it))
    if node.ok is not True and not failed:
        said = "not ok" if node.ok is False else "no verdict"
        out.append(
            Problem(node.name, f"the doctor result says {said} and names no failure", run_it)
        )
    if node.ok is True and failed:
        out.append(
            Problem(
                node.name,
                f"the doctor result says ok over the failed check(s) {', '.join(failed)}: not "
                "the doctor's own result",
                run_it,
            )
        )
    if node.engine and node.doctor_rc is None:
        out.append(Problem(node.name, "no doctor exit code recorded (result.doctor_rc)", run_it))
    elif node.doctor_rc not in (None, 0) and not failed:
        out.append(
            Problem(
                node.name,
                f"the doctor exited {node.doctor_rc} but its result names no failure",
                f"read {node.name}.doctor.err, or {run_it}",
            )
        )
    return out


def _fingerprint(node: NodeResult) -> list[Problem]:
    """The live fingerprint: present, and (for an install) equal to the one its install
    recorded, or the change is named (`_changed`)."""
    live = node.host.get("fingerprint")
    if node.ok is None and not node.checks:
        return []  # no doctor result: said already
    if not isinstance(live, str) or not SHA256.fullmatch(live):
        return [
            Problem(
                node.name,
                "no live environment fingerprint: the doctor found no installed environment "
                "under the prefix",
                "run the doctor with --prefix PREFIX (the slurm and ansible installs do); a node "
                "with nothing installed there needs the install",
            )
        ]
    recorded = node.host.get("installed_fingerprint")
    if recorded is None:
        if not node.engine and not node.on_image:
            return []
        where = "its image holds" if node.on_image else "its install recorded"
        return [
            Problem(
                node.name,
                f"{where} no fingerprint (PREFIX/.verl-bundle/fingerprint)",
                "run the install again: its last step records the environment it leaves",
            )
        ]
    if recorded != live and not node.host.get("changed_since_install"):
        return [
            Problem(
                node.name,
                f"its live fingerprint {live[:12]} is not the {str(recorded)[:12]} its install "
                "recorded",
                "on the node, run the bundle's ./install.sh --repair with the same --prefix",
            )
        ]
    return []


def _bundle(node: NodeResult, run: Run | None) -> list[Problem]:
    """The bundle a node installed: named (for an install) and the run's."""
    if not node.engine:
        return []
    if node.bundle is None:
        return [
            Problem(
                node.name,
                "no bundle hash recorded (the install left no SHA256SUMS to hash)",
                "read its log: the bundle was not unpacked there; run the install again",
            )
        ]
    if run is not None and run.bundle and node.bundle != run.bundle:
        return [
            Problem(
                node.name,
                f"its bundle {node.bundle[:12]} is not the run's {run.bundle[:12]}",
                "the tarball that node read is another bundle's: put the tarball on storage "
                "every node sees and install again",
            )
        ]
    return []


def _failed(node: NodeResult, run: Run | None) -> list[Problem]:
    """This node's own failures: its install, its doctor, its fingerprint, its bundle."""
    return _install(node) + _doctor(node) + _fingerprint(node) + _bundle(node, run)


def _current_run(nodes: list[NodeResult], run: Run | None) -> tuple[str | None, list[Problem]]:
    """The run the report is about: the run's record, else the one run every result names;
    results of several runs and no record cannot tell (never chosen by a file's time)."""
    if run is not None:
        return run.run, []
    runs = sorted({n.run for n in nodes if n.run})
    if len(runs) <= 1:
        return (runs[0] if runs else None), []
    shown = ", ".join(runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
    return None, [
        Problem(
            None,
            f"results of runs {shown} and no .run.json: which is this run's cannot be told",
            "gather each run into its own directory (the slurm and ansible installs write "
            ".run.json there), or remove the other runs' files",
        )
    ]


def _expected(nodes: list[NodeResult], expected: list[str] | None) -> list[Problem]:
    """Without a list of the nodes to expect, a node that never reported is not seen: a run
    of installs needs one (.run.json, or --expect)."""
    if expected is not None or not any(n.engine for n in nodes):
        return []
    return [
        Problem(
            None,
            "which nodes this run had is unknown (no .run.json and no --expect): a node that "
            "never reported cannot be seen",
            "pass --expect NODES (gpu[01-04], a list or a file of names), or gather into the "
            "directory the install wrote .run.json to",
        )
    ]


def compare(
    nodes: list[NodeResult], run: Run | None = None, expected: list[str] | None = None
) -> FleetReport:
    """Each node's standing (stale, unexpected, failed), the expected nodes that did not
    report, each node's network problems, and the drift among this run's nodes."""
    current, problems = _current_run(nodes, run)
    problems += _expected(nodes, expected)
    live: list[NodeResult] = []
    for n in nodes:
        other = current is not None and n.run != current
        if expected is not None and n.name not in expected:
            of = f" (a result of run {n.run or '(none)'})" if other else ""
            problems.append(
                Problem(
                    n.name,
                    f"not one of the expected nodes{of}",
                    "remove its file, or gather each run into its own directory",
                )
            )
        elif other:
            problems.append(
                Problem(
                    n.name,
                    f"stale: a result of run {n.run or '(none)'}, not of this run {current}",
                    "its install did not report in this run: read the job's (or the play's) "
                    "output for this node, and run the install again",
                )
            )
        else:
            live.append(n)
            problems += _failed(n, run) + _changed(n) + _network(n)
    reported = {n.name for n in live}
    missing = [name for name in expected or [] if name not in reported]
    stale = {n.name for n in nodes if n not in live}
    for name in missing:
        if name not in stale:
            problems.append(
                Problem(
                    name,
                    "missing: no result from this node",
                    "its install never reported: read the job's (or the play's) output for "
                    "this node (down, unreachable, killed), and run the install again",
                )
            )
    drift = [d for d in (_drift(f, live) for f in (*FACTS, BUNDLE)) if d is not None]
    drift = [
        replace(d, detail=_distributions(live)) if d.fact.key == "fingerprint" else d for d in drift
    ]
    drift += _env_drift(live)
    return FleetReport(
        tuple(nodes),
        tuple(drift),
        tuple(problems),
        current,
        tuple(expected) if expected is not None else None,
        tuple(missing),
        tuple(n.name for n in live if n.install_rc is None and not n.engine and not n.on_image),
        tuple(n.name for n in live if n.on_image),
    )


def fleet_report(
    directory: Path, expect: str | None = None, doctor_only: bool = False
) -> FleetReport:
    """Read the results gathered in `directory` and compare them; the expected nodes are
    `expect` (a list, Slurm's hostlist or a file), else the run's own list. Plain `doctor
    --json` results carry no install record: they are compared only with `doctor_only` (and
    the verdict says their installs were not), never agreed on silently."""
    gathered = load(directory)
    # A node on a read-only image is installed by the image: its doctor result carries the
    # record the install wrote into it (checked against the live fingerprint).
    plain = [n for n in gathered.nodes if not n.engine and not n.on_image]
    if plain and not doctor_only:
        raise FleetError(
            f"{plain[0].source}: a plain doctor result, with no install record: compare "
            "hand-gathered doctor results with `fleet report --doctor-only` (their installs are "
            "then not compared), or gather the results the slurm or ansible install writes"
        )
    if expect is not None:
        expected: list[str] | None = hostlist.read_expect(expect)
    elif gathered.run is not None and gathered.run.expect:
        expected = list(gathered.run.expect)
    else:
        expected = None
    return compare(list(gathered.nodes), gathered.run, expected)
