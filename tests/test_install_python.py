"""install.sh on a server with no fitting Python: only a Python 3.6 on PATH, or no python3 at
all. Run with a bare environment (env -i), no network (unshare -n) and the pyenv CPython the
bundled one was made from hidden (a private mount namespace), the bundle's own CPython is
checked, unpacked into PREFIX/python, runs the installer, and the (fake) stack imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.airgap import extract, netns_prefix
from support.cli import run
from support.cpython import Archive, PythonBundle

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.rehearse.rehearsal import bare_path

pytestmark = pytest.mark.slow

IMPORTS = "import torch, vllm, verl, sys; print(sys.prefix, sys.base_prefix)"


def server(
    bundle: Path, home: Path, path: Path, hidden: Path | None, *args: str
) -> subprocess.CompletedProcess[str]:
    """./install.sh as a bare server would run it: env -i (HOME and PATH only), no network,
    and `hidden` (the CPython the bundled one came from) behind an empty directory."""
    empty = home / "empty"
    empty.mkdir(exist_ok=True)
    script = 'exec env -i HOME="$HOME" PATH="$P" "$@"'
    if hidden is not None:
        script = f'mount --bind "{empty}" "{hidden}" && {script}'
    cmd = [*netns_prefix(), "unshare", "-m", "sh", "-c", script, "sh"]
    env = {"HOME": str(home), "P": str(path), "PATH": os.environ["PATH"]}
    return subprocess.run(
        [*cmd, str(bundle / "install.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=600,
    )


def imports(prefix: Path, hidden: Path, home: Path) -> subprocess.CompletedProcess[str]:
    empty = home / "empty"
    empty.mkdir(exist_ok=True)
    script = 'mount --bind "$1" "$2" && exec env -i "$3" -I -c "$4"'
    python = str(prefix / "bin" / "python")
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(empty), str(hidden), python, IMPORTS],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def bundle(python_bundle: PythonBundle, tmp_path: Path) -> Path:
    return extract(python_bundle[0], tmp_path / "b")


def python36() -> str:
    found = sorted(Path.home().glob(".pyenv/versions/3.6.*/bin/python3.6"))
    if not found:
        pytest.skip("no Python 3.6 here (pyenv install 3.6)")
    return str(found[-1])


@pytest.mark.parametrize("old_python", [True, False], ids=["python3.6", "no-python3"])
def test_installs_with_no_fitting_python(
    bundle: Path, cpython_archive: Archive, tmp_path: Path, old_python: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = bare_path(tmp_path / "bin", python36() if old_python else None)
    prefix = home / "verl"
    proc = server(bundle, home, path, cpython_archive.original, "--prefix", str(prefix))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = mf.load(str(bundle))
    assert m.interpreter is not None
    own = prefix / "python" / "bin" / "python3.10"
    assert (prefix / "python" / ".sha256").read_text().strip() == m.interpreter.sha256
    why = (
        f"this server has no Python 3.10 ({path}/python3 is 3.6.15)"
        if old_python
        else "this server has no Python 3.10 (no python3 at all)"
    )
    assert f"the bundled CPython {cpython_archive.version}: {why}" in proc.stdout
    # The doctor says which interpreter and why, and finds its headers (no python3-dev asked).
    doctor = f"the bundled CPython {cpython_archive.version} at {own} ({why}); venv works"
    assert doctor in proc.stdout
    assert f"{prefix}/python/include/python3.10/Python.h" in proc.stdout
    got = imports(prefix, cpython_archive.original, home)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == [str(prefix), str(prefix / "python")]
    # A second run finds the unpacked CPython and the venv: nothing to redo.
    again = server(bundle, home, path, cpython_archive.original, "--prefix", str(prefix))
    assert again.returncode == 0, again.stderr
    assert "already installed" in again.stdout
    if old_python:
        return
    # The unpacked CPython damaged after it was checked (its mark file intact): unpacked again.
    data = own.read_bytes()
    own.write_bytes(data[: len(data) // 2])
    (prefix / "python" / "lib" / "python3.10" / "os.py").unlink()
    mended = server(bundle, home, path, cpython_archive.original, "--prefix", str(prefix))
    assert mended.returncode == 0, mended.stdout[-3000:] + mended.stderr[-3000:]
    assert "Fatal Python error" not in mended.stderr
    assert own.read_bytes() == data
    assert (prefix / "python" / "lib" / "python3.10" / "os.py").is_file()


def test_python_bundled_is_used_when_asked_and_a_damaged_archive_is_never_unpacked(
    bundle: Path, cpython_archive: Archive, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = bare_path(tmp_path / "bin", None)
    py310 = Path(cpython_archive.original, "bin", "python3.10")
    (path / "python3.10").symlink_to(py310)  # the server has a Python 3.10 of its own
    dry = server(
        bundle, home, path, None, "--prefix", str(home / "d"), "--python", "bundled", "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert "to be unpacked into" in dry.stdout and "--python bundled" in dry.stdout
    assert not (home / "d").exists()
    # --image with no --python: the image carries the bundle's CPython (issue 37), though this
    # server has a Python 3.10 of its own: the nodes that mount it need none at this path.
    image = ["--prefix", str(home / "d"), "--image", str(home / "verl.sqfs"), "--dry-run"]
    dry_image = server(bundle, home, path, None, *image)
    assert dry_image.returncode == 0, dry_image.stdout[-2000:] + dry_image.stderr
    assert "to be unpacked into" in dry_image.stdout and not (home / "d").exists()
    archive = bundle / mf.load(str(bundle)).interpreter.path  # type: ignore[union-attr]
    good = archive.read_bytes()
    archive.write_bytes(good[:-10] + bytes(10))
    bad = server(bundle, home, path, None, "--prefix", str(home / "p"), "--python", "bundled")
    assert bad.returncode == 3, bad.stderr
    assert bad.stderr.strip().splitlines() == [
        f"install.sh: the bundle is damaged: {archive.relative_to(bundle)} does not match its "
        "sha256; nothing was installed. Copy the tarball again."
    ]
    assert not (home / "p" / "python").exists()
    archive.write_bytes(good)
    proc = server(bundle, home, path, None, "--prefix", str(home / "p"), "--python", "bundled")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"this server's {path}/python3.10 would also do" in proc.stdout
    assert "the bundled CPython" in proc.stdout and "--python bundled" in proc.stdout


def test_dry_run_with_no_python_at_all_changes_nothing(
    bundle: Path, cpython_archive: Archive, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = bare_path(tmp_path / "bin", None)
    proc = server(
        bundle, home, path, cpython_archive.original, "--prefix", str(home / "p"), "--dry-run"
    )
    assert proc.returncode == 0, proc.stderr
    assert "dry run: nothing is changed" in proc.stdout
    assert "the bundled CPython" in proc.stdout
    assert not (home / "p").exists()
    assert shutil.which("python3", path=str(path)) is None


@pytest.mark.parametrize("old", [True, False], ids=["python3.6", "no-python3"])
def test_rehearse_with_no_system_python(
    python_bundle: PythonBundle,
    cpython_archive: Archive,
    capsys: pytest.CaptureFixture[str],
    old: bool,
) -> None:
    """rehearse --no-system-python: env -i, no network, a PATH with no Python (or a 3.6): the
    bundled CPython installs the stack and the post-install checks import it."""
    args = ["rehearse", str(python_bundle[0]), "--no-system-python", "--json"]
    args += ["--server-python", python36()] if old else []
    result = run(args, capsys)
    assert result.code == 0, result.out + result.err
    doc = json.loads(result.out)["result"]
    assert doc["ok"] is True
    assert doc["python"].startswith(f"the bundled CPython {cpython_archive.version} (PATH: ")
    assert ("Python 3.6)" if old else "no python3)") in doc["python"]
    statuses = {s["name"]: s["status"] for s in doc["steps"]}
    assert statuses["python"] == statuses["post-install checks"] == statuses["done"] == "ok"
    python_step = next(s for s in doc["steps"] if s["name"] == "python")
    assert f"(bundled CPython {cpython_archive.version})" in python_step["detail"]


def test_rehearse_with_no_system_python_needs_a_bundled_one(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(["rehearse", str(built_bundle[0]), "--no-system-python"], capsys)
    assert result.code == 2
    assert (
        result.err.strip()
        .splitlines()[-1]
        .endswith("--no-system-python: this bundle carries no Python; build it with --with-python")
    )
    bad = run(["rehearse", str(built_bundle[0]), "--server-python", "3.6"], capsys)
    assert bad.code == 2 and "--server-python needs --no-system-python" in bad.err
