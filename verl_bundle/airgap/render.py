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
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from verl_bundle.airgap.checks import Check, Verdict

JSON_SCHEMA = 1  # the envelope's version; bump when a result's shape changes incompatibly

# How a check's status is shown in a table: problems in capitals so they stand out, and what
# could not be exercised here (needs a GPU) never looks like "ok".
LABELS = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "skip", "untested": "UNTESTED"}


def envelope(command: str, ok: bool, result: Any, verdict: Verdict | None = None) -> dict[str, Any]:
    """{"schema": 1, "command": "doctor", "ok": true, "result": {...}}, and the command's
    verdict ({"code", "state", "line", "ok"}) for the commands that end with one."""
    doc = {"schema": JSON_SCHEMA, "command": command, "ok": ok, "result": result}
    if verdict is not None:
        doc["verdict"] = verdict.to_dict()
    return doc


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=False)


# -- the one printer of the server program ------------------------------------------------------
# Every command of the server program (doctor, verify, install, post-install, readiness, explain,
# assets, preflight, the installed verifier) prints through these two. The only writers outside
# them are the two that run before the library is trusted (install/boot.py and verify/served.py,
# read alone by install.sh) and the installer's Output, which tees the same text to its log.


def say(text: str, stream: Any = None) -> None:
    """Print text for people: terminal controls neutralised, in the stream's encoding."""
    out = stream or sys.stdout
    out.write(encodable(printable(text), out) + "\n")
    out.flush()


def show(
    command: str,
    ok: bool,
    result: Any,
    text: str,
    json_out: bool,
    verdict: Verdict | None = None,
) -> None:
    """The one way a command's result is printed: the JSON envelope, or text whose last line
    is the verdict (when the command has one)."""
    if json_out:
        sys.stdout.write(dumps(envelope(command, ok, result, verdict)) + "\n")
        sys.stdout.flush()
    else:
        say(text)


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


def check_counts(rows: Iterable[Check]) -> str:
    """ "1 failure(s), 2 warning(s)" (and what could not be tested here)"""
    statuses = [r.status for r in rows]
    text = f"{statuses.count('fail')} failure(s), {statuses.count('warn')} warning(s)"
    untested = statuses.count("untested")
    return text + (f", {untested} not tested here" if untested else "")


def checks_text(rows: Sequence[Check], verdict: str = "") -> str:
    """A table of every check (status, id, summary), then each warning, failure and untested
    check with its detail and its fix, then the counts and `verdict` (if given) last."""
    width = max([len(r.id) for r in rows] + [5])
    label = max(len(LABELS.get(r.status, r.status)) for r in rows) if rows else 4
    lines = [
        f"{LABELS.get(r.status, r.status):<{label}}  {r.id:<{width}}  {r.summary}" for r in rows
    ]
    for r in rows:
        if r.status not in ("warn", "fail", "untested"):
            continue
        lines += ["", f"{LABELS[r.status]} {r.id}: {r.summary}"]
        lines += [f"  {line}" for line in r.detail.splitlines() if line.strip()]
        if r.fix:
            lines.append(f"  fix: {r.fix}")
    if verdict:
        lines += ["", f"checks: {check_counts(rows)}", verdict]
    return "\n".join(lines)


def checks_json(rows: Iterable[Check]) -> list[dict[str, str]]:
    """[{id, status, summary, detail, fix, subject}] - the same keys for every kind of check."""
    return [r.to_dict() for r in rows]
