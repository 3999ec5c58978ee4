"""What the installer says: to the terminal (through the server program's one printer,
render.say) and to the install log, from the first line.

Until the prefix exists nothing may be written outside it, so the lines of the first steps
(verify, Python, doctor) are kept in memory and written to the log once it can be opened.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import IO, Callable

from verl_bundle.airgap.confined import append_outside
from verl_bundle.airgap.render import say


class Output:
    def __init__(self, to_stderr: bool = False) -> None:
        self.stream: IO[str] = sys.stderr if to_stderr else sys.stdout
        self._pending: list[str] = []
        self._log: IO[str] | None = None
        self.log_path: str | None = None
        self.why = ""  # why the log could not be opened
        self._lock = threading.RLock()  # a step's heartbeat (a thread) says lines too

    def say(self, text: str = "") -> None:
        self._emit(self.stream, text)

    def err(self, text: str) -> None:
        for line in text.splitlines() or [""]:
            self._emit(sys.stderr, f"install.sh: {line}" if line else "")

    def _emit(self, stream: IO[str], text: str) -> None:
        with self._lock:
            self._emit_now(stream, text)

    def _emit_now(self, stream: IO[str], text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed terminal must not stop it
            say(text, stream)
        if self._log is not None:
            try:
                self._log.write(text + "\n")
                self._log.flush()
            except OSError as exc:  # a full disk under --log must not stop the install
                self._lost(exc)
        else:
            self._pending.append(text)

    def _lost(self, exc: OSError) -> None:
        """The log can no longer be written: say so once, in one line, and go on without it."""
        log, self._log = self._log, None
        with contextlib.suppress(OSError):
            if log is not None:
                log.close()
        why = exc.strerror or str(exc)
        self.err(f"the log {self.log_path} can no longer be written ({why}); going on without it")
        self.log_path = None

    def open_log(self, path: str, opener: Callable[[], IO[str]] | None = None) -> bool:
        """Start writing the log at `path` (with everything said so far), opened by `opener`
        (the state directory's, for its install.log) or as a file the operator named
        (--log FILE: confined.append_outside, a link or FIFO there refused). False when it
        cannot be written (the install goes on without it, saying why)."""
        if self._log is not None:
            return True
        try:
            self._log = opener() if opener is not None else append_outside(path, "--log")
        except OSError as exc:
            self.why = getattr(exc, "message", None) or exc.strerror or str(exc)
            return False
        self.log_path = path
        pending, self._pending = self._pending, []
        try:
            for line in pending:
                self._log.write(line + "\n")
            self._log.flush()
        except OSError as exc:
            self._lost(exc)
            return False
        return True

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
