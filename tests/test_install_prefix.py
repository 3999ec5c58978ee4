"""--prefix never takes over what it did not make, and --into-env says what it would change
(issue 8 #4 and its low item on silent downgrades)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.airgap import install_into, python310, run_install
from support.pkgindex import build_wheel

pytestmark = pytest.mark.slow


def listing(root: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (p.relative_to(root).as_posix(), p.read_bytes() if p.is_file() else b"")
        for p in root.rglob("*")
    )


def test_a_prefix_that_is_not_a_venv_it_made_is_refused(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    system = tmp_path / "usr-local"  # what a mistaken --prefix /usr/local points at
    (system / "bin").mkdir(parents=True)
    (system / "bin" / "python3").symlink_to(python310())
    (system / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    (system / "lib" / "python3.10" / "site-packages" / "mine.py").write_text("x = 1\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me\n")
    theirs = tmp_path / "their venv"
    subprocess.run([python310(), "-m", "venv", "--without-pip", str(theirs)], check=True)
    cases = {
        system: "an existing Python installation, not a venv this installer made",
        notes: "a directory that is not empty and not a venv this installer made",
        theirs: "a venv this installer did not make",
    }
    for prefix, what in cases.items():
        before = listing(prefix)
        proc = install_into(bundle, home, prefix, "--yes")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"install.sh: --prefix {prefix}: {what}; give a new directory, or --into-env "
            f"{prefix} to install into it on purpose"
        ]
        assert listing(prefix) == before  # not a byte changed, no pyvenv.cfg written
    empty = tmp_path / "empty"
    empty.mkdir()
    dry = run_install(bundle, home, "--prefix", str(empty), "--dry-run")
    assert dry.returncode == 0 and "(new venv)" in dry.stdout


def test_a_second_install_on_one_prefix_is_refused_in_one_line(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    import fcntl
    import os

    prefix = tmp_path / "venv"
    prefix.mkdir()
    fd = os.open(prefix, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the first install.sh, still running
        proc = install_into(bundle, home, prefix, "--yes")
    finally:
        os.close(fd)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"install.sh: another install.sh is installing into {prefix}; wait for it to end, then "
        "run this one again"
    ]
    assert list(prefix.iterdir()) == []
    bad = install_into(bundle, home, Path("/proc/self/verl-prefix"), "--yes")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "install.sh: --prefix /proc/self/verl-prefix: cannot make or open it (" in bad.stderr


def test_into_env_says_what_it_would_change_and_asks(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "conda env"
    subprocess.run([python310(), "-m", "venv", str(env_dir)], check=True, capture_output=True)
    newer = build_wheel(tmp_path / "w", "aioprometheus", "9.0.0")
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", str(newer)],
        check=True,
        capture_output=True,
    )
    proc = run_install(bundle, home, "--into-env", str(env_dir), "--skip-doctor")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "aioprometheus 9.0.0 -> 1.0.0" in proc.stdout
    assert "pass --yes to accept" in proc.stderr
    site = env_dir / "lib" / "python3.10" / "site-packages"
    assert not list(site.glob("torch*")) and any(site.glob("aioprometheus-9.0.0.dist-info"))


@pytest.mark.timeout(900)
def test_links_planted_where_the_install_writes_are_never_followed(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """Links planted in the state directory under the names a rerun writes (phase logs,
    markers, the post-install result, the fingerprint, uv's cache, the kept server program)
    and given as --log or --events: each is replaced by a real file, or refused, and the files
    and directories they lead to keep what they held."""
    import json

    prefix = tmp_path / "venv"
    first = install_into(bundle, home, prefix, "--yes")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    state = prefix / ".verl-bundle"
    outside = tmp_path / "outside"
    outside.mkdir()
    files = (
        "phase-wheels.log",
        "checks.json",
        "checks.log",
        "fingerprint",
        "fingerprint.json",
        "installed.json",
        "install.log",
    )
    for name in files:
        (outside / name).write_text(f"precious {name}\n")
        (state / name).unlink(missing_ok=True)
        (state / name).symlink_to(outside / name)
    for name in ("uv-cache", "lib"):
        (outside / name).mkdir()
        if (state / name).is_dir():
            import shutil

            shutil.rmtree(state / name)
        (state / name).symlink_to(outside / name)
    site = next(prefix.glob("lib/python3*/site-packages"))
    (site / "einops" / "__init__.py").unlink()  # --repair reinstalls the phase holding it

    events = tmp_path / "events.jsonl"
    events.symlink_to(outside / "installed.json")
    refused = install_into(bundle, home, prefix, "--yes", "--events", str(events))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"--events {events}: a symbolic link or not a regular file" in refused.stderr

    log = tmp_path / "my.log"
    log.symlink_to(outside / "checks.log")
    repaired = install_into(bundle, home, prefix, "--yes", "--repair", "--log", str(log))
    assert repaired.returncode == 0, repaired.stdout[-3000:] + repaired.stderr
    assert f"cannot write the log {log}" in repaired.stderr and "symbolic link" in repaired.stderr
    assert "reinstalling what differs from the bundle (--repair)" in repaired.stdout

    for name in files:
        assert (outside / name).read_text() == f"precious {name}\n", name
    assert list((outside / "uv-cache").iterdir()) == [] and list((outside / "lib").iterdir()) == []
    for name in ("phase-wheels.log", "checks.json", "fingerprint", "installed.json"):
        assert (state / name).is_file() and not (state / name).is_symlink(), name
    assert json.loads((state / "checks.json").read_text())["command"] == "postinstall"
    assert (state / "lib").is_dir() and not (state / "lib").is_symlink()
    assert not os.path.lexists(state / "uv-cache")  # the link removed, uv's cache gone
    assert (site / "einops" / "__init__.py").is_file()
