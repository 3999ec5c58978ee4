"""The doctor: check this server against a bundle's needs before anything is installed.

It runs on the server's own python3 (3.8 or newer, standard library only). Probes fill one
`Facts` value (facts.py); each check is one registered function (registry.py) in a module of
its domain; each ends ok, warn or fail, and a warn or fail carries a fix that can be applied
on an air-gapped server. Every external command runs with a timeout, so a hung driver cannot
hang the doctor: a timeout is a finding, not a crash.

`run_doctor(manifest, ...)` takes the typed `Manifest` (or None: the host checked on its own,
without a bundle) and returns a `Report`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.contract.manifest import MANIFEST, SUMS, Manifest, find_root
from verl_bundle.airgap.doctor.catalog import registered
from verl_bundle.airgap.doctor.commands import TIMEOUT, Run, run
from verl_bundle.airgap.doctor.devices import TORCHRUN_VARS, torchrun_problems, visible_devices
from verl_bundle.airgap.doctor.facts import Facts, gather
from verl_bundle.airgap.doctor.gpus import parse_apps, parse_gpus
from verl_bundle.airgap.doctor.registry import STATUSES, Options, Plan, run_checks
from verl_bundle.airgap.doctor.report import Report, host_of, render_json, render_text
from verl_bundle.airgap.doctor.resources import max_jobs
from verl_bundle.airgap.doctor.versions import parse_version, version_matches

__all__ = [
    "STATUSES",
    "TIMEOUT",
    "TORCHRUN_VARS",
    "Check",
    "Facts",
    "Options",
    "Plan",
    "Report",
    "Run",
    "examine",
    "gather",
    "locate",
    "max_jobs",
    "parse_apps",
    "parse_gpus",
    "parse_version",
    "registered",
    "render_json",
    "render_text",
    "run",
    "run_doctor",
    "torchrun_problems",
    "version_matches",
    "visible_devices",
]


def examine(plan: Plan, facts: Facts, opts: Options) -> Report:
    """The registered checks over gathered facts (generic ones only without a bundle)."""
    prefix = opts.prefix or ""
    existing = (
        prefix if prefix and os.access(os.path.join(prefix, "bin", "python"), os.X_OK) else ""
    )
    checks = run_checks(registered(), plan, facts, opts)
    return Report(checks, host_of(facts), plan.generic, existing)


def run_doctor(
    manifest: Manifest | None,
    python: str | None = None,
    prefix: str | None = None,
    require_gpu: bool = False,
    skip_phases: Sequence[str] = (),
    deep: bool = False,
) -> Report:
    """Examine this server against `manifest` less the `skip_phases` (None: no bundle, the
    host on its own). UsageError for a phase the bundle does not have. `deep` hashes every
    installed file under `prefix` for the environment fingerprint."""
    plan = Plan.of(manifest, skip_phases)
    opts = Options(python, prefix, require_gpu)
    return examine(plan, gather(python, prefix, deep), opts)


def _own_bundle() -> str | None:
    """The bundle this code sits in (<bundle>/lib/verl_bundle/airgap/doctor/), if any."""
    parents = Path(__file__).resolve().parents
    if len(parents) > 4 and parents[3].name == "lib" and (parents[4] / MANIFEST).is_file():
        return str(parents[4])
    return None


def _is_bundle(path: Path) -> bool:
    return (path / MANIFEST).is_file() and (path / SUMS).is_file()


def locate(bundle: str | None) -> str | None:
    """The bundle directory to check: `bundle` (or the one bundle inside it), else the bundle
    this code sits in, else the extracted bundle the current directory is in; None: none."""
    if bundle is not None:
        return find_root(bundle)
    own = _own_bundle()
    if own is not None:
        return own
    here = Path.cwd()
    return next((str(p) for p in (here, *here.parents) if _is_bundle(p)), None)
