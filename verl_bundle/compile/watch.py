"""A host compile's progress, read from its log: ninja writes `[N/M] <command>` as each of its M
objects finishes (when its output is not a terminal, as here), so the log says how far the
compile is. The line the build prints: objects done of total, time so far, and what is left
(from the rate of this run's objects, or before the first one from the measured estimate)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.airgap.contract.figures import duration

NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\] ", re.MULTILINE)


def clock(seconds: float) -> str:
    """95 -> "1m35s"; 7500 -> "2h05m"."""
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@dataclass
class CompileWatch:
    """Follows one compile's log from `offset` (where this run's output starts). `started`:
    when this run began; `earlier`: seconds a stopped compile ran before (a resume);
    `estimate`: the expected wall seconds of the whole compile, when a figure is known."""

    package: str
    log: Path
    offset: int
    started: float
    earlier: float = 0.0
    estimate: float | None = None
    done: int = 0
    total: int | None = None

    def read(self) -> bool:
        """Take in what the log gained; True when the object count changed."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return False
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        steps = NINJA_STEP.findall(chunk[:end])
        if not steps:
            return False
        done, total = (int(x) for x in steps[-1])
        changed = (done, total) != (self.done, self.total)
        self.done, self.total = done, total
        return changed

    def line(self, now: float) -> str:
        """ "flash-attn: compiling: 12 of 73 objects, 25m10s so far, about 1.7 h left"."""
        ran = now - self.started
        parts = [f"{self.package}: compiling"]
        if self.total:
            parts.append(f"{self.done} of {self.total} objects")
        parts.append(f"{clock(self.earlier + ran)} so far")
        left = self.left(ran)
        if left is not None:
            parts.append(f"about {duration(left / 60)} left")
        return ", ".join(parts).replace("compiling, ", "compiling: ", 1)

    def left(self, ran: float) -> float | None:
        """Seconds still to go: this run's time per finished object times the objects left;
        before any object, the estimate less the time spent."""
        if self.total and self.done:
            return ran / self.done * (self.total - self.done)
        if self.estimate is not None:
            return max(0.0, self.estimate - self.earlier - ran)
        return None
