"""Post-install checks, run by the installed environment's own python.

What the bundle promised must be what is there: every packaged distribution at its version,
the profile's imports working, torch the expected build (version, CUDA, C++ ABI matching the
flash-attn wheel), and whether verl's trainer can start (readiness). The distributions'
metadata is read here (installed.py); everything that imports them is found by the readiness
probe, in one isolated interpreter, and judged in judge.py and readiness.py. The findings come
back as typed `Check`s in two groups (what is installed, whether it can train) for the one
verdict; the installer reads them from the JSON envelope `--result FILE` writes.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from verl_bundle.airgap.checks import Check, Verdict, failures, verdict
from verl_bundle.airgap.contract.manifest import Manifest
from verl_bundle.airgap.postinstall import dryrun, installed, judge, readiness
from verl_bundle.airgap.postinstall import probing as run
from verl_bundle.airgap.postinstall.dryrun import DryRunRequest
from verl_bundle.airgap.postinstall.readiness import Facts

# Printed by setuptools' distutils shim when something imports distutils after setuptools: noise
# for a user, not a finding.
DISTUTILS_NOISE = "Setuptools is replacing distutils"


@dataclass(frozen=True)
class Findings:
    """Post-install's checks in the verdict's two groups: `installed` (is it there as bundled)
    and `readiness` (can the trainer start); `purpose` is what readiness proves ("" for a
    bundle without verl), `limit` the profile's declared known limit."""

    installed: tuple[Check, ...]
    readiness: tuple[Check, ...]
    purpose: str = ""
    limit: str = ""

    @property
    def verdict(self) -> Verdict:
        return verdict(
            installed=self.installed,
            readiness=self.readiness,
            purpose=self.purpose,
            limit=self.limit,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "installed": [c.to_dict() for c in self.installed],
            "readiness": [c.to_dict() for c in self.readiness],
            "purpose": self.purpose,
            "limit": self.limit,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Findings:
        """Read back from the envelope's result; ValueError for anything malformed."""
        groups = []
        for key in ("installed", "readiness"):
            items = data.get(key)
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ValueError(f"{key!r} is not a list of checks")
            groups.append(tuple(Check.from_dict(i) for i in items))
        purpose, limit = data.get("purpose", ""), data.get("limit", "")
        if not isinstance(purpose, str) or not isinstance(limit, str):
            raise ValueError("purpose and limit must be strings")
        return cls(groups[0], groups[1], purpose, limit)


def run_checks(
    manifest: Manifest,
    require_gpu: bool = False,
    skip_phases: Sequence[str] = (),
    files: bool = False,
    python: str = sys.executable,
    deep: DryRunRequest | None = None,
    uv: str | None = None,
) -> Findings:
    """All post-install checks. `manifest` is the whole bundle: the phases left out
    (`skip_phases`) are not installed, so their distributions are not asked for, but every module
    readiness needs is still imported, and one that a skipped phase would have brought makes
    the trainer not ready, saying so. Every heavy import (the profile's checks, readiness's
    trainer modules, torch's build, the GPU smoke test) happens once, in one isolated probe
    interpreter (probing.probe); the pip check runs beside it as its own subprocess, and this
    process reads the installed metadata meanwhile. `deep`: then the trainer dry run
    (dryrun.py), when nothing before it already failed. With `uv` (the bundled one), the
    requirements check is its `uv pip check`, the same run the readiness pip check reads,
    instead of pip's own requirement parser imported here."""
    m = manifest.without_phases(list(skip_phases))
    table = readiness.load_table()
    flash = m.has("flash-attn")  # installed: only then is it called in the GPU smoke test
    # The whole bundle's verl: a phase left out that holds it leaves a trainer that cannot start.
    plan = readiness.plan_for(manifest, None, table, skip_phases) if manifest.has("verl") else None
    asked = (
        dataclasses.replace(plan, flash_attn=flash)
        if plan
        else readiness.Plan("", (), "", flash, None)
    )
    c = m.checks
    torch = bool(c.torch_version or c.torch_cuda or c.flash_attn_wheel)
    with ThreadPoolExecutor(max_workers=2) as pool:
        probing = pool.submit(
            run.probe,
            python,
            asked,
            require_gpu and plan is not None,
            1800,
            c.imports,
            torch,
            flash,
        )
        pip = (
            pool.submit(run.pip_check, python, uv, c.overrides) if plan is not None or uv else None
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=DISTUTILS_NOISE)
            found = installed.check_versions(m)
            if files:
                found += installed.check_files(m)
            requirements = installed.check_requirements() if uv is None else []
        pipped = pip.result() if pip is not None else None
        if uv is not None and pipped is not None:
            requirements = [installed.requirements_of(pipped)]
        try:
            facts: Facts = probing.result()
        except readiness.ReadinessError as exc:
            return _unprobed(found + requirements, plan, require_gpu, str(exc))
    found += judge.check_imports(facts) + judge.check_torch(c, facts) + requirements
    gpu = judge.check_gpu(require_gpu, flash, facts)
    if plan is None or pipped is None:
        return Findings(tuple(found), tuple(gpu))
    report = readiness.report(manifest, plan, facts, pipped, table, run.unlisted_check(facts))
    kept, ready = readiness.left_out_findings(plan, found, report.checks + tuple(gpu))
    found = list(kept)
    if deep is not None:
        before = (*found, *ready)
        ready += tuple(run.dry_run_checks(python, plan, facts, before, deep))
    elif plan.verl is not None and not failures((*found, *ready)):
        # The trainer never started: never a bare "ready" (with a failure, it is not ready).
        has = dryrun.has_recipe(manifest)
        ready += (run.not_started() if has else run.no_recipe(plan.verl),)
    return Findings(tuple(found), ready, report.purpose, report.limit)


def _unprobed(
    found: list[Check], plan: readiness.Plan | None, require_gpu: bool, error: str
) -> Findings:
    """The probe could not run at all (no interpreter, a crash before any result)."""
    found.append(
        Check(
            "imports", "fail", f"the import checks could not run: {error}", fix="rerun ./install.sh"
        )
    )
    ready = [Check("gpu", "fail" if require_gpu else "skip", f"cannot ask torch: {error}")]
    if plan is not None:
        ready.append(Check("readiness", "fail", f"readiness: {error}", fix="rerun ./install.sh"))
    return Findings(tuple(found), tuple(ready), plan.purpose if plan else "")
