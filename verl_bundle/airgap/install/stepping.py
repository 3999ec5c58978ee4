"""How an install step is shown and recorded: announced to people (terminal and log) as
"==> [n/7] ...", a line every 30 s while it runs (airgap/heartbeat.py), timed, and emitted as structured start and end events with its status
(`--events FILE`, the `--json` result). What each step does is in steps.py.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

from verl_bundle.airgap.contract.events import EventLog
from verl_bundle.airgap.errors import ServerError
from verl_bundle.airgap.heartbeat import heartbeat
from verl_bundle.airgap.install.output import Output

STEPS = (
    ("verify", "checking every file against SHA256SUMS"),
    ("python", "Python"),
    ("doctor", "doctor"),
    ("venv", "venv"),
    ("phases", "phases"),
    ("post-install", "post-install checks"),
    ("done", "done"),
)
_NUMBER = {name: i for i, (name, _) in enumerate(STEPS, start=1)}
# Steps with no heartbeat of their own: "phases" beats per phase (steps.py), "done" is instant.
_QUIET = ("phases", "done")


def heading(step: str, text: str) -> str:
    return f"==> [{_NUMBER[step]}/{len(STEPS)}] {text}"


class Steps:
    """The announcing and event side of an install run; `current` names the step under way
    (for the message after Ctrl-C)."""

    def __init__(self, out: Output, events: EventLog) -> None:
        self.out, self.events = out, events
        self.current = "(start)"

    @contextlib.contextmanager
    def step(self, name: str, text: str | None = None) -> Iterator[dict[str, Any]]:
        """Announce a step, time it, and emit its start and end events. The body may set
        result["status"] ("skip") and result["detail"]."""
        self.current = name
        if text is not None:
            self.out.say(heading(name, text))
        self.events.emit("step", step=name, status="start")
        result: dict[str, Any] = {"status": "ok", "detail": ""}
        started = time.monotonic()
        beat = (
            contextlib.nullcontext()
            if name in _QUIET
            else heartbeat(self.out.say, (text or name).split(",")[0])
        )
        try:
            with beat:
                yield result
        except ServerError as exc:
            self._end(
                "step", name, "fail", started, exc.message.splitlines()[0] if exc.message else ""
            )
            raise
        except KeyboardInterrupt:
            self._end("step", name, "fail", started, "interrupted")
            raise
        self._end("step", name, result["status"], started, result["detail"])

    def _end(
        self, kind: str, name: str, status: str, started: float, detail: str, **more: Any
    ) -> None:
        self.events.emit(
            kind,
            **{kind: name},
            status=status,
            seconds=round(time.monotonic() - started, 3),
            detail=detail,
            **more,
        )
