"""install.sh ends every run with the one verdict as its last line and its exit code: 0 only when
ready to train, 5 when installed as bundled but not ready (a phase left out), 1 when a step
failed; a truncated copy is said at once and in a few lines; a declined prompt is not success;
a file two distributions both wrote does not break a resumed install.

The toy stack (tests/support/stack.py) is verl 0.2's shape with the real Hydra: installed whole it is
ready to train; its actor imports flash_attn, so leaving that phase out makes it not ready.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
from pathlib import Path

import pytest
from conftest import clean_environ
from support.airgap import netns_prefix, python310, run_install
from support.bundlefix import add_wheel
from support.pkgindex import build_wheel

from verl_bundle.airgap.errors import EXIT_DAMAGED, EXIT_FAILED, EXIT_NOT_READY

pytestmark = pytest.mark.slow


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout.rstrip("\n").splitlines()[-1]


def test_a_skipped_phase_the_trainer_needs_ends_not_ready_naming_it(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    proc = run_install(
        bundle,
        home,
        "--prefix",
        str(tmp_path / "v"),
        "--python",
        python310(),
        "--yes",
        "--skip-phase",
        "flash-attn",
        "--events",
        str(events),
    )
    assert proc.returncode == EXIT_NOT_READY, proc.stdout + proc.stderr
    line = last_line(proc)
    assert line == (
        "not ready to train: verl.workers.actor.dp_actor: flash_attn is not installed "
        "(phase flash-attn was left out) (and 1 more)"
    )
    # The fix names the way back, and the way back is an option install.sh takes.
    assert "without --skip-phase flash-attn" in proc.stdout
    assert " ready to train" not in proc.stdout.replace("not ready to train", "")
    result = [json.loads(x) for x in events.read_text().splitlines() if '"result"' in x][-1]
    assert result["exit_code"] == EXIT_NOT_READY and result["verdict"]["line"] == line
    # --json: the same verdict in the envelope.
    again = run_install(
        bundle,
        home,
        "--prefix",
        str(tmp_path / "v"),
        "--python",
        python310(),
        "--yes",
        "--skip-phase",
        "flash-attn",
        "--json",
    )
    doc = json.loads(again.stdout)
    assert again.returncode == EXIT_NOT_READY and doc["ok"] is False
    assert doc["verdict"] == {"code": 5, "state": "not-ready", "line": line, "ok": False}
    assert doc["result"]["checks"]["readiness"]


@pytest.mark.parametrize("phase", ["torch", "wheels", "verl"])
def test_leaving_out_any_phase_ends_not_ready_naming_it(
    bundle: Path, home: Path, tmp_path: Path, phase: str
) -> None:
    """The README's table: a phase left out is 5, whichever it is, and the last line names it;
    what the phase would have installed is never said as a failed step (1) with a fix that
    adds it to the profile."""
    proc = run_install(
        bundle,
        home,
        *("--prefix", str(tmp_path / "v"), "--python", python310(), "--yes"),
        *("--skip-phase", phase),
    )
    assert proc.returncode == EXIT_NOT_READY, proc.stdout + proc.stderr
    line = last_line(proc)
    assert line.startswith("not ready to train: "), line
    assert f"phase {phase} was left out" in line, line
    assert f"without --skip-phase {phase}" in proc.stdout
    assert "to the profile" not in proc.stdout


def test_the_whole_toy_stack_installs_ready_to_train(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    proc = run_install(
        bundle, home, "--prefix", str(tmp_path / "v"), "--python", python310(), "--yes", "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == {
        "code": 0,
        # verl 0.2 has no dry run: its trainer's start is named as not proven.
        "state": "ready-cpu",
        "line": "ready to train on the CPU side (PPO with FSDP and vLLM rollout); not proven "
        "here: the trainer's start (no dry run for verl 0.2.0.post2)",
        "ok": True,
    }
    ready = {c["id"]: c["status"] for c in doc["result"]["checks"]["readiness"]}
    assert ready["import:flash_attn"] == "ok" and ready["config"] == "ok"


def test_a_truncated_copy_is_said_at_once_in_a_few_lines(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    for w in wheels[3:]:
        w.unlink()
    proc = run_install(bundle, home, "--prefix", str(tmp_path / "v"), "--yes")
    assert proc.returncode == EXIT_DAMAGED, proc.stdout + proc.stderr
    assert f"{len(wheels) - 3} file(s) missing: wheels/" in proc.stderr
    assert len(proc.stderr.splitlines()) < 12, proc.stderr
    assert "==> [3/7] doctor" not in proc.stdout  # the damage is said before the doctor runs
    assert last_line(proc) == "not installed: the bundle is damaged or refused (above)"
    assert not (tmp_path / "v").exists()


def test_a_declined_prompt_is_not_success(bundle: Path, home: Path, tmp_path: Path) -> None:
    """A person answering no at the prompt: nothing installed, and a non-zero exit."""
    environ = clean_environ(home)
    environ["HOME"] = str(home)
    cmd = [*netns_prefix(), str(bundle / "install.sh"), "--prefix", str(tmp_path / "v")]
    cmd += ["--python", python310(), "--skip-doctor"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: install.sh on a terminal
        os.chdir(home)
        os.execvpe(cmd[0], cmd, environ)  # noqa: S606 - the program itself, on a pty
    out = b""
    answered = False
    while True:
        ready, _, _ = select.select([fd], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"[y/N]" in out:
            os.write(fd, b"n\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert answered, text
    assert os.waitstatus_to_exitcode(status) == EXIT_FAILED, text
    assert "nothing was installed: the answer was 'n', not yes" in text
    assert not (tmp_path / "v" / "bin" / "python").exists()


def test_a_script_two_distributions_write_resumes_exactly(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """fastapi and fastapi-cli both list bin/fastapi: after an interrupted install, the file
    the later one wrote is not 'differs from its RECORD' for the other."""
    # Like fastapi and fastapi-cli: two distributions, one console script of the same name.
    script = {"webtool-0.115.0.data/scripts/webtool": "#!python\nprint('one')\n"}
    other = {"webtool_cli-0.0.5.data/scripts/webtool": "#!python\nprint('two')\n"}
    one = build_wheel(tmp_path / "w", "webtool", "0.115.0", modules={"webtool": ""}, data=script)
    two = build_wheel(
        tmp_path / "w", "webtool-cli", "0.0.5", modules={"webtool_cli": ""}, data=other
    )
    for wheel in (one, two):
        add_wheel(bundle, wheel, "wheels")
    prefix = tmp_path / "v"
    first = run_install(bundle, home, "--prefix", str(prefix), "--python", python310(), "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    # As after Ctrl-C inside the phase: it started and never finished (install/state.py).
    state = prefix / ".verl-bundle"
    (state / "done-wheels").unlink()
    (state / "started-wheels").write_text("\n")
    again = run_install(bundle, home, "--prefix", str(prefix), "--python", python310(), "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "differs from its RECORD" not in again.stdout
    assert re.search(r"^\s*ok\s+files\s", again.stdout, re.M), again.stdout
