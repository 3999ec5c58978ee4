"""Ready to train, not just installed: prove offline that verl's trainer can start.

Run by the installed environment's python (`python -m verl_bundle.airgap readiness --bundle
DIR`), or from post-install (which adds its own import checks to the same probe run). The checks
are a registry (one function per id) over one probe run in the target interpreter
(readiness_run.py runs it, and the pip check beside it):
  imports   the trainer's entry point and the modules behind it for the bundle's purpose,
            verl's own vLLM version gate included, and flash_attn where the bundle has it
  config    verl's Hydra config composes and resolves offline (no run is started)
  pip-check the installed set is consistent (the bundled uv's `pip check`, else pip's)
  gpu       with --require-gpu: a CUDA tensor op and a tiny flash-attn call
Which modules: those the manifest's `readiness` value names, else the ones readiness.json
lists for the bundle's verl release. Known errors map to a cause and an offline fix there too.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict

from verl_bundle.airgap import render
from verl_bundle.airgap.contract import manifest as mf

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "readiness.json")
DEFAULT_PURPOSE = "ppo-fsdp-vllm"


@dataclass(frozen=True)
class Check:
    """One readiness finding. status: ok, fail, skip, or untested (needs a GPU to tell)."""

    id: str
    status: str
    summary: str
    subject: str = ""  # the module, config or command the finding is about
    cause: str = ""
    fix: str = ""


@dataclass(frozen=True)
class Plan:
    """What readiness proves for a bundle: its purpose, the modules, the config."""

    purpose: str
    modules: tuple[str, ...]
    config: str
    flash_attn: bool
    verl: str | None


@dataclass(frozen=True)
class ReadinessReport:
    purpose: str
    ready: bool
    checks: tuple[Check, ...]
    limit: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def headline(self) -> str:
        if self.ready:
            untested = [c.subject for c in self.checks if c.status == "untested"]
            tail = f" ({', '.join(untested)}: imports only with a GPU, not proven here)"
            return f"ready: {self.purpose}" + (tail if untested else "")
        first = next(c for c in self.checks if c.status == "fail")
        return f"not ready: {first.subject}: {first.summary}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "purpose": self.purpose,
            "ready": self.ready,
            "headline": self.headline,
            "limit": self.limit,
            "versions": dict(self.versions),
            "checks": [asdict(c) for c in self.checks],
        }


class ReadinessError(Exception):
    """Readiness could not run at all (no interpreter, probe crashed); one line."""


# -- the table -------------------------------------------------------------------------------


def load_table(path: str = TABLE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        table: dict[str, Any] = json.load(fh)
    return table


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def _in_range(version: str, row: dict[str, Any]) -> bool:
    v = _release(version)
    low = _release(row["from"])
    high = _release(row["below"]) if row.get("below") else None
    return v >= low and (high is None or v < high)


def purpose_text(purpose: str, table: dict[str, Any]) -> str:
    return str(table["purposes"].get(purpose, purpose))


def _purpose_id(text: str, table: dict[str, Any]) -> str:
    for pid, words in table["purposes"].items():
        if text in (pid, words):
            return str(pid)
    return DEFAULT_PURPOSE


def plan_for(
    m: mf.Manifest, purpose: str | None = None, table: dict[str, Any] | None = None
) -> Plan:
    """The modules and config readiness checks for this bundle (and `--purpose`, if given)."""
    table = table or load_table()
    verl = next((f.version for f in m.installed if f.name == "verl"), None)
    flash = m.has("flash-attn")
    declared = m.readiness
    if declared.modules and purpose is None:
        modules = declared.modules
        text, config = declared.purpose, declared.config
    else:
        pid = purpose or _purpose_id(declared.purpose, table)
        if pid not in table["purposes"]:
            raise ValueError(
                f"--purpose {pid}: not a known purpose ({', '.join(sorted(table['purposes']))})"
            )
        text = purpose_text(pid, table)
        row = next((r for r in table["verl"] if verl and _in_range(verl, r)), None)
        modules = tuple(row["modules"].get(pid, ())) if row else ()
        config = str(row["config"]) if row else declared.config
    if flash and "flash_attn" not in modules:
        modules = (*modules, "flash_attn")
    return Plan(text, tuple(modules), config if verl else "", flash, verl)


def explain(error: str, table: dict[str, Any] | None = None) -> tuple[str, str]:
    """(cause, fix) for a known import error; a generic pair otherwise."""
    table = table or load_table()
    for entry in table["causes"]:
        hit = re.search(entry["match"], error)
        if hit:
            words = {k: v for k, v in hit.groupdict().items() if v is not None}
            return entry["cause"].format(**words), entry["fix"].format(**words)
    return (
        "the module raised an error at import, so the trainer cannot load it",
        "run the import by hand with the environment's python to see the whole traceback "
        "(python -c 'import MODULE'), then `python -m verl_bundle.airgap explain LOG`",
    )


def _gpu_only(error: str, table: dict[str, Any]) -> bool:
    return any(p["match"] in error for p in table["gpu_only"]["patterns"])


# -- the checks (one function per id) ---------------------------------------------------------

Facts = Dict[str, Any]  # what the probe found (readiness_probe.probe's result)


def check_imports(plan: Plan, facts: Facts, table: dict[str, Any]) -> list[Check]:
    if plan.verl is None:
        return [Check("imports", "skip", "this bundle has no verl: nothing to train with")]
    if not [m for m in plan.modules if m != "flash_attn"]:
        return [
            Check(
                "imports",
                "fail",
                f"no readiness modules known for verl {plan.verl}",
                subject="verl",
                cause="readiness.json lists no modules for this verl release and purpose",
                fix="declare them in the profile's [readiness] modules and rebuild the bundle",
            )
        ]
    out = []
    for item in facts.get("imports", []):
        module = item["module"]
        if item["ok"]:
            out.append(Check(f"import:{module}", "ok", "imports", subject=module))
            continue
        error = f"{item['type']}: {item['error']}"
        if facts.get("gpu_visible") is not True and _gpu_only(error, table):
            out.append(
                Check(
                    f"import:{module}",
                    "untested",
                    f"imports only where a GPU is visible ({error})",
                    subject=module,
                    fix="run readiness on a GPU server (--require-gpu) to prove it",
                )
            )
            continue
        cause, fix = explain(error, table)
        out.append(Check(f"import:{module}", "fail", item["error"], module, cause, fix))
    return out


def check_config(plan: Plan, facts: Facts, table: dict[str, Any]) -> list[Check]:
    got = facts.get("config")
    if not plan.config or got is None:
        return [Check("config", "skip", "no verl config to compose")]
    subject = f"config {plan.config}"
    if got["ok"]:
        return [Check("config", "ok", f"composes offline ({len(got['keys'])} groups)", subject)]
    return [
        Check(
            "config",
            "fail",
            f"{got['type']}: {got['error']}",
            subject,
            cause="verl's Hydra config does not compose or resolve, so main_ppo would stop "
            "before training",
            fix="check that hydra-core and omegaconf are the versions the bundle installed "
            "(pip check), and that verl's package holds trainer/config",
        )
    ]


def check_gpu(plan: Plan, facts: Facts, table: dict[str, Any]) -> list[Check]:
    got = facts.get("gpu")
    if got is None:
        return []
    if got["ok"]:
        what = "a CUDA tensor op" + (" and a flash-attn call" if got.get("flash_attn") else "")
        return [Check("gpu", "ok", f"{what} on {got.get('device', 'the GPU')}", "gpu")]
    return [
        Check(
            "gpu",
            "fail",
            f"{got['type']}: {got['error']}",
            "gpu smoke test",
            cause="the GPU smoke test failed: the trainer would fail on its first CUDA call",
            fix="run the doctor (./doctor --require-gpu) for the driver and visible devices",
        )
    ]


CHECKS: dict[str, Callable[[Plan, Facts, dict[str, Any]], list[Check]]] = {
    "imports": check_imports,
    "config": check_config,
    "gpu": check_gpu,
}


# -- the verdict ---------------------------------------------------------------------------


def verdict(
    manifest: mf.Manifest, plan: Plan, facts: Facts, pip: Check, table: dict[str, Any]
) -> ReadinessReport:
    """The readiness verdict from the probe's facts and the pip check."""
    checks = [c for fn in CHECKS.values() for c in fn(plan, facts, table)]
    checks.append(pip)
    return ReadinessReport(
        purpose=plan.purpose,
        ready=not any(c.status == "fail" for c in checks),
        checks=tuple(checks),
        limit=manifest.readiness.limit,
        versions=dict(facts.get("versions", {})),
    )


