"""The server program's one progress helper: while a long step runs (verify, a phase's install,
the post-install checks), a line every PERIOD seconds says it is still going and for how long,
on a terminal and off one (a log, `nohup`, a batch job), so no step is silent for minutes.
The step's own first line (install.sh's "==> [n/7] ..." heading) says when it starts.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

PERIOD = 30.0  # seconds between two lines of one step that says nothing of its own


def elapsed(seconds: float) -> str:
    """ "45 s", "2m05s" """
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


@contextlib.contextmanager
def heartbeat(say: Callable[[str], None], what: str, every: float | None = None) -> Iterator[None]:
    """While the body runs, `say("    WHAT: still running, 1m00s so far")` every `every`
    seconds (default PERIOD; from a thread: `say` must be safe to call from one, as
    install/output.py's is)."""
    period = PERIOD if every is None else every
    stop = threading.Event()
    began = time.monotonic()

    def beat() -> None:
        while not stop.wait(period):
            say(f"    {what}: still running, {elapsed(time.monotonic() - began)} so far")

    thread = threading.Thread(target=beat, name=f"heartbeat {what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
