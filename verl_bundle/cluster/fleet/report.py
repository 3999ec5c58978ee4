"""The fleet report: the results gathered from every node of a cluster (one file per node, as the
Slurm or Ansible install writes them, or a plain `doctor --json` with --doctor-only), checked and
compared. Which run the results are and which nodes it expects are decided here: a missing,
stale or unexpected node is named in one line with its fix. Each live node's own standing (its
install, doctor, fingerprint, bundle, network) is standing.py's, what the nodes must agree on
is drift.py's; reading is results.py, --expect is hostlist.py, rendering is
cli/render/results.py; `fleet_report(DIR, EXPECT)` is the core."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verl_bundle.cluster.fleet import hostlist
from verl_bundle.cluster.fleet.drift import Drift, drift_among
from verl_bundle.cluster.fleet.results import FleetError, NodeResult, Run, load
from verl_bundle.cluster.fleet.standing import Problem, node_problems

__all__ = ["FleetError", "FleetReport", "NodeResult", "compare", "fleet_report"]


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
    current, found = _current_run(nodes, run)
    found += _expected(nodes, expected)
    live: list[NodeResult] = []
    for n in nodes:
        other = current is not None and n.run != current
        if expected is not None and n.name not in expected:
            of = f" (a result of run {n.run or '(none)'})" if other else ""
            found.append(
                Problem(
                    n.name,
                    f"not one of the expected nodes{of}",
                    "remove its file, or gather each run into its own directory",
                )
            )
        elif other:
            found.append(
                Problem(
                    n.name,
                    f"stale: a result of run {n.run or '(none)'}, not of this run {current}",
                    "its install did not report in this run: read the job's (or the play's) "
                    "output for this node, and run the install again",
                )
            )
        else:
            live.append(n)
            found += node_problems(n, run)
    reported = {n.name for n in live}
    missing = [name for name in expected or [] if name not in reported]
    stale = {n.name for n in nodes if n not in live}
    for name in missing:
        if name not in stale:
            found.append(
                Problem(
                    name,
                    "missing: no result from this node",
                    "its install never reported: read the job's (or the play's) output for "
                    "this node (down, unreachable, killed), and run the install again",
                )
            )
    return FleetReport(
        tuple(nodes),
        tuple(drift_among(live)),
        tuple(found),
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