def render_text(report: ReadinessReport) -> str:
    """The headline, each finding, then cause and fix of each failure; the limit last."""
    lines = [report.headline]
    for c in report.checks:
        lines.append(f"  {c.status:<8} {c.id}: {c.summary}")
        if c.status == "fail":
            lines.append(f"           cause: {c.cause}")
            lines.append(f"           fix:   {c.fix}")
    if report.limit:
        lines.append(f"known limit: {report.limit}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m verl_bundle.airgap readiness",
        description="Prove offline that this environment can start the bundle's verl trainer.",
    )
    ap.add_argument("--bundle", required=True, help="the bundle directory")
    ap.add_argument("--python", default=sys.executable, help="the environment's python")
    ap.add_argument("--purpose", help="e.g. ppo-fsdp-vllm (default: the bundle's)")
    ap.add_argument("--require-gpu", action="store_true", help="add a GPU smoke test")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the probe")
    ap.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    args = ap.parse_args(argv)
    from verl_bundle.airgap.postinstall.probing import run_readiness  # it imports this module

    try:
        manifest = mf.load(args.bundle)
        report = run_readiness(manifest, args.python, args.require_gpu, args.purpose, args.timeout)
    except (mf.ManifestError, ValueError, ReadinessError) as exc:
        print(f"readiness: {exc}", file=sys.stderr)
        return 2 if not isinstance(exc, ReadinessError) else 1
    if args.json:
        print(render.dumps(render.envelope("readiness", report.ready, report.to_dict())))
    else:
        print(render_text(report))
    return 0 if report.ready else 1
