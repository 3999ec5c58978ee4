"""The suite's own results built once per run (tests/support/shared.py): several processes
asking at once get one build and the same value; a build that failed is built again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.shared import once_in

TESTS = Path(__file__).resolve().parent
# One process asking. It says so on the FIFO first, then asks; the build waits until all of
# them have said so, so every other one asks while it builds (and, with no lock, each would
# build and wait for bytes the others took: the test would time out, not pass).
ASK = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from support.shared import once_in

root, log, fifo, count = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
with open(fifo, "wb") as fh:
    fh.write(b".")

def build(where):
    with open(fifo, "rb") as fh:
        got = 0
        while got < count:
            got += len(fh.read(count - got))
    with log.open("a") as fh:
        fh.write(f"{{os.getpid()}}\\n")
    (where / "made").write_text(str(os.getpid()))
    return {{"by": os.getpid(), "where": str(where)}}

print(json.dumps(once_in(root, "thing", build)))
"""


def test_processes_asking_at_once_get_one_build_and_the_same_value(tmp_path: Path) -> None:
    code = ASK.format(tests=str(TESTS))
    log, fifo, count = tmp_path / "builds.log", tmp_path / "asked", 4
    os.mkfifo(fifo)
    # Held open both ways here, so that no open of it blocks and the builder never reads an end.
    held = os.open(fifo, os.O_RDWR)
    argv = [sys.executable, "-c", code, str(tmp_path / "shared"), str(log), str(fifo)]
    asking: list[subprocess.Popen[str]] = []
    try:
        for _ in range(count):
            asking.append(subprocess.Popen([*argv, str(count)], stdout=subprocess.PIPE, text=True))
        values = []
        for proc in asking:
            out, _ = proc.communicate(timeout=120)  # a hang, not load: each takes a second
            assert proc.returncode == 0
            values.append(json.loads(out))
    finally:
        os.close(held)
        for proc in asking:  # none is left behind when the test fails
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    builders = log.read_text().split()
    assert len(builders) == 1
    assert all(v == values[0] for v in values)
    assert values[0]["by"] == int(builders[0])
    assert (Path(values[0]["where"]) / "made").read_text() == builders[0]


def test_a_build_that_raised_leaves_no_value_and_is_built_again(tmp_path: Path) -> None:
    root = tmp_path / "shared"

    def broken(where: Path) -> None:
        (where / "half").write_text("partial")
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        once_in(root, "thing", broken)
    assert not (root / "thing.json").exists()

    def sound(where: Path) -> list[object]:
        assert not (where / "half").exists()  # the partial directory was removed first
        return [str(where)]

    assert once_in(root, "thing", sound) == [str(root / "thing")]
    # Recorded: a later call reads it and never builds.
    assert once_in(root, "thing", broken) == [str(root / "thing")]
