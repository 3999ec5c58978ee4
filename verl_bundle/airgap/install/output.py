"""What the installer says: to the terminal and to the install log, from the first line.

Until the prefix exists nothing may be written outside it, so the lines of the first steps
(verify, Python, doctor) are kept in memory and written to the log once it can be opened.
"""

from __future__ import annotations

import os
import sys
from typing import IO

from verl_bundle.airgap.render import encodable, printable


class Output:
    def __init__(self, to_stderr: bool = False) -> None:
        self.stream: IO[str] = sys.stderr if to_stderr else sys.stdout
        self._pending: list[str] = []
        self._log: IO[str] | None = None
        self.log_path: str | None = None

    def say(self, text: str = "") -> None:
        self._emit(self.stream, text)

    def err(self, text: str) -> None:
        for line in text.splitlines() or [""]:
            self._emit(sys.stderr, f"install.sh: {line}" if line else "")

    def _emit(self, stream: IO[str], text: str) -> None:
        shown = encodable(printable(text), stream)
        try:
            stream.write(shown + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop an install
        if self._log is not None:
            self._log.write(text + "\n")
            self._log.flush()
        else:
            self._pending.append(text)

    def open_log(self, path: str) -> bool:
        """Start writing the log at `path` (with everything said so far). False when it cannot
        be written (the install goes on without it)."""
        if self._log is not None:
            return True
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._log = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        except OSError:
            return False
        self.log_path = path
        for line in self._pending:
            self._log.write(line + "\n")
        self._log.flush()
        self._pending = []
        return True

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
