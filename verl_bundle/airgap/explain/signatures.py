"""The signature table of `explain`: signatures.json read into typed values, with the rules
its entries name (needles derived from patterns, value transforms, context rules).

Standard library only, Python 3.8+: carried in every bundle next to signatures.json.
"""

from __future__ import annotations

import contextlib
import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping

SIGNATURES_FILE = Path(__file__).with_name("signatures.json")
# How far around a matched line a context looks, in characters: an nvcc command line of
# flash-attn is about 3 kB, a urllib traceback with its chained exception about 5 kB.
NEAR_BEFORE, NEAR_AFTER = 16000, 8000
SECTION_BEFORE, SECTION_AFTER = 8000, 4000
# Where values for a cause's {placeholders} are looked for around the matched line.
VALUES_BEFORE, VALUES_AFTER = 4000, 1500
MIN_NEEDLE = 4


Values = Dict[str, str]
# (text, line start, line end) -> whether the lines around the matched one fit the cause
Context = Callable[[str, int, int], bool]


@dataclass(frozen=True)
class Alternative:
    """One pattern of a signature and the literal every match of it contains."""

    needle: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class ValueRule:
    """Named groups to take from the log near the match; `sets` adds derived values, each a
    template over the groups whose format spec names a transform ("{below:minus-one}")."""

    pattern: re.Pattern[str]
    sets: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Signature:
    """How one cause shows in a log: a line holding a match of one of `alternatives` (not in a
    traceback's echo of the raising source line) that `context` (if any) accepts. `cause` and
    `fix` hold {placeholders}, filled from the nearest `values` match, else from `defaults`."""

    id: str
    title: str
    cause: str
    fix: str
    alternatives: tuple[Alternative, ...]
    context_rule: str | None
    context: Context | None
    values: tuple[ValueRule, ...]
    defaults: tuple[tuple[str, str], ...]
    sample: str


# -- needles: the literal every match of a pattern contains ---------------------------------

_COUNTED = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def _skip_group(p: str, i: int) -> int:
    """The index after the group that opens at p[i] (nested groups, classes, escapes)."""
    depth = 0
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _skip_class(p, i)
            continue
        depth += {"(": 1, ")": -1}.get(c, 0)
        i += 1
        if depth == 0:
            return i
    raise ValueError(f"unbalanced parenthesis in {p!r}")


def _skip_class(p: str, i: int) -> int:
    j = i + 1 + (p.startswith("^", i + 1))
    j += p.startswith("]", j)
    while j < len(p) and p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    if j >= len(p):
        raise ValueError(f"unterminated character class in {p!r}")
    return j + 1


def literal_runs(pattern: str) -> list[str]:
    """The literal runs that every match of `pattern` holds, in order. Only the top level is
    read: a group, a class, an escape such as \\d, `.` or an anchor ends a run; an optional
    character (`x?`, `x*`, `x{0,2}`) is dropped. A top-level `|` or a global `(?i)` is refused:
    each alternative is its own pattern, and needles are found case-sensitively."""
    runs: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            runs.append("".join(run))
            run.clear()

    i = 0
    while i < len(pattern):
        c = pattern[i]
        counted = _COUNTED.match(pattern, i) if c == "{" else None
        if c in "*+?" or counted is not None:
            end = counted.end() if counted is not None else i + 1
            optional = c in "*?" or (counted is not None and int(counted.group(1) or 0) == 0)
            if optional and run:
                run.pop()
            flush()
            i = end + (pattern[end : end + 1] in ("?", "+"))  # lazy or possessive
        elif c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt.isalnum() or not nxt:
                flush()  # \d \s \w \b \1 \n ...: not a plain character
            else:
                run.append(nxt)
            i += 2
        elif c == "(":
            flags = re.match(r"\(\?([aiLmsux]+)\)", pattern[i:])
            if flags is not None and "i" in flags.group(1):
                raise ValueError(f"{pattern!r}: a global (?i) cannot have a needle; use (?i:...)")
            flush()
            i = _skip_group(pattern, i)
        elif c == "[":
            flush()
            i = _skip_class(pattern, i)
        elif c == "|":
            raise ValueError(f"{pattern!r}: a top-level '|'; write each alternative as a pattern")
        elif c in ".^$":
            flush()
            i += 1
        else:
            run.append(c)
            i += 1
    flush()
    return runs


def needle_of(pattern: str) -> str:
    """The longest literal run of `pattern`: what the matcher looks for with str.find."""
    needle = max(literal_runs(pattern), key=len, default="")
    if len(needle) < MIN_NEEDLE:
        raise ValueError(f"{pattern!r} has no literal of {MIN_NEEDLE} characters to look for")
    return needle


# -- values: named groups, transforms, templates --------------------------------------------


def _wheel_tag(index: int) -> Callable[[str], str]:
    def tag(wheel: str) -> str:
        parts = wheel[: -len(".whl")].split("-")
        if not wheel.endswith(".whl") or len(parts) < 5:
            raise ValueError(f"{wheel!r} is not a wheel file name")
        return parts[index]

    return tag


