"""--prefix never takes over what it did not make, and --into-env says what it would change
(issue 8 #4 and its low item on silent downgrades)."""

from __future__ import annotations

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
