"""A rerun always resumes (issue 8 #1) and a newer bundle upgrades in place (issue 8 #5).

Interrupted inside a large wheel (kill -9 or Ctrl-C while its files appear and before its
RECORD is written), the rerun ends in the same state as an uninterrupted install: the same
distributions at the same versions, the same files with the same RECORD hashes."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from support.airgap import extract, install_into, start_install
from support.bundlefix import drop_package, replace_wheel
from support.shared import Value, once

from verl_bundle.airgap.contract.events import read_events

pytestmark = pytest.mark.slow

BIG = "transformers"


@pytest.fixture(scope="module")
def big_bundle(
    built_bundle: tuple[Path, Path, dict[str, object]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The cu118 bundle with a transformers wheel of 20,000 files: it takes uv or pip a
    while to unpack, so an interruption can land inside it. Made once per run (read-only)."""

    def make(where: Path) -> Value:
        root = extract(built_bundle[0], where)
        replace_wheel(root, BIG, bulk=20000)
        return str(root)

    return Path(str(once(tmp_path_factory, "resume.big", make)))


def site(prefix: Path) -> Path:
    return prefix / "lib" / "python3.10" / "site-packages"


def snapshot(prefix: Path) -> dict[str, str]:
    """Every installed distribution's RECORD (site-packages rows: scripts carry the prefix in
    their shebang) and every file under site-packages."""
    out: dict[str, str] = {}
    for record in sorted(site(prefix).glob("*.dist-info/RECORD")):
        rows = [r for r in record.read_text().splitlines() if not r.startswith("../")]
        out[record.parent.name] = "\n".join(sorted(rows))
    files = sorted(
        p.relative_to(site(prefix)).as_posix()
        for p in site(prefix).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    out["(files)"] = "\n".join(files)
    return out


def _inside_big_wheel(prefix: Path) -> bool:
    """Its files are appearing and its RECORD is not written yet."""
    return (site(prefix) / BIG / "_bulk").is_dir() and not any(
        site(prefix).glob(f"{BIG}-*.dist-info/RECORD")
    )


def _interrupt(bundle: Path, prefix: Path, home: Path, sig: int) -> bool:
    proc = start_install(bundle, home, prefix, "--yes", "--skip-doctor")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if _inside_big_wheel(prefix):
            os.killpg(proc.pid, sig)
            proc.wait(timeout=120)
            return _inside_big_wheel(prefix) or not any(
                site(prefix).glob(f"{BIG}-*.dist-info/RECORD")
            )
        time.sleep(0.0005)
    proc.kill()
    proc.wait()
    return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_interrupted_inside_a_large_wheel_resumes_to_the_same_state(
    big_bundle: Path, home: Path, tmp_path: Path, sig: int
) -> None:
    reference = tmp_path / "reference"
    done = install_into(big_bundle, home, reference)
    assert done.returncode == 0, done.stdout + done.stderr
    for attempt in range(5):
        prefix = tmp_path / f"venv{attempt}"
        if _interrupt(big_bundle, prefix, home, sig):
            break
    else:
        pytest.fail("could not interrupt the install inside the large wheel in 5 tries")
    events = tmp_path / "events.jsonl"
    again = install_into(
        big_bundle,
        home,
        prefix,
        "--yes",
        "--skip-doctor",
        "--events",
        str(events),
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "uninstall-no-record-file" not in again.stdout + again.stderr
    wheels = next(e for e in read_events(str(events)) if e.get("phase") == "wheels")
    assert wheels["why"] == "interrupted"
    # every installed file checked against its RECORD
    assert re.search(r"^\s*ok\s+files\s", again.stdout, re.M), again.stdout
    assert snapshot(prefix) == snapshot(reference)
    # ... and a third run has nothing left to do.
    third = install_into(big_bundle, home, prefix)
    assert third.returncode == 0 and third.stdout.count("already installed") == 4


def test_a_rebuilt_bundle_upgrades_in_place(
    built_bundle: tuple[Path, Path, dict[str, object]], home: Path, tmp_path: Path
) -> None:
    """One pin changed and one package gone: the changed phase is installed again, the others
    are left alone, the package that left is removed, and a rerun changes nothing."""
    prefix = tmp_path / "venv"
    old = extract(built_bundle[0], tmp_path / "old")
    first = install_into(old, home, prefix, "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    assert any(site(prefix).glob("pylatexenc-*.dist-info"))
    new = extract(built_bundle[0], tmp_path / "new")
    replace_wheel(new, "aioprometheus", version="1.0.1")
    drop_package(new, "pylatexenc")
    events = tmp_path / "events.jsonl"
    upgrade = install_into(
        new,
        home,
        prefix,
        "--yes",
        "--events",
        str(events),
    )
    # pylatexenc left the bundle, but the toy verl still requires it: installed as bundled, and
    # the verdict names the hole (exit 5), so a careless rebuild never passes as ready.
    assert upgrade.returncode == 5, upgrade.stdout + upgrade.stderr
    # The bundled uv checks the requirements (uv pip check), in its own words.
    assert (
        upgrade.stdout.rstrip()
        .splitlines()[-1]
        .startswith("not ready to train: uv pip check: The package `verl` requires `pylatexenc`")
    )
    phases = {
        e["phase"]: (e["status"], e["why"])
        for e in read_events(str(events))
        if e["event"] == "phase" and e["status"] != "start"
    }
    assert phases == {
        "torch": ("skip", "already installed"),
        "wheels": ("ok", "changed"),
        "flash-attn": ("skip", "already installed"),
        "verl": ("skip", "already installed"),
    }
    assert [p.name for p in site(prefix).glob("aioprometheus-*.dist-info")] == [
        "aioprometheus-1.0.1.dist-info"
    ]
    assert not list(site(prefix).glob("pylatexenc*"))
    assert "removed pylatexenc 2.10: no longer in the bundle" in upgrade.stdout
    # every distribution at the new bundle's version
    assert re.search(r"^\s*ok\s+versions\s", upgrade.stdout, re.M), upgrade.stdout
    rerun = install_into(new, home, prefix, "--yes")
    assert rerun.returncode == 5, rerun.stdout + rerun.stderr
    assert rerun.stdout.count("already installed") == 4


def test_a_dist_stopped_between_its_record_and_installer_is_incomplete(tmp_path: Path) -> None:
    # uv writes RECORD before INSTALLER and REQUESTED: a kill -9 between them left a
    # distribution that looked whole to the cheap check, and a resume kept it without INSTALLER.
    from verl_bundle.airgap.install import dists

    site = tmp_path / "site"
    info = site / "demo-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "demo.py").write_text("x = 1\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        "demo.py,,\ndemo-1.0.dist-info/METADATA,,\ndemo-1.0.dist-info/INSTALLER,,\n"
        "demo-1.0.dist-info/RECORD,,\n"
    )
    dist = dists.Dist("demo", "1.0", str(info), str(site))
    assert dists.problem(dist, False) == "demo-1.0.dist-info/INSTALLER is missing"
    (info / "INSTALLER").write_text("uv\n")
    assert dists.problem(dist, False) is None
    # Stopped earlier still: the RECORD is the wheel's own, which never lists INSTALLER (pip and
    # uv add that row last), and every file it lists is there.
    (info / "RECORD").write_text(
        "demo.py,,\ndemo-1.0.dist-info/METADATA,,\ndemo-1.0.dist-info/RECORD,,\n"
    )
    why = "its RECORD does not list INSTALLER (the installer stopped before its last step)"
    assert dists.problem(dist, False) == why
    assert dists.problem(dist, True) == why
