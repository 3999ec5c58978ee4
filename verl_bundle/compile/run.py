"""The compile's process: run in a session of its own with its output in the compile log, a
progress line whenever ninja finishes an object and at least every PERIOD seconds, and stopped
whole however the build ends early (compile/stop.py)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from verl_bundle.compile.stop import MARK, new_mark, shielded, stop_tree
from verl_bundle.compile.watch import CompileWatch
from verl_bundle.compile.workdir import ELAPSED
from verl_bundle.progress import PERIOD, Reporter

POLL = 1.0  # seconds between two looks at a running compile's log


def run_logged(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    log: Path,
    watch: CompileWatch,
    reporter: Reporter,
    resumed: bool = False,
) -> int:
    """Run the compile with its output in `log`; a progress line whenever ninja finishes an
    object, and at least every PERIOD seconds. Stopped in any way (Ctrl-C, SIGTERM, an error
    here), the compile goes whole: every process it started (compile/stop.py)."""
    with log.open("a" if resumed else "w") as out:
        if resumed:
            out.write(f"\n=== resumed in {cwd} ===\n")
            out.flush()
        watch.offset = out.tell()
        mark = new_mark()
        proc = subprocess.Popen(
            list(args),
            cwd=cwd,
            env={**env, MARK: mark},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        said = time.monotonic()
        try:
            while True:
                try:
                    return proc.wait(timeout=POLL)
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if watch.read() or now - said >= PERIOD:
                        said = now
                        ran = watch.earlier + now - watch.started
                        (cwd / ELAPSED).write_text(f"{int(ran)}\n")  # for a resume after a kill
                        reporter.progress(watch.line(now))
        except BaseException:
            with shielded():
                stop_tree(proc.pid, proc.poll, mark)
                proc.wait()
            raise
