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


BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from verl_bundle.airgap.cli import main; sys.exit(main(sys.argv[1:]))"
)


def server(prefix: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The server program the install kept, run by the venv's python (as a node runs it)."""
    kept = prefix / ".verl-bundle" / "lib"
    return subprocess.run(
        [*netns_prefix(), str(prefix / "bin" / "python"), "-I", "-B", "-c", BOOT, str(kept), *args],
        capture_output=True,
        text=True,
        env=clean_environ(home),
        timeout=600,
    )


def doctor_unlisted(prefix: Path, home: Path, bundle: Path) -> tuple[dict[str, str], list[str]]:
    """The doctor's `unlisted` check and what its host facts name (doctor --deep --json)."""
    proc = server(prefix, home, "doctor", "--json", "--deep", "--bundle", str(bundle),
                  "--prefix", str(prefix), "--python", str(prefix / "bin" / "python"))  # fmt: skip
    doc = json.loads(proc.stdout)
    check = next(c for c in doc["result"]["checks"] if c["id"] == "unlisted")
    return check, doc["result"]["host"]["unlisted_since_install"]


@pytest.mark.timeout(900)
def test_repair_removes_a_link_leaving_the_prefix_and_installs_a_real_directory(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """A package directory replaced by a link to elsewhere: named by the doctor, and --repair
    removes the link (never its target) and reinstalls a real directory; the outside copy
    keeps its bytes and its inode."""
    prefix = tmp_path / "venv"
    first = install_into(bundle, home, prefix, "--yes")
    assert first.returncode == READY, first.stdout + first.stderr
    fresh = snapshot(prefix)
    outside = tmp_path / "outside" / "einops"
    outside.parent.mkdir()
    (site(prefix) / "einops").rename(outside)
    (site(prefix) / "einops").symlink_to(outside)
    with (outside / "__init__.py").open("a") as fh:
        fh.write("# changed outside the prefix\n")
    before = (outside / "__init__.py").read_bytes(), (outside / "__init__.py").stat().st_ino

    check, named = doctor_unlisted(prefix, home, bundle)
    assert check["status"] == "warn", check
    link = f"{site(prefix).relative_to(prefix)}/einops"
    assert named == [f"{link}: a symbolic link to {outside}, outside the prefix"]

    repaired = install_into(bundle, home, prefix, "--yes", "--repair")
    assert repaired.returncode == READY, repaired.stdout[-3000:] + repaired.stderr
    assert (
        f"    {link}: a symbolic link to {outside}, outside the prefix: removed (its target is "
        "left as it is)" in repaired.stdout
    )
    assert "einops 1.1.0 (einops/__init__.py is missing)" in repaired.stdout
    assert (outside / "__init__.py").read_bytes() == before[0]
    assert (outside / "__init__.py").stat().st_ino == before[1]
    real = site(prefix) / "einops"
    assert real.is_dir() and not real.is_symlink()
    assert snapshot(prefix) == fresh
    assert doctor_unlisted(prefix, home, bundle)[1] == []


@pytest.mark.timeout(900)
def test_what_no_record_lists_is_named_by_readiness_and_the_doctor_and_removed_by_repair(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """A planted .pth (it runs whenever the venv's python starts) and a stray package: the
    install recorded what was unlisted when it made the venv, so both are new. Readiness fails
    naming the .pth, the doctor names both, and --repair says so and removes them."""
    prefix = tmp_path / "venv"
    first = install_into(bundle, home, prefix, "--yes")
    assert first.returncode == READY, first.stdout + first.stderr
    fresh = snapshot(prefix)
    assert json.loads((prefix / ".verl-bundle" / "unlisted.json").read_text())["unlisted"] == []
    sp = site(prefix)
    marker = tmp_path / "pth-ran"
    (sp / "zz_planted.pth").write_text(f"import os; open({str(marker)!r}, 'a').write('ran\\n')\n")
    (sp / "stray").mkdir()
    (sp / "stray" / "__init__.py").write_text("")
    rel = sp.relative_to(prefix)

    ready = server(prefix, home, "readiness", "--bundle", str(bundle), "--json")
    assert ready.returncode == 5, ready.stdout[-2000:] + ready.stderr
    doc = json.loads(ready.stdout)
    unlisted = next(c for c in doc["result"]["checks"] if c["id"] == "unlisted")
    assert unlisted["status"] == "fail"
    assert (
        f"{rel}/zz_planted.pth (runs at every start of python; no RECORD lists it)"
        in (unlisted["summary"])
    )
    assert doc["verdict"]["line"].startswith("not ready to train: site-packages: 2 not installed")
    assert marker.is_file()  # it did run: readiness names it, it cannot stop it

    check, named = doctor_unlisted(prefix, home, bundle)
    assert check["status"] == "warn" and "--repair" in check["fix"]
    assert named == [
        f"{rel}/stray/ (no RECORD lists it)",
        f"{rel}/zz_planted.pth (runs at every start of python; no RECORD lists it)",
    ]

    repaired = install_into(bundle, home, prefix, "--yes", "--repair")
    assert repaired.returncode == READY, repaired.stdout[-3000:] + repaired.stderr
    for line in (
        f"    --repair: removed {rel}/stray/ (no RECORD lists it)",
        f"    --repair: removed {rel}/zz_planted.pth (runs at every start of python; no RECORD "
        "lists it)",
    ):
        assert line in repaired.stdout
    assert not (sp / "zz_planted.pth").exists() and not (sp / "stray").exists()
    assert snapshot(prefix) == fresh
