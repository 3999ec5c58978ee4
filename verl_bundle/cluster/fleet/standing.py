"""One node's own standing in a run, on evidence: its install record (the exit code), each of its
doctor's checks (never the `ok` flag alone), its live environment fingerprint against the one its
install recorded, the bundle it installed, what changed since, and its network. Each problem is
a `Problem`: one line and its fix."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from verl_bundle.airgap.checks import STATUSES
from verl_bundle.airgap.errors import EXIT_CODES, EXIT_NOT_READY
from verl_bundle.cluster.fleet.results import NodeResult, Run

SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Problem:
    """What stops one node (its install, its doctor, its network), or the whole run (`node`
    None: which nodes or which run the results are cannot be told)."""

    node: str | None
    what: str
    fix: str


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


def node_problems(node: NodeResult, run: Run | None) -> list[Problem]:
    """This node's own problems: its install, its doctor, its fingerprint, its bundle, what
    changed since its install, and its network."""
    return (
        _install(node)
        + _doctor(node)
        + _fingerprint(node)
        + _bundle(node, run)
        + _changed(node)
        + _network(node)
    )
