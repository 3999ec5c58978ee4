"""A tiny PEP 440-like version reader, so that the server needs no `packaging`: dotted numbers
and the specifier clauses toolchain ranges use (">=6,<12", "==12.*")."""

from __future__ import annotations

import contextlib
import re
from typing import Tuple

Version = Tuple[int, ...]

_CLAUSE = re.compile(r"(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)(\.\*)?")


def parse_version(text: str) -> Version | None:
    """The dotted number at the start of `text` ("12.2.0", "11.8", "520.61.05"), or None."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def compare(a: Version, b: Version) -> int:
    """-1, 0 or 1, with missing trailing parts read as zeros (11.8 == 11.8.0)."""
    n = max(len(a), len(b))
    a2, b2 = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a2 > b2) - (a2 < b2)


def older(version: str, than: str) -> bool:
    """Whether dotted `version` is below `than` (unreadable parts count as 0)."""
    return compare(parse_version(version) or (0,), parse_version(than) or (0,)) < 0


def _clause_holds(v: Version, op: str, want: Version, star: bool, clause: str) -> bool:
    if star:
        if op not in ("==", "!="):
            raise ValueError(f"{op} cannot take a wildcard: {clause!r}")
        same = (v + (0,) * len(want))[: len(want)] == want
        return same if op == "==" else not same
    c = compare(v, want)
    return {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "==": c == 0, "!=": c != 0}[op]


def version_matches(version: str, spec: str) -> bool:
    """Whether `version` satisfies `spec`: clauses of >=, <=, <, >, ==, != (and ==X.*), joined
    by commas, as in ">=6,<12". Raises ValueError on anything else."""
    v = parse_version(version)
    if v is None:
        raise ValueError(f"not a version: {version!r}")
    for clause in (c.strip() for c in spec.split(",")):
        if not clause:
            continue
        m = _CLAUSE.fullmatch(clause)
        if not m:
            raise ValueError(f"cannot read version specifier {clause!r} in {spec!r}")
        op, text, star = m.groups()
        if not _clause_holds(v, op, tuple(int(p) for p in text.split(".")), bool(star), clause):
            return False
    return True


def highest_major(spec: str) -> int | None:
    """The newest major version (e.g. of gcc) that `spec` accepts."""
    for major in range(30, 3, -1):
        with contextlib.suppress(ValueError):
            if version_matches(str(major), spec):
                return major
    return None


def short(version: str | None) -> str | None:
    """ "3.10.12" -> "3.10" """
    v = parse_version(version or "")
    return ".".join(str(p) for p in v[:2]) if v else None


def cuda_name(version: int) -> str:
    """A CUDA API version number (12020) as people write it ("12.2")."""
    return f"{version // 1000}.{version % 1000 // 10}"
