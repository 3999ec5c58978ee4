"""install.sh --repair: a package uninstalled and a file deleted after a finished install are
put back, offline, by reinstalling exactly those distributions; the environment then equals the
fresh install file by file. A plain rerun does not (its phases are marked done) and says so."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import clean_environ
from support.airgap import READY, extract, install_into, netns_prefix

from verl_bundle.airgap.doctor import fingerprint

pytestmark = pytest.mark.slow

# What differs between two installs of one bundle into one prefix by design: the logs and the
# run's own records, the files' stat digests (a reinstalled file is a new inode), and bytecode
# (written when a module is first imported).
RUN_RECORDS = ("install.log", "checks.json", "checks.log", "events.jsonl", "fingerprint-stat.json")


@pytest.fixture
def bundle(built_bundle: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> Path:
    return extract(built_bundle[0], tmp_path / "bundle")


def snapshot(prefix: Path) -> dict[str, str]:
    """relative path -> sha256 (or the target of a link) of every file under `prefix`."""
    out = {}
    for path in sorted(prefix.rglob("*")):
        rel = path.relative_to(prefix).as_posix()
        if "__pycache__" in path.parts or path.name in RUN_RECORDS or rel.endswith(".log"):
            continue
        if path.is_symlink():
            out[rel] = "-> " + str(path.readlink())
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            out[rel] = "dir"
    return out


def site(prefix: Path) -> Path:
    return next((prefix / "lib").glob("python3*/site-packages"))


@pytest.mark.timeout(1200)  # five installs on a loaded 2-core machine
def test_repair_reinstalls_exactly_what_differs(bundle: Path, home: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    first = install_into(bundle, home, prefix, "--yes")
    assert first.returncode == READY, first.stdout + first.stderr
    fresh, fresh_print = snapshot(prefix), fingerprint.examine(str(prefix)).fingerprint
    assert fingerprint.read(str(prefix)) == fresh_print
    # The install keeps the server program: preflight runs from it after the bundle is gone.
    boot = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from verl_bundle.airgap.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    kept = prefix / ".verl-bundle" / "lib"
    proc = subprocess.run(
        [str(prefix / "bin" / "python"), "-I", "-B", "-c", boot, str(kept), "preflight", "--json"],
        capture_output=True,
        text=True,
        env=clean_environ(home),
    )
    assert json.loads(proc.stdout)["command"] == "preflight", proc.stderr

    # Break it: one distribution uninstalled by the venv's pip, one file of another deleted.
    pip = [*netns_prefix(), str(prefix / "bin" / "python"), "-m", "pip", "uninstall", "-y"]
    gone = subprocess.run(
        [*pip, "pylatexenc"], capture_output=True, text=True, env=clean_environ(home)
    )
    assert gone.returncode == 0, gone.stderr
    (site(prefix) / "torch" / "version" / "__init__.py").unlink()
    broken = fingerprint.examine(str(prefix))
    assert "pylatexenc" not in broken.entries()
    assert broken.damaged() == ["torch: torch/version/__init__.py missing"]

    # A plain rerun trusts its finished phases: not as bundled, and its fix says --repair.
    rerun = install_into(bundle, home, prefix, "--yes")
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    assert "missing pylatexenc" in rerun.stdout
    assert "./install.sh --repair" in rerun.stdout

    dry = install_into(bundle, home, prefix, "--repair", "--dry-run")
    assert dry.returncode == 0 and "pylatexenc 2.10 (not installed)" in dry.stdout, dry.stdout
    assert "torch 2.1.2+cu118 (torch/version/__init__.py is missing)" in dry.stdout
    assert snapshot(prefix) != fresh  # the dry run changed nothing

    repaired = install_into(bundle, home, prefix, "--yes", "--repair")
    out = repaired.stdout
    assert repaired.returncode == READY, out + repaired.stderr
    assert "--repair: 2 distribution(s) differ from the bundle" in out
    assert "removed torch 2.1.2+cu118 (torch/version/__init__.py is missing)" in out
    # Only the phases holding them were installed again; nothing else was removed.
    assert out.count("reinstalling what differs from the bundle (--repair)") == 2
    assert out.count("    removed ") == 1
    assert snapshot(prefix) == fresh
    assert fingerprint.examine(str(prefix), deep=True).fingerprint == fresh_print
    assert fingerprint.read(str(prefix)) == fresh_print

    again = install_into(bundle, home, prefix, "--yes", "--repair")
    assert again.returncode == READY
    assert "--repair: every distribution's files and version are as bundled" in again.stdout
    assert "reinstalling" not in again.stdout
