"""The wheel checks of one fetch, run beside the downloads rather than on their threads.

A wheel is handed over as soon as its bytes are in the cache. The checks run in worker
processes (parsing a zip's directory holds the GIL, which the download threads need; inflating
wants a core of its own), the largest waiting wheel first, at a lower CPU priority than the
downloads, so that checking never delays the last download. `wait` returns when every check
handed over has passed, or raises the first damaged wheel's FetchError (that wheel already
evicted from the cache).

A worker is `python -c` running `serve` below: one JSON line in (the wheel's path, the depth),
one JSON line out (the problem, or null). It reads nothing else and writes nowhere else, so it
ends with its input: when the build closes it, or when the build is gone however it ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from verl_bundle.errors import FetchError
from verl_bundle.net.cache import Cache
from verl_bundle.wheel.integrity import WheelFacts, examine, passed, settle

NICENESS = 5  # below the downloads and the tar writer, but not starved on a busy host
# The worker imports this module from the same place as the build (not from the current
# directory, which `python -c` would put first on the path).
_SERVE = "import sys; sys.path.insert(0, {root!r}); from verl_bundle.fetch.wheelchecks import serve; serve()"


@dataclass(frozen=True)
class WheelCheck:
    """One wheel to check, with what a failure names."""

    path: Path
    sha256: str
    size: int
    whole: bool  # inflate every member (see integrity.py); else its structure only
    package: str
    filename: str
    url: str
    built: bool = False  # built on this host (from the sdist at `url`)


def serve(stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> None:
    """A worker: check each wheel asked for, until the input ends."""
    source, sink = stdin or sys.stdin, stdout or sys.stdout
    with contextlib.suppress(OSError):  # a sandbox may refuse: the checks still run
        os.nice(NICENESS)
    for line in source:
        ask = json.loads(line)
        found, facts = examine(ask["path"], bool(ask["whole"]))
        sink.write(json.dumps({"problem": found, **dataclasses.asdict(facts)}) + "\n")
        sink.flush()


class _Worker:
    """One worker process and the thread in this process that feeds it."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE.format(root=root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def check(self, path: Path, whole: bool) -> tuple[str | None, WheelFacts]:
        assert self.proc.stdin is not None and self.proc.stdout is not None  # noqa: S101
        self.proc.stdin.write(json.dumps({"path": str(path), "whole": whole}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise OSError("the worker process ended")
        reply = json.loads(answer)
        found = reply["problem"]
        facts = WheelFacts(int(reply["unpacked"]), str(reply["license"]))
        return (None if found is None else str(found)), facts

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:  # in the middle of a long check: not needed now
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class WheelChecks:
    """Checks handed over from any thread; up to `workers` processes take the largest waiting
    one each. They start with the first check that is not already recorded as passed, so a
    warm rebuild starts none."""

    def __init__(self, cache: Cache, workers: int | None = None) -> None:
        self.cache = cache
        self.workers = workers or max(1, len(os.sched_getaffinity(0)))
        self._waiting: list[tuple[int, int, WheelCheck]] = []  # (-size, order, check)
        self._running = 0
        self._feeders: list[threading.Thread] = []
        self._procs: list[_Worker] = []
        self._failures: list[FetchError] = []
        self._closed = False
        self._changed = threading.Condition()
        self.checked = 0  # handed over and not already passed before

    def submit(self, check: WheelCheck) -> None:
        if passed(self.cache, check.sha256, check.whole):
            return
        with self._changed:
            if self._closed:
                return
            heapq.heappush(self._waiting, (-check.size, self.checked, check))
            self.checked += 1
            if len(self._feeders) < min(self.workers, self.checked):
                feeder = threading.Thread(target=self._feed, daemon=True)
                self._feeders.append(feeder)
                feeder.start()
            self._changed.notify_all()

    def _feed(self) -> None:
        """One worker's loop: the largest waiting check, until closed or a check failed."""
        worker: _Worker | None = None
        try:
            while True:
                with self._changed:
                    while not (self._closed or self._failures or self._waiting):
                        self._changed.wait()
                    if self._closed or self._failures:
                        return
                    check = heapq.heappop(self._waiting)[2]
                    self._running += 1
                error: FetchError | None = None
                try:
                    if worker is None:
                        worker = _Worker()
                        with self._changed:
                            self._procs.append(worker)
                    found, facts = worker.check(check.path, check.whole)
                    settle(
                        self.cache,
                        check.path,
                        check.sha256,
                        found,
                        facts,
                        whole=check.whole,
                        package=check.package,
                        filename=check.filename,
                        url=check.url,
                        built=check.built,
                    )
                except FetchError as exc:  # a damaged wheel, already evicted
                    error = exc
                except (OSError, ValueError, KeyError) as exc:  # a worker that died
                    error = FetchError(
                        f"{check.package}: checking {check.filename} failed ({exc}); "
                        "run the build again"
                    )
                with self._changed:
                    self._running -= 1
                    if error is not None:
                        self._failures.append(error)
                    self._changed.notify_all()
        finally:
            if worker is not None:
                worker.stop()

    def wait(self) -> None:
        """Until every check handed over is done; the first failure is raised."""
        with self._changed:
            while not self._failures and (self._waiting or self._running):
                self._changed.wait(0.2)  # timed: Ctrl-C gets in
            if self._failures:
                raise self._failures[0]

    def close(self) -> None:
        """Stop: waiting checks are dropped, the workers' input closed (a worker in the
        middle of a check is stopped after a second)."""
        with self._changed:
            self._closed = True
            self._waiting.clear()
            self._changed.notify_all()
            feeders, busy = list(self._feeders), self._running > 0
            procs = list(self._procs)
        if busy:  # the build stops: a check still running is not waited for
            for w in procs:
                with contextlib.suppress(OSError):
                    w.proc.kill()
        for feeder in feeders:
            feeder.join()
