"""What leaving phases out (`--skip-phase`) means for readiness, said at the end of an install.

Which distributions a skipped phase holds comes from the manifest; which of the trainer's
modules readiness checks, and what each of them needs, from readiness.json (its `needs` table,
plus the rule that a module needs the distribution named like its top-level package: verl.*
needs verl, flash_attn needs flash-attn). Nothing here is written per package.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.postinstall import readiness


@dataclass(frozen=True)
class Need:
    """A readiness module that cannot import without a distribution of a skipped phase."""

    module: str
    distribution: str
    what: str = ""  # "verl's FSDP actor"

    def named(self) -> str:
        return f"{self.module} ({self.what})" if self.what else self.module


@dataclass(frozen=True)
class LeftOut:
    """One skipped phase: what it would have installed, and which modules miss it."""

    phase: str
    packages: tuple[str, ...]
    needs: tuple[Need, ...]
    purpose: str

    def line(self) -> str:
        """One sentence: what is missing, what that means for readiness, and the way back."""
        missing = ", ".join(self.packages) or "nothing"
        head = f"skipped {self.phase}: {missing} not installed"
        if not self.needs:
            return f"{head}; none of the modules readiness checks ({self.purpose}) needs it"
        by_dist: dict[str, list[str]] = {}
        for n in self.needs:
            by_dist.setdefault(n.distribution, []).append(n.named())
        why = "; ".join(
            f"{_and(mods)} need{'s' if len(mods) == 1 else ''} {dist}"
            for dist, mods in by_dist.items()
        )
        return (
            f"{head}. {why}, so the trainer is not ready ({self.purpose}) until it is installed: "
            f"run ./install.sh again with the same options but without --skip-phase {self.phase} "
            "(it installs only what is missing)"
        )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def needs_of(module: str, verl: str | None, table: dict[str, Any]) -> list[tuple[str, str]]:
    """(distribution, what) pairs `module` needs: its own package's, and the table's."""
    out = [(mf.canonical(module.split(".")[0]), "")]
    for entry in table.get("needs", {}).get("modules", []):
        if entry["module"] == module and verl and readiness.in_range(verl, entry):
            out += [(mf.canonical(d), str(entry.get("what", ""))) for d in entry["needs"]]
    return out


def left_out(
    m: mf.Manifest, skip_phases: list[str] | tuple[str, ...], table: dict[str, Any] | None = None
) -> list[LeftOut]:
    """What each skipped phase leaves out, judged against the whole bundle's readiness plan."""
    if not skip_phases:
        return []
    table = table or readiness.load_table()
    plan = readiness.plan_for(m, None, table)
    out = []
    for phase in skip_phases:
        packages = tuple(
            dict.fromkeys(f.name for f in m.files_of(phase) if f.kind in ("wheel", "sdist"))
        )
        found: dict[tuple[str, str], Need] = {}
        for module in plan.modules:
            for dist, what in needs_of(module, plan.verl, table):
                # A module named twice for one distribution: keep the mention that says why.
                if dist in packages and not found.get((module, dist), Need(module, dist)).what:
                    found[(module, dist)] = Need(module, dist, what)
        out.append(LeftOut(phase, packages, tuple(found.values()), plan.purpose))
    return out