TRANSFORMS: dict[str, Callable[[str], str]] = {
    "minus-one": lambda v: str(int(v) - 1),
    # torch reports the driver's CUDA version as an integer: 11040 is CUDA 11.4.
    "cuda-version": lambda v: f"{int(v) // 1000}.{int(v) % 1000 // 10}",
    "python-tag": _wheel_tag(-3),
    "platform-tag": _wheel_tag(-1),
}


class _Transforming(string.Formatter):
    """str.format where a field's format spec names a transform: "{found:cuda-version}"."""

    def format_field(self, value: Any, format_spec: str) -> str:
        return TRANSFORMS[format_spec](str(value)) if format_spec else str(value)


_FORMATTER = _Transforming()


def values_near(
    sig: Signature, text: str, start: int, known: Mapping[str, str] | None = None
) -> Values:
    """The defaults (or what the caller `known`s of them, e.g. the bundle's installed size),
    overridden by the groups (and derived values) of the value match nearest to the matched
    line."""
    found = dict(sig.defaults)
    found.update({k: v for k, v in (known or {}).items() if k in found})
    lo, hi = max(0, start - VALUES_BEFORE), min(len(text), start + VALUES_AFTER)
    nearest: tuple[int, re.Match[str], ValueRule] | None = None
    for rule in sig.values:
        for m in rule.pattern.finditer(text, lo, hi):
            if nearest is None or abs(m.start() - start) < nearest[0]:
                nearest = (abs(m.start() - start), m, rule)
    if nearest is not None:
        _, m, rule = nearest
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        found.update(groups)
        for key, template in rule.sets:
            # A group it needs is absent, or not a number: the default stays.
            with contextlib.suppress(KeyError, ValueError):
                found[key] = _FORMATTER.vformat(template, (), groups)
    return found


# -- contexts: what the lines around a match must show --------------------------------------


def _near(pattern: re.Pattern[str]) -> Context:
    def near(text: str, start: int, end: int) -> bool:
        lo, hi = max(0, start - NEAR_BEFORE), min(len(text), end + NEAR_AFTER)
        return pattern.search(text, lo, hi) is not None

    return near


def _inside(first: re.Pattern[str], frame: re.Pattern[str], last: re.Pattern[str]) -> Context:
    """Inside a tool's output: after its `first` line with no `last` between, or followed by
    one of its traceback `frame`s before its output ends."""

    def inside(text: str, start: int, end: int) -> bool:
        opened: re.Match[str] | None = None
        for m in first.finditer(text, max(0, start - SECTION_BEFORE), start):
            opened = m
        if opened is not None and last.search(text, opened.end(), start) is None:
            return True
        hi = min(len(text), end + SECTION_AFTER)
        stop = last.search(text, end, hi)
        return frame.search(text, end, stop.start() if stop else hi) is not None

    return inside


def _context(rule: str, near: Mapping[str, Context], sections: Mapping[str, Context]) -> Context:
    """A context rule of signatures.json: near:<name>, inside:<section> or outside:<section>."""
    kind, _, name = rule.partition(":")
    if kind == "near" and name in near:
        return near[name]
    if kind in ("inside", "outside") and name in sections:
        inside = sections[name]
        return inside if kind == "inside" else lambda text, s, e: not inside(text, s, e)
    raise ValueError(f"unknown context rule {rule!r}")


# -- the table ------------------------------------------------------------------------------


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.MULTILINE)


def _signature(entry: Mapping[str, Any], near: Mapping[str, Context], sections: Any) -> Signature:
    sid = entry["id"]
    try:
        defaults = dict(entry.get("defaults", {}))
        for template in (entry["cause"], entry["fix"]):
            for _, field, spec, _ in string.Formatter().parse(template):
                if field is not None and (field not in defaults or spec):
                    raise ValueError(f"placeholder {{{field}}} needs a default and no transform")
        values = tuple(
            ValueRule(_compile(v["pattern"]), tuple(v.get("set", {}).items()))
            for v in entry.get("values", [])
        )
        for value in values:
            for _, template in value.sets:
                for _, _, spec, _ in _FORMATTER.parse(template):
                    if spec and spec not in TRANSFORMS:
                        raise ValueError(f"unknown transform {spec!r}")
        rule = entry.get("context")
        return Signature(
            id=sid,
            title=entry["title"],
            cause=entry["cause"],
            fix=entry["fix"],
            alternatives=tuple(Alternative(needle_of(p), _compile(p)) for p in entry["patterns"]),
            context_rule=rule,
            context=_context(rule, near, sections) if rule else None,
            values=values,
            defaults=tuple(defaults.items()),
            sample=entry["sample"],
        )
    except (KeyError, TypeError, ValueError, re.error) as exc:
        raise ValueError(f"{SIGNATURES_FILE.name}: signature {sid!r}: {exc}") from None


def load_signatures(path: Path = SIGNATURES_FILE) -> tuple[Signature, ...]:
    """The signature table, most specific first (a root cause before what follows from it)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    near = {name: _near(_compile(p)) for name, p in doc["near"].items()}
    sections = {
        name: _inside(_compile(s["start"]), _compile(s["frame"]), _compile(s["end"]))
        for name, s in doc["sections"].items()
    }
    return tuple(_signature(entry, near, sections) for entry in doc["signatures"])


SIGNATURES = load_signatures()
