"""Ready to train, not just installed: prove offline that verl's trainer can start.

Run by the installed environment's python (`python -m verl_bundle.airgap readiness --bundle
DIR`), or from post-install (which adds its own import checks to the same probe run). The checks
are a registry (one function per id) over one probe run in the target interpreter
(probing.py runs it, and the pip check beside it); each returns the one `Check` type, and the one
`verdict()` (airgap/checks.py) decides:
  imports   the trainer's entry point and the modules behind it for the bundle's purpose,
            verl's own vLLM version gate included, and flash_attn where the bundle has it
  config    verl's Hydra config composes and resolves offline (no run is started)
  pip-check the installed set is consistent (the bundled uv's `pip check`, else pip's)
  unlisted  nothing in the site directories that no RECORD lists and came after the install
            (a .pth or sitecustomize runs at every start), no link leaving the prefix
  gpu       with --require-gpu: a CUDA tensor op and a tiny flash-attn call
Which modules: those the manifest's `readiness` value names, else the ones readiness.json
lists for the bundle's verl release. Known errors map to a cause and an offline fix there too.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Sequence

from verl_bundle.airgap.checks import Check, Verdict, verdict
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.errors import StepError, UsageError

# The probe runs in the target environment's own python: it lives with the other such scripts.
INSIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inside")
PROBE = os.path.join(INSIDE, "probe.py")
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "readiness.json")
DEFAULT_PURPOSE = "ppo-fsdp-vllm"

# Set for the probe and the trainer dry run: importing transformers, datasets or
# huggingface_hub must not try the network.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "PIP_NO_INDEX": "1",
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "UV_OFFLINE": "1",
    "UV_NO_CONFIG": "1",
}


@dataclass(frozen=True)
class Plan:
    """What readiness proves for a bundle: its purpose, the modules, the config."""

    purpose: str
    modules: tuple[str, ...]
    config: str
    flash_attn: bool  # the bundle has flash-attn (its phase may be left out: see left_out)
    verl: str | None
    left_out: dict[str, str] = field(default_factory=dict)  # distribution -> phase left out


@dataclass(frozen=True)
class ReadinessReport:
    """Readiness's findings for one environment; `verdict` is the one verdict over them."""

    purpose: str
    checks: tuple[Check, ...]
    limit: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return verdict(installed=(), readiness=self.checks, purpose=self.purpose, limit=self.limit)

    def to_dict(self) -> dict[str, Any]:
        return {
            "purpose": self.purpose,
            "limit": self.limit,
            "versions": dict(self.versions),
            "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: Any) -> ReadinessReport:
        """Read back from readiness's JSON envelope (the host renders a bundle's readiness);
        ValueError for anything malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
            raise ValueError("no list of checks")
        purpose, limit = data.get("purpose", ""), data.get("limit", "")
        versions = data.get("versions") or {}
        if not isinstance(purpose, str) or not isinstance(limit, str):
            raise ValueError("purpose and limit must be strings")
        if not isinstance(versions, dict):
            raise ValueError("versions must be a mapping")
        checks = tuple(Check.from_dict(c) for c in data["checks"] if isinstance(c, dict))
        return cls(purpose, checks, limit, {str(k): v for k, v in versions.items()})


class ReadinessError(StepError):
    """Readiness could not run at all (no interpreter, probe crashed); one line."""


# -- the table -------------------------------------------------------------------------------


def load_table(path: str = TABLE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        table: dict[str, Any] = json.load(fh)
    return table


def release_of(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def in_range(version: str, row: dict[str, Any]) -> bool:
    v = release_of(version)
    low = release_of(row["from"])
    high = release_of(row["below"]) if row.get("below") else None
    return v >= low and (high is None or v < high)


def purpose_text(purpose: str, table: dict[str, Any]) -> str:
    return str(table["purposes"].get(purpose, purpose))


def _purpose_id(text: str, table: dict[str, Any]) -> str:
    for pid, words in table["purposes"].items():
        if text in (pid, words):
            return str(pid)
    return DEFAULT_PURPOSE


def plan_for(
    m: mf.Manifest,
    purpose: str | None = None,
    table: dict[str, Any] | None = None,
    skip_phases: Sequence[str] = (),
) -> Plan:
    """The modules and config readiness checks for this bundle (and `--purpose`, if given).
    `m` is the whole bundle: a phase left out (`skip_phases`) never removes a module the purpose
    needs; its distributions are named in `left_out`, so that their failed imports say why."""
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
            raise UsageError(
                f"--purpose {pid}: not a known purpose ({', '.join(sorted(table['purposes']))})"
            )
        text = purpose_text(pid, table)
        row = next((r for r in table["verl"] if verl and in_range(verl, r)), None)
        modules = tuple(row["modules"].get(pid, ())) if row else ()
        config = str(row["config"]) if row else declared.config
    if flash and "flash_attn" not in modules:
        modules = (*modules, "flash_attn")
    left_out = {
        mf.canonical(f.name): phase
        for phase in skip_phases
        for f in m.files_of(phase)
        if f.kind in ("wheel", "sdist")
    }
    return Plan(text, tuple(modules), config if verl else "", flash, verl, left_out)


def explain(
    error: str, table: dict[str, Any] | None = None, verl: str | None = None
) -> tuple[str, str]:
    """(cause, fix) for a known import error; a generic pair otherwise. A cause written for
    some verl releases (from/below: it names their files) is said only for those."""
    table = table or load_table()
    for entry in table["causes"]:
        if "from" in entry and not (verl and in_range(verl, entry)):
            continue
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

Facts = Dict[str, Any]  # what the probe found (probe.py's result)

_MISSING = re.compile(r"No module named '([^']+)'")


# What names a missing distribution in a finding: an import error, or a requirement check's
# "requires `torch==2.1.2`, but it's not installed" (uv) / "requires torch, not installed".
_REQUIRED = re.compile(r"requires `?([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*?not installed")


def _phase_of(plan: Plan, name: str) -> str | None:
    """The phase left out that installs `name` (a module or a distribution): by its name, or a
    distribution named after it ("hydra" -> hydra-core)."""
    wanted = mf.canonical(name)
    if wanted in plan.left_out:
        return plan.left_out[wanted]
    for dist, phase in sorted(plan.left_out.items()):
        if dist.startswith(wanted + "-") or dist.endswith("-" + wanted):
            return phase
    return None


def _left_out(plan: Plan, error: str) -> tuple[str, str] | None:
    """(the missing module or distribution, the phase left out by --skip-phase that installs
    it) for a failure that misses a distribution of a skipped phase; None otherwise."""
    hit = _MISSING.search(error)
    names = [hit.group(1).split(".")[0]] if hit else []
    names += [m.group(1) for m in _REQUIRED.finditer(error)]
    for name in names:
        phase = _phase_of(plan, name.split("=")[0])
        if phase:
            return name, phase
    return None


def left_out_findings(
    plan: Plan, installed: Sequence[Check], ready: Sequence[Check]
) -> tuple[tuple[Check, ...], tuple[Check, ...]]:
    """(installed, readiness) with every failure that a phase left out on purpose explains
    said so, in readiness: such a bundle is installed as asked but not ready to train (exit 5,
    naming the phase and the way back), never a failed step (1) with another fix."""
    if not plan.left_out:
        return tuple(installed), tuple(ready)

    def said(check: Check) -> Check | None:
        missing = _left_out(plan, f"{check.summary} {check.detail}")
        if check.status != "fail" or missing is None:
            return None
        top, phase = missing
        return Check(
            check.id,
            "fail",
            f"{top} is not installed (phase {phase} was left out)",
            f"{check.summary}; the bundle's phase {phase} installs {top}",
            f"run ./install.sh again with the same options but without --skip-phase {phase} "
            "(it installs only what is missing)",
            check.subject,
        )

    moved = [c for c in (said(c) for c in installed) if c is not None]
    kept = tuple(c for c in installed if said(c) is None)
    return kept, (*moved, *(said(c) or c for c in ready))


def check_imports(plan: Plan, facts: Facts, table: dict[str, Any]) -> list[Check]:
    if plan.verl is None:
        return [Check("imports", "skip", "this bundle has no verl: nothing to train with")]
    if not [m for m in plan.modules if m != "flash_attn"]:
        return [
            Check(
                "imports",
                "fail",
                f"no readiness modules known for verl {plan.verl}",
                "readiness.json lists no modules for this verl release and purpose",
                "declare them in the profile's [readiness] modules and rebuild the bundle",
                "verl",
            )
        ]
    out = []
    for item in facts.get("imports", []):
        module = item["module"]
        if item["ok"]:
            out.append(Check(f"import:{module}", "ok", "imports", subject=module))
            continue
        error = f"{item['type']}: {item['error']}"
        missing = _left_out(plan, error)
        if missing is not None:  # a phase left out on purpose: not ready, and the way back
            top, phase = missing
            out.append(
                Check(
                    f"import:{module}",
                    "fail",
                    f"{top} is not installed (phase {phase} was left out)",
                    f"the trainer imports {module}, which needs {top}; the bundle's phase "
                    f"{phase} installs it",
                    f"run ./install.sh again with the same options but without --skip-phase "
                    f"{phase} (it installs only what is missing)",
                    module,
                )
            )
            continue
        if facts.get("gpu_visible") is not True and _gpu_only(error, table):
            out.append(
                Check(
                    f"import:{module}",
                    "untested",
                    f"imports only where a GPU is visible ({error})",
                    fix="run readiness on a GPU server (--require-gpu) to prove it",
                    subject=module,
                )
            )
            continue
        cause, fix = explain(error, table, plan.verl)
        out.append(Check(f"import:{module}", "fail", item["error"], cause, fix, module))
    return out


def check_config(plan: Plan, facts: Facts, table: dict[str, Any]) -> list[Check]:
    got = facts.get("config")
    if not plan.config or got is None:
        return [Check("config", "skip", "no verl config to compose")]
    subject = f"config {plan.config}"
    if got["ok"]:
        return [
            Check(
                "config",
                "ok",
                f"composes offline ({len(got['keys'])} groups)",
                subject=subject,
            )
        ]
    return [
        Check(
            "config",
            "fail",
            f"{got['type']}: {got['error']}",
            "verl's Hydra config does not compose or resolve, so main_ppo would stop before "
            "training",
            "check that hydra-core and omegaconf are the versions the bundle installed "
            "(pip check), and that verl's package holds trainer/config",
            subject,
        )
    ]


def check_gpu(plan: Plan, facts: Facts, table: dict[str, Any]) -> list[Check]:
    got = facts.get("gpu")
    if got is None:
        return []
    if got["ok"]:
        what = "a CUDA tensor op" + (" and a flash-attn call" if got.get("flash_attn") else "")
        return [Check("gpu", "ok", f"{what} on {got.get('device', 'the GPU')}", subject="gpu")]
    return [
        Check(
            "gpu",
            "fail",
            f"{got['type']}: {got['error']}",
            "the GPU smoke test failed: the trainer would fail on its first CUDA call",
            "run the doctor (./doctor --require-gpu) for the driver and visible devices",
            "gpu smoke test",
        )
    ]


CHECKS: tuple[Callable[[Plan, Facts, dict[str, Any]], list[Check]], ...] = (
    check_imports,
    check_config,
    check_gpu,
)


def report(
    manifest: mf.Manifest,
    plan: Plan,
    facts: Facts,
    pip: Check,
    table: dict[str, Any],
    unlisted: Check | None = None,
) -> ReadinessReport:
    """Readiness's findings from the probe's facts, the pip check and what the environment
    holds that no RECORD lists (`unlisted`, doctor/unlisted.py)."""
    checks = [c for fn in CHECKS for c in fn(plan, facts, table)]
    checks.append(pip)
    if unlisted is not None:
        checks.append(unlisted)
    # A phase left out on purpose explains what it breaks better than the profile's limit does.
    left = any(
        _left_out(plan, f"{item['type']}: {item['error']}")
        for item in facts.get("imports", [])
        if not item["ok"]
    )
    return ReadinessReport(
        purpose=plan.purpose if plan.verl else "",
        checks=tuple(checks),
        limit="" if left else manifest.readiness.limit,
        versions=dict(facts.get("versions", {})),
    )


def render_text(r: ReadinessReport, shown: Sequence[str] = ("fail", "untested")) -> str:
    """Each finding, then the cause and fix of each failure; the limit last (the verdict line
    is the caller's: it prints it last)."""
    lines = []
    for c in r.checks:
        lines.append(f"  {c.status:<8} {c.id}: {c.summary}")
        if c.status in shown and (c.detail or c.fix):
            if c.detail:
                lines.append(f"           cause: {c.detail}")
            if c.fix:
                lines.append(f"           fix:   {c.fix}")
    if r.limit:
        lines.append(f"known limit: {r.limit}")
    return "\n".join(lines)
