"""Structured step events: what long server-side work did, as JSON lines.

The installer writes one JSON object per line (`--events FILE`) as each step and phase starts
and ends; rehearse, the benchmarks and multi-node runners read them back with `read_events`
instead of parsing text meant for people. Standard library only, Python 3.8+.

    {"event": "step", "step": "verify", "status": "start", "time": 1700000000.0}
    {"event": "step", "step": "verify", "status": "ok", "seconds": 1.2, "detail": "", ...}
    {"event": "phase", "phase": "torch", "status": "ok", "seconds": 11.6, "tool": "uv", ...}
    {"event": "result", "ok": true, "exit_code": 0, ...}

Statuses: start, ok, fail, skip (a step or phase that did not run, with the reason in detail).
"""

from __future__ import annotations

import json
import time
from typing import IO, Any, Dict

EVENTS_SCHEMA = 1
STATUSES = ("start", "ok", "fail", "skip")
Event = Dict[str, Any]


class EventLog:
    """Collects events in memory (for the final --json result) and appends each one, as it
    happens, to a file when one is given (flushed per line, so a reader can follow it)."""

    def __init__(self, path: str | None = None) -> None:
        self.events: list[Event] = []
        self._fh: IO[str] | None = None
        self.path = path
        if path:
            # Appended to only as a regular file: a link or FIFO planted there is refused
            # (UnsafePathError, an OSError with one line), never followed.
            from verl_bundle.airgap.confined import append_outside

            self._fh = append_outside(path, "--events")

    def emit(self, event: str, **fields: Any) -> Event:
        doc: Event = {"event": event, "schema": EVENTS_SCHEMA, "time": round(time.time(), 3)}
        doc.update(fields)
        self.events.append(doc)
        if self._fh is not None:
            try:
                self._fh.write(json.dumps(doc, sort_keys=False) + "\n")
                self._fh.flush()
            except OSError as exc:  # a full disk: the caller says where, in one line
                raise OSError(exc.errno, exc.strerror, self.path) from exc
        return doc

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def ended(self, event: str) -> list[Event]:
        """The end events (ok, fail, skip) of one kind ("step" or "phase"), in order."""
        return [e for e in self.events if e["event"] == event and e.get("status") != "start"]


def parse_events(text: str) -> list[Event]:
    """Events from JSON lines; a torn last line (the writer was killed) is ignored."""
    out: list[Event] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("event"), str):
            out.append(doc)
    return out


def read_events(path: str) -> list[Event]:
    """The events in a file written by `--events FILE` (none when it does not exist)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_events(fh.read())
    except FileNotFoundError:
        return []
