"""A full disk is one line, never a traceback: install.sh's log on a filesystem that fills up is
given up in one line and the install goes on to its verdict; a full disk under the server program
elsewhere ends in one line naming where and what to do (exit 1).

The full filesystem is a real 8 KB tmpfs mounted in a private mount namespace (`unshare -m`), so
nothing is left mounted when the test ends.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import clean_environ
from support.airgap import netns_prefix, python310

from verl_bundle.airgap.errors import EXIT_FAILED, EXIT_OK

pytestmark = pytest.mark.slow


def full_tmpfs(where: Path) -> tuple[str, ...]:
    """The command prefix that runs a command with a full 8 KB tmpfs mounted at `where`."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    where.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=8k", "none", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.strip()}")
    # Mounted, then filled to the last block, so the first write there fails.
    mount = (
        'mount -t tmpfs -o size=8k none "$0" && (cat /dev/zero > "$0/fill") 2>/dev/null; exec "$@"'
    )
    return ("unshare", "-m", "sh", "-c", mount, str(where))


def install_beside_a_full_disk(
    bundle: Path, home: Path, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """install.sh (offline, Python 3.10) into tmp_path/v with a full tmpfs at tmp_path/full."""
    cmd = [
        *full_tmpfs(tmp_path / "full"),
        *netns_prefix(),
        str(bundle / "install.sh"),
        *("--prefix", str(tmp_path / "v"), "--python", python310(), "--yes", *args),
    ]
    env = clean_environ(home)
    env["HOME"] = str(home)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=home, timeout=600)


def test_a_log_on_a_full_disk_is_given_up_in_one_line(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    full = tmp_path / "full"
    log = full / "install.log"
    proc = install_beside_a_full_disk(bundle, home, tmp_path, "--log", str(log))
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said
    lost = [line for line in proc.stderr.splitlines() if "can no longer be written" in line]
    assert lost == [
        f"install.sh: the log {log} can no longer be written (No space left on device); "
        "going on without it"
    ], proc.stderr
    # The install itself went on to its verdict (the toy stack is ready to train).
    assert proc.returncode == EXIT_OK, said
    assert proc.stdout.rstrip().splitlines()[-1].startswith("ready to train"), proc.stdout


def test_events_on_a_full_disk_end_the_install_in_one_line(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    full = tmp_path / "full"
    events = full / "events.jsonl"
    proc = install_beside_a_full_disk(bundle, home, tmp_path, "--events", str(events))
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == EXIT_FAILED, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"install.sh: No space left on device writing {events}; free space there "
        "(df -h shows how much is left) and run the same command again"
    )
    assert not (tmp_path / "v").exists()  # it stopped before the venv: nothing half-made
