"""Requirements the stack overrides on purpose (upstream's uv.lock `[manifest] overrides`, a
profile's `overrides`), carried in the manifest (`checks.overrides`): a pip check finding that
one of them explains is the stack as its authors locked it, not a broken install.

verl main's lock overrides numpy to `>=2.0.0` over mistral-common's `numpy>=1.25,<2.4`, so
`uv pip check` says "The package `mistral-common` requires `numpy>=1.25,<2.4`, but `2.4.6` is
installed"; with the override recorded, that line is accepted (and said) instead of failing
readiness. Only an installed version that meets the override is accepted. Standard library
only, Python 3.8+ (a small comparator of release numbers, no `packaging`).
"""

from __future__ import annotations

import re
from typing import Sequence

# uv: "The package `A` requires `B>=1,<2 ; marker`, but `V` is installed"
_UV = re.compile(
    r"The package `([^`]+)` requires `([A-Za-z0-9][A-Za-z0-9._-]*)[^`]*`, but `([^`]+)` is installed"
)
# pip: "a 1.0 has requirement b<2,>=1, but you have b 2.4.6."
_PIP = re.compile(
    r"^(\S+) \S+ has requirement ([A-Za-z0-9][A-Za-z0-9._-]*)\S*, but you have \S+ (\S+?)\.?$"
)
_CLAUSE = re.compile(r"^\s*(===|==|!=|>=|<=|~=|>|<)\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


def _meets(version: str, specifier: str) -> bool | None:
    """Whether `version` meets every clause (`>=2.0.0,<3`); None when a clause is not
    understood (then nothing is accepted)."""
    have = _release(version)
    if not have:
        return None
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = _CLAUSE.match(clause)
        if m is None or "*" in m.group(2) or m.group(1) in ("~=", "==="):
            return None
        op, want = m.group(1), _release(m.group(2))
        a, b = _pad(have, want)
        ok = {
            "==": a == b,
            "!=": a != b,
            ">=": a >= b,
            "<=": a <= b,
            ">": a > b,
            "<": a < b,
        }[op]
        if not ok:
            return False
    return True


def parse(overrides: Sequence[str]) -> dict[str, list[str]]:
    """ "numpy>=2.0.0" -> {"numpy": [">=2.0.0"]}."""
    out: dict[str, list[str]] = {}
    for text in overrides:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$", text.split(";", 1)[0])
        if m:
            out.setdefault(_canonical(m.group(1)), []).append(m.group(2).strip())
    return out


def accepted(line: str, overrides: dict[str, list[str]]) -> str | None:
    """Why a pip check line is the stack's own override (one phrase), or None."""
    m = _UV.search(line) or _PIP.search(line.strip())
    if m is None:
        return None
    dependent, required, installed = m.group(1), _canonical(m.group(2)), m.group(3)
    specs = overrides.get(required)
    if not specs or not all(_meets(installed, s) for s in specs if s):
        return None
    return (
        f"{dependent}'s own {required} requirement is overridden by the stack "
        f"({required}{','.join(s for s in specs if s)}; {installed} installed)"
    )
