"""No install step is silent for minutes: while a step or a phase runs, the server program says
a line every PERIOD seconds (airgap/heartbeat.py), on a terminal or off one. The slow step here
is a real phase command (install/phases.py's runner) blocked on a FIFO the test holds: the test
reads the heartbeat, then releases the command; nothing waits on a clock."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import pytest

from verl_bundle.airgap import heartbeat as hb
from verl_bundle.airgap.contract.events import EventLog
from verl_bundle.airgap.install import phases as ph
from verl_bundle.airgap.install.output import Output
from verl_bundle.airgap.install.stepping import Steps


class Said:
    """Output.say's lines as a queue (each `next` waits for the next line)."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()

    def __call__(self, text: str = "") -> None:
        self.lines.put(text)

    def until(self, words: str) -> list[str]:
        seen = []
        while True:
            line = self.lines.get(timeout=120)  # for a hang, not a measure
            seen.append(line)
            if words in line:
                return seen


def _blocked_command(fifo: Path) -> ph.Command:
    """A phase command that prints nothing until the test writes to `fifo`."""
    return ph.Command(("sh", "-c", 'read line < "$1"; echo "installed $line"', "sh", str(fifo)))


def test_the_period_is_thirty_seconds() -> None:
    assert hb.PERIOD == 30.0
    assert hb.elapsed(45.2) == "45 s" and hb.elapsed(125) == "2m05s"


def test_a_silent_phase_command_gets_a_line_each_period(tmp_path: Path) -> None:
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    said = Said()
    codes: list[int] = []
    with (tmp_path / "phase-torch.log").open("w") as log:

        def phase() -> None:
            with hb.heartbeat(said, "phase torch", every=0.05):
                codes.append(ph.run_logged(_blocked_command(fifo), log, said))

        runner = threading.Thread(target=phase)
        runner.start()
        try:
            before = said.until("still running")
            assert before[-1].startswith("    phase torch: still running, ")
            assert before[-1].endswith(" so far")
            assert not any("installed" in line for line in before)
        finally:
            with fifo.open("w") as release:  # the command goes on and ends
                release.write("torch\n")
            runner.join(timeout=120)
    assert codes == [0]
    rest = said.until("installed torch")
    assert rest[-1] == "installed torch"
    assert "installed torch" in (tmp_path / "phase-torch.log").read_text()


def test_every_install_step_beats_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step (here post-install) announced by its heading, then a line each period, through
    the installer's own Output (to the terminal and the install log)."""
    monkeypatch.setattr(hb, "PERIOD", 0.05)
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    said = Said()
    out = Output()
    monkeypatch.setattr(out, "say", said)
    steps = Steps(out, EventLog())
    done = threading.Event()

    def run() -> None:
        with (
            steps.step("post-install", "post-install checks"),
            (tmp_path / "c.log").open("w") as log,
        ):
            ph.run_logged(_blocked_command(fifo), log, said)
        done.set()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        seen = said.until("still running")
        assert seen[0] == "==> [6/7] post-install checks"
        assert seen[-1].startswith("    post-install checks: still running, ")
    finally:
        with fifo.open("w") as release:
            release.write("checks\n")
        runner.join(timeout=120)
    assert done.is_set()
    assert [e["status"] for e in steps.events.events if e.get("step") == "post-install"] == [
        "start",
        "ok",
    ]
