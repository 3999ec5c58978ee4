"""Running readiness in the target interpreter: the probe (probe.py, isolated) and
the pip check, each a subprocess, the pip check started while the probe imports.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from verl_bundle.airgap.checks import Check, failures
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.postinstall import dryrun, dryrun_report, overrides
from verl_bundle.airgap.postinstall.dryrun import DryRunRequest
from verl_bundle.airgap.postinstall.readiness import (
    OFFLINE_ENV,
    PROBE,
    Facts,
    Plan,
    ReadinessError,
    ReadinessReport,
    load_table,
    plan_for,
    report,
)

# uv's lines around its findings ("Using Python 3.10.13 environment at: ...", "Checked 268
# packages in 3ms", "Found 1 incompatibility"): not findings.
_UV_HEADER = ("Using Python ", "Checked ", "Found ")


def pip_check(python: str, uv: str | None = None, overridden: Sequence[str] = ()) -> Check:
    """The installed set's consistency: `uv` (the bundled one, which the installer passes),
    else the uv next to the interpreter, else pip (a second interpreter start and pip's own
    imports: seconds on a real stack, where uv takes milliseconds). A finding that one of the
    stack's own overrides explains (`overridden`, the manifest's) is said, not failed."""
    uv = uv or os.path.join(os.path.dirname(python), "uv")
    if os.access(uv, os.X_OK):
        # --no-cache: nothing written outside the environment (uv would keep its cache in HOME).
        cmd, tool = [uv, "pip", "check", "--no-cache", "--python", python], "uv pip check"
    else:
        # -I: the environment's own packages only, never a PYTHONPATH of the caller's.
        cmd, tool = [python, "-I", "-m", "pip", "check"], "pip check"
    env = dict(os.environ, **OFFLINE_ENV)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("pip-check", "skip", f"{tool} could not run: {exc}", subject=tool)
    text = (run.stdout + run.stderr).strip()
    if run.returncode == 0:
        return Check("pip-check", "ok", "no broken requirements", subject=tool)
    if "No module named pip" in text:
        return Check("pip-check", "skip", "neither uv nor pip in this environment", subject=tool)
    found = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(_UV_HEADER)]
    table = overrides.parse(overridden)
    meant = [why for ln in found if (why := overrides.accepted(ln, table))]
    lines = [ln for ln in found if not overrides.accepted(ln, table)][:5]
    if meant and not lines:
        return Check(
            "pip-check",
            "ok",
            "no broken requirements but the stack's own overrides: " + "; ".join(meant),
            subject=tool,
        )
    return Check(
        "pip-check",
        "fail",
        "; ".join(lines),
        "installed packages do not satisfy each other's requirements",
        "rerun ./install.sh (it reinstalls unfinished phases); if it persists, the bundle's "
        "lock is inconsistent: rebuild it",
        tool,
    )


def probe(
    python: str,
    plan: Plan,
    require_gpu: bool,
    timeout: float = 1800,
    checks: Sequence[str] = (),
    torch: bool = False,
    smoke: bool = False,
) -> Facts:
    """Run probe.py in `python` (isolated: no PYTHONPATH, no user site, no cwd, none
    of the installer's code), so the trainer's modules import as the trainer would see them.
    `checks`, `torch` and `smoke` add post-install's imports, torch's build and its GPU smoke
    test to the same run: each heavy module is imported once, in this one interpreter."""
    spec = {
        "modules": list(plan.modules),
        "config": plan.config,
        "gpu": require_gpu,
        "flash_attn": plan.flash_attn,
        "checks": list(checks),
        "torch": torch,
        "smoke": smoke,
    }
    with tempfile.TemporaryDirectory(prefix="verl-readiness-") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        with open(spec_path, "w", encoding="utf-8") as fh:
            json.dump(spec, fh)
        env = dict(os.environ, **OFFLINE_ENV)
        try:
            # Not -B: the probe imports the whole stack once, from source in a fresh venv
            # (uv writes no bytecode), and keeps the bytecode it compiles (written on a
            # thread: probe.BytecodeWriter), so every later import of those modules (each Ray
            # worker's) loads it instead of compiling again.
            run = subprocess.run(
                [python, "-I", PROBE, spec_path, out_path],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                cwd=tmp,
            )
        except OSError as exc:
            raise ReadinessError(f"cannot run {python}: {exc.strerror or exc}") from None
        except subprocess.TimeoutExpired:
            raise ReadinessError(
                f"the readiness probe in {python} ran over {timeout:.0f} s; rerun with --timeout"
            ) from None
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        if not os.path.isfile(out_path):
            raise ReadinessError(
                f"the readiness probe in {python} exited {run.returncode} without a result: "
                f"{tail[0]}"
            )
        with open(out_path, encoding="utf-8") as fh:
            facts: Facts = json.load(fh)
    if run.returncode != 0:  # it died in the GPU smoke test, after saving what came before
        crash = {"ok": False, "type": "Crashed", "error": f"exited {run.returncode}: {tail[0]}"}
        for key, asked in (("gpu", require_gpu), ("smoke", smoke)):
            if asked and key not in facts:
                facts[key] = crash
    return facts


def unlisted_check(facts: Facts) -> Check:
    """The `unlisted` check of the environment the probe ran in (its sys.prefix)."""
    from verl_bundle.airgap.doctor import unlisted

    prefix = facts.get("prefix")
    return unlisted.check(prefix if isinstance(prefix, str) else None)


def run_readiness(
    manifest: mf.Manifest,
    python: str,
    require_gpu: bool = False,
    purpose: str | None = None,
    timeout: float = 1800,
    deep: DryRunRequest | None = None,
    skip_phases: Sequence[str] = (),
) -> ReadinessReport:
    """Prove the installed environment of `python` can start the bundle's trainer. The pip
    check (a subprocess of its own) runs while the probe imports. `deep`: then start verl's
    own trainer on a tiny model and dataset (the trainer dry run), when the probe found
    nothing that already stops it. `skip_phases`: phases left out of the install, whose missing
    modules are said as left out."""
    table = load_table()
    plan = plan_for(manifest, purpose, table, skip_phases)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pip = pool.submit(pip_check, python, None, manifest.checks.overrides)
        facts = probe(python, plan, require_gpu, timeout)
        found = report(manifest, plan, facts, pip.result(), table, unlisted_check(facts))
    if deep is None:
        if plan.verl is None or failures(found.checks):  # not ready already says enough
            return found
        started = (not_started(),) if dryrun.has_recipe(manifest) else (no_recipe(plan.verl),)
        return dataclasses.replace(found, checks=found.checks + started)
    extra = dry_run_checks(python, plan, facts, found.checks, deep)
    return dataclasses.replace(found, checks=found.checks + tuple(extra))


def not_started() -> Check:
    """The trainer's start, not proven by readiness without --deep."""
    return dryrun_report.not_started(
        "readiness --deep", "run readiness again with --deep (minutes: verl's own trainer, offline)"
    )


def no_recipe(verl: str) -> Check:
    return dryrun_report.no_recipe(verl)


# Failures that stop verl's entry before its first step: then the dry run cannot tell more.
# Others (flash_attn missing, a rollout that does not import) leave it worth running: it shows
# how far the trainer gets regardless, e.g. up to the model load that needs flash-attn.
STOPPERS = ("import:verl.trainer.main_ppo", "config")


def dry_run_checks(
    python: str, plan: Plan, facts: Facts, before: Sequence[Check], deep: DryRunRequest
) -> list[Check]:
    """The trainer dry run's checks, after readiness's own (`before`): not run when those
    show that verl's entry cannot start at all, or this verl release has no recipe."""
    if plan.verl is None:
        return []
    stopped = [c for c in before if c.status == "fail" and c.id in STOPPERS]
    if stopped:
        why = f"{stopped[0].about} failed above, so verl's entry cannot start"
        return [dryrun_report.unavailable(why)]
    gpus = int(facts.get("gpu_count") or 0) if facts.get("gpu_visible") else 0
    table = dryrun.load_table()
    run = dryrun.run_dry(python, plan.verl, dataclasses.replace(deep, gpus=gpus), table)
    if run is None:
        return [dryrun_report.no_recipe(plan.verl)]
    return dryrun_report.checks(run, table)
