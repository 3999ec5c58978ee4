"""The one progress helper: a bar on stderr when it is a terminal, silence otherwise.

A note (a fallback taken, a cut-off not applied) is said once per run, however many times a
stage reaches the same conclusion. rich is imported only when bars are drawn.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.progress import Progress


class Reporter(Protocol):
    def start(self, label: str, total: int | None) -> object: ...
    def advance(self, handle: object, amount: int) -> None: ...
    def done(self, handle: object) -> None: ...
    def note(self, message: str) -> None: ...
    def status(self, message: str) -> None: ...


class Silent:
    """Used when stderr is not a terminal (CI, pipes, tests): notes still go to stderr."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._lock = threading.Lock()
        self._said: set[str] = set()

    def start(self, label: str, total: int | None) -> object:
        return label

    def advance(self, handle: object, amount: int) -> None:
        pass

    def done(self, handle: object) -> None:
        pass

    def note(self, message: str) -> None:
        """Something the user should know (a fallback taken, a cut-off not applied)."""
        if self.quiet:
            return
        with self._lock:
            if message not in self._said:
                self._said.add(message)
                print(message, file=sys.stderr, flush=True)

    def status(self, message: str) -> None:
        """Progress ("resolving ..."): shown on a terminal only."""


class Bars:
    """Rich progress bars on stderr: one per file in flight, plus an overall total."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self._said: set[str] = set()

    def start(self, label: str, total: int | None) -> object:
        return self.progress.add_task(label, total=total)

    def advance(self, handle: object, amount: int) -> None:
        self.progress.advance(handle, amount)  # type: ignore[arg-type]

    def done(self, handle: object) -> None:
        self.progress.remove_task(handle)  # type: ignore[arg-type]

    def note(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.progress.console.print(message, markup=False, highlight=False)

    def status(self, message: str) -> None:
        self.progress.console.print(message, markup=False, highlight=False, style="dim")


@contextmanager
def reporter(quiet: bool = False) -> Iterator[Reporter]:
    if quiet or not sys.stderr.isatty():
        yield Silent(quiet)
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
