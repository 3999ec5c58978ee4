"""The one progress helper: a bar on stderr when it is a terminal; otherwise (CI, a pipe, a log
file) a line once a step has run FIRST seconds (`status`: a step over sooner, such as a usage
error's, says nothing) and one every 30 s while work is in flight, so a long build is never
silent for minutes. `step` is a long step that has no pieces of its own (the
wheel checks, a verify): a line at its start, then the periodic lines while it runs.

A note (a fallback taken, a cut-off not applied) is said once per run, however many times a
stage reaches the same conclusion. A progress line (`progress`: a compile's objects done, its
time so far and what is left) is printed on a terminal and off one; a step that is not a set of
pieces with bytes (a compile) calls it at least every PERIOD seconds. rich is imported only when
bars are drawn.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.progress import Progress

PERIOD = 30.0  # at most this many seconds between two progress lines of one long step
FIRST = 5.0  # a step still under way after this many seconds is said (within the 10 s promised)


class Reporter(Protocol):
    def start(self, label: str, total: int | None) -> object: ...
    def advance(self, handle: object, amount: int) -> None: ...
    def done(self, handle: object) -> None: ...
    def note(self, message: str) -> None: ...
    def status(self, message: str) -> None: ...
    def progress(self, message: str) -> None: ...


class Silent:
    """Used when stderr is not a terminal (CI, pipes, tests): notes still go to stderr, and
    while work started with `start` is in flight, one line every `every` seconds says what the
    last status was, how many of the started files and their bytes are done, and how far each
    step in flight is (a label with a space names a step, "writing bundle"; others a file)."""

    def __init__(self, quiet: bool = False, every: float = PERIOD, first: float = FIRST) -> None:
        self.quiet = quiet
        self.every = every
        self.first = first
        self._pending: threading.Timer | None = None  # the status to say once FIRST has passed
        self._lock = threading.Lock()
        self._said: set[str] = set()
        self._status = ""
        self._began = time.monotonic()
        self._flight: dict[int, list[int]] = {}  # handle -> [bytes done, bytes expected]
        self._steps: dict[int, str] = {}  # handle -> label, for steps (not files)
        self._next = 0
        self._finished = [0, 0]  # pieces, bytes
        self._ticker: threading.Thread | None = None
        self._closed = threading.Event()

    def start(self, label: str, total: int | None) -> object:
        with self._lock:
            self._next += 1
            self._flight[self._next] = [0, total or 0]
            if " " in label:
                self._steps[self._next] = label
            if not self.quiet and self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, daemon=True)
                self._ticker.start()
            return self._next

    def advance(self, handle: object, amount: int) -> None:
        with self._lock:
            if (piece := self._flight.get(handle)) is not None:  # type: ignore[call-overload]
                piece[0] += amount

    def done(self, handle: object) -> None:
        with self._lock:
            piece = self._flight.pop(handle, None)  # type: ignore[call-overload]
            if self._steps.pop(handle, None) is None and piece is not None:  # type: ignore[call-overload]
                self._finished[0] += 1
                self._finished[1] += piece[0]

    def note(self, message: str) -> None:
        """Something the user should know (a fallback taken, a cut-off not applied)."""
        if self.quiet:
            return
        with self._lock:
            if message not in self._said:
                self._said.add(message)
                print(message, file=sys.stderr, flush=True)

    def status(self, message: str) -> None:
        """Progress ("resolving ..."): printed once the step has run `first` seconds (once,
        however often it is said again; at once when `first` is 0), and it heads the periodic
        line."""
        with self._lock:
            status = message.rstrip(" .")
            if status == self._status:
                return
            self._status = status
            if self._pending is not None:  # the step before is over: never said
                self._pending.cancel()
                self._pending = None
            if self.quiet or self._closed.is_set():
                return
            if self.first <= 0:
                print(message, file=sys.stderr, flush=True)
                return
            self._pending = threading.Timer(self.first, self._say_late, (status, message))
            self._pending.daemon = True
            self._pending.start()

    def _say_late(self, status: str, message: str) -> None:
        with self._lock:
            if self._status == status and not self._closed.is_set():
                print(message, file=sys.stderr, flush=True)

    def line(self) -> str:
        """What is in flight now, in one line."""
        with self._lock:
            flight = [p for h, p in self._flight.items() if h not in self._steps]
            steps = [(label, self._flight[h]) for h, label in self._steps.items()]
            pieces, finished = self._finished
            status = self._status
        seconds = int(time.monotonic() - self._began)
        moving = sum(p[0] for p in flight)
        expected = sum(max(p) for p in flight)
        head = f"[{seconds // 60}m{seconds % 60:02d}s] {status or 'working'}:"
        going = "".join(
            f"; {label} {_size(p[0])} of {_size(max(p))}" if max(p) else f"; {label}"
            for label, p in steps
        )
        return (
            f"{head} {pieces} done ({_size(finished)}), {len(flight)} in flight "
            f"({_size(moving)} of {_size(expected)}){going}"
        )

    def _tick(self) -> None:
        """Every `every` seconds while something is in flight; the thread ends when nothing
        is (the next `start` begins another)."""
        while not self._closed.wait(self.every):
            with self._lock:
                if not self._flight:
                    self._ticker = None
                    return
            print(self.line(), file=sys.stderr, flush=True)

    def progress(self, message: str) -> None:
        """A long step's own line (a compile's objects): printed here too, and it heads the
        periodic line of whatever else is in flight."""
        if self.quiet:
            return
        with self._lock:
            self._status = message.rstrip(" .")
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        """No more periodic lines (the run is over, whatever is still winding down)."""
        with self._lock:
            self._closed.set()
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None


def _size(count: int) -> str:
    return f"{count / 1e9:.2f} GB" if count >= 10**8 else f"{count / 1e6:.1f} MB"


class Bars:
    """Rich progress bars on stderr: one per file in flight, plus an overall total."""

    def __init__(self, progress: Progress) -> None:
        self.rich = progress
        self._said: set[str] = set()

    def start(self, label: str, total: int | None) -> object:
        return self.rich.add_task(label, total=total)

    def advance(self, handle: object, amount: int) -> None:
        self.rich.advance(handle, amount)  # type: ignore[arg-type]

    def done(self, handle: object) -> None:
        self.rich.remove_task(handle)  # type: ignore[arg-type]

    def note(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.rich.console.print(message, markup=False, highlight=False)

    def status(self, message: str) -> None:
        self.rich.console.print(message, markup=False, highlight=False, style="dim")

    def progress(self, message: str) -> None:
        self.status(message)


@contextmanager
def step(reporter: Reporter, label: str) -> Iterator[None]:
    """A long step with no pieces of its own ("checking 267 wheels"): said as it starts, and
    in flight (the periodic line off a terminal, a bar on one) until it ends. `label` holds
    a space: it names a step, not a file."""
    reporter.status(f"{label} ...")
    handle = reporter.start(label, None)
    try:
        yield
    finally:
        reporter.done(handle)


@contextmanager
def reporter(quiet: bool = False) -> Iterator[Reporter]:
    if quiet or not sys.stderr.isatty():
        silent = Silent(quiet)
        try:
            yield silent
        finally:
            silent.close()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True)
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        yield Bars(progress)
