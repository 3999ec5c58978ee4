"""The one render path: every command's result as text for people or as JSON for machines.

JSON output is one envelope with a schema number, so that scripts (rehearse, benchmarks, fleet
reports) can tell which shape they read. Text for a terminal goes through `printable`, so that
bytes from a log or a tool cannot move the cursor or retitle the window. Standard library only,
Python 3.8+: the host CLI and the server tools (doctor, explain, postinstall, install) both
render through here.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Iterable, Protocol, Sequence

JSON_SCHEMA = 1  # the envelope's version; bump when a result's shape changes incompatibly

# How a check's status is shown in a table: problems in capitals so they stand out.
LABELS = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def envelope(command: str, ok: bool, result: Any) -> dict[str, Any]:
    """{"schema": 1, "command": "doctor", "ok": true, "result": {...}}"""
    return {"schema": JSON_SCHEMA, "command": command, "ok": ok, "result": result}


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=False)


# -- text that is safe on a terminal -----------------------------------------------------------

# SGR (colours, bold) is formatting only: dropped. Every other control is shown, not obeyed.
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that can
# make text read differently from what it is.
_CONTROLS = [c for c in range(0x20) if c not in (0x09, 0x0A)] + list(range(0x7F, 0xA0))
_CONTROLS += list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A))
_NEUTRAL = {c: _escape(c) for c in _CONTROLS}


def printable(text: str) -> str:
    """`text` with terminal control sequences neutralised, in time linear in its length.

    Colour codes are removed; ESC, carriage returns (except in CRLF), OSC title changes,
    cursor movement and other C0/C1 controls become visible escapes such as `\\x1b`."""
    return _SGR.sub("", text).replace("\r\n", "\n").translate(_NEUTRAL)


def encodable(text: str, stream: Any = None) -> str:
    """`text` as the stream's encoding can write it (a server's C locale may be ASCII)."""
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    return text.encode(encoding, "replace").decode(encoding, "replace")


# -- checks: doctor, post-install and readiness results ----------------------------------------


class CheckRow(Protocol):
    """What a check result needs for the table: doctor, post-install and readiness rows all
    have these (a `detail` attribute, where present, is shown under a problem)."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...  # ok, warn, fail, skip
    @property
    def summary(self) -> str: ...
    @property
    def fix(self) -> str: ...


def _detail(row: CheckRow) -> str:
    return str(getattr(row, "detail", "") or "")


def check_counts(rows: Iterable[CheckRow]) -> str:
    """ "1 failure(s), 2 warning(s)" """
    statuses = [r.status for r in rows]
    return f"{statuses.count('fail')} failure(s), {statuses.count('warn')} warning(s)"


def checks_text(rows: Sequence[CheckRow], verdict: str = "") -> str:
    """A table of every check (status, id, summary), then each warning and failure with its
    detail and its fix, then `verdict` (if given) with the counts."""
    width = max([len(r.id) for r in rows] + [5])
    lines = [f"{LABELS.get(r.status, r.status):<4}  {r.id:<{width}}  {r.summary}" for r in rows]
    for r in rows:
        if r.status not in ("warn", "fail"):
            continue
        label = LABELS.get(r.status, r.status)
        lines += ["", f"{label} {r.id}: {r.summary}"]
        lines += [f"  {line}" for line in _detail(r).splitlines() if line.strip()]
        if r.fix:
            lines.append(f"  fix: {r.fix}")
    if verdict:
        lines += ["", f"{verdict} ({check_counts(rows)})"]
    return "\n".join(lines)


def checks_json(rows: Iterable[CheckRow]) -> list[dict[str, str]]:
    """[{id, status, summary, detail, fix}] - the same keys for every kind of check."""
    return [
        {"id": r.id, "status": r.status, "summary": r.summary, "detail": _detail(r), "fix": r.fix}
        for r in rows
    ]
