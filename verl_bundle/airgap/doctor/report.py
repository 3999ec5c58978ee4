"""The doctor's result, and how it is shown: the shared checks table of airgap/render.py for
people, and one JSON result (wrapped in the versioned envelope by whoever prints it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import Check, Verdict, verdict
from verl_bundle.airgap.doctor.facts import Facts
from verl_bundle.airgap.doctor.versions import cuda_name


@dataclass(frozen=True)
class Report:
    checks: list[Check]
    host: dict[str, Any] = field(default_factory=dict)
    generic: bool = False  # no bundle: the host was checked on its own
    existing: str = ""  # --prefix holds an installed environment (its readiness is not ours)

    @property
    def ok(self) -> bool:
        """No check failed (warnings do not stop an install)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def verdict(self) -> Verdict:
        """Ready to install (exit 0) or not (exit 4), from the one verdict function."""
        return verdict(server=self.checks, bundle=not self.generic, existing=self.existing)

    def check(self, check_id: str) -> Check:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)


def host_of(facts: Facts) -> dict[str, Any]:
    """The machine in a few facts, for a fleet report."""
    return {
        "os": facts.distro.name,
        "kernel": facts.system.kernel,
        "arch": facts.system.arch,
        "glibc": facts.system.glibc,
        "python": facts.python.version,
        "python_executable": facts.python.path,
        "cpus": facts.memory.cpus,
        "mem_available": facts.memory.available,
        "gpus": len(facts.gpus.gpus),
        "nvcc": facts.toolkit.version,
        **_node(facts),
    }


def _node(facts: Facts) -> dict[str, Any]:
    """What a fleet report compares across nodes (Ray and NCCL need them to agree)."""
    node, gpus, data = facts.node, facts.gpus.gpus, facts.driver.data
    cuda = int(data.get("version") or 0) if data and "error" not in data else 0
    return {
        "hostname": node.hostname,
        "driver": gpus[0].driver if gpus else None,
        "cuda_driver": cuda_name(cuda) if cuda else None,
        "gpu_models": [f"{g.name} ({g.memory_total} MiB)" for g in gpus],
        "open_files": node.open_files,
        "shm_bytes": node.shm_bytes,
        "socket_ifnames": dict(node.ifnames),
        "missing_ifnames": node.missing_interfaces(),
        "master_addr": node.master_addr,
        "master_addr_resolves": node.master_addr_resolves,
        "fingerprint": node.fingerprint,
        "distributions": node.distributions,
        "installed_fingerprint": node.installed_fingerprint,
        "changed_since_install": list(node.changed),
        "unlisted_since_install": list(node.unlisted) if node.unlisted is not None else None,
        "env": dict(node.env),
        "image": node.image,
    }


def render_text(report: Report) -> str:
    """The checks table, each problem with its fix, and the verdict line last."""
    return render.checks_text(report.checks, f"doctor: {report.verdict.line}")


def render_json(report: Report) -> dict[str, Any]:
    """{"ok", "checks": [{id, status, summary, detail, fix, subject}], "host": {...}}"""
    return {"ok": report.ok, "checks": render.checks_json(report.checks), "host": dict(report.host)}
