"""The bundle's ./doctor: the "too old" sentence instead of a traceback on Python 2.7 or 3.6,
the server code run isolated (nothing from PYTHONPATH, the current directory or bytecode in the
bundle), and a prefix the install cannot write to failing the disk check with its own fix."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SYSTEM_TMP, clean_environ
from support.doctor import PY, ROOT, needs

PYENV = Path.home() / ".pyenv" / "versions"
TOO_OLD = "too old: needs Python 3.8+; use --python PATH or PYTHON=PATH ./doctor"


def make_bundle(where: Path) -> Path:
    """An extracted bundle as assemble writes it: manifest, sums, ./doctor, lib/verl_bundle."""
    where.mkdir(parents=True)
    (where / "manifest.json").write_text(json.dumps(needs()))
    (where / "SHA256SUMS").write_text("")
    shutil.copy(ROOT / "templates" / "doctor.sh", where / "doctor")
    (where / "doctor").chmod(0o755)
    lib = where / "lib" / "verl_bundle"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text('"""verl-bundle server side."""\n')
    shutil.copytree(
        ROOT / "verl_bundle" / "airgap",
        lib / "airgap",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return where


def old_python(version: str) -> str:
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if not found:
        pytest.skip(f"no Python {version} under ~/.pyenv (pyenv install {version})")
    return str(found[-1])


def doctor(
    bundle: Path, *args: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle / "doctor"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cwd),
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("version", ["2.7", "3.6"])
def test_an_old_python_gets_the_sentence_not_a_traceback(tmp_path: Path, version: str) -> None:
    bundle = make_bundle(tmp_path / "bundle")
    old = old_python(version)
    env = clean_environ(tmp_path)
    by_option = doctor(bundle, "--python", old, env=env, cwd=tmp_path)
    assert by_option.returncode == 4
    assert by_option.stderr == (
        f"doctor: {old} is Python {version}, {TOO_OLD} with a Python 3.8 or newer "
        "(from the intranet OS mirror or the install media).\n"
    )
    # python3 on PATH is the old one: the same sentence.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(old)
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env.pop("PYTHON", None)
    on_path = doctor(bundle, "--json", env=env, cwd=tmp_path)
    assert on_path.returncode == 4 and "Traceback" not in on_path.stderr
    assert f"is Python {version}, {TOO_OLD}" in on_path.stderr


def test_a_python_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "bundle")
    env = clean_environ(tmp_path)
    nope = tmp_path / "nope"
    for given in (["--python", str(nope)], []):
        run_env = env if given else {**env, "PYTHON": str(nope)}
        missing = doctor(bundle, *given, env=run_env, cwd=tmp_path)
        assert missing.returncode == 2, missing.stderr
        assert missing.stderr.startswith(f"doctor: {nope}: no such file; use --python PATH")
    not_a_python = tmp_path / "python3"
    not_a_python.write_text("#!/bin/sh\nexit 1\n")
    not_a_python.chmod(0o755)
    broken = doctor(bundle, "--python", str(not_a_python), env=env, cwd=tmp_path)
    assert broken.returncode == 4 and "does not run: needs Python 3.8+" in broken.stderr


def test_the_doctor_runs_isolated(tmp_path: Path) -> None:
    """PYTHONPATH, a sitecustomize, a verl_bundle in the current directory and bytecode planted
    in the bundle are all ignored; nothing is written into the bundle."""
    bundle = make_bundle(tmp_path / "bundle")
    planted = tmp_path / "planted"
    (planted / "verl_bundle").mkdir(parents=True)
    hostile = "import sys; sys.stdout.write('PLANTED'); sys.exit(0)\n"
    (planted / "sitecustomize.py").write_text(hostile)
    (planted / "verl_bundle" / "__init__.py").write_text(hostile)
    # Bytecode that Python trusts without looking at the source (unchecked hash).
    fake = tmp_path / "fake.py"
    fake.write_text(hostile)
    for module in ("__init__.py", "__main__.py"):
        source = bundle / "lib" / "verl_bundle" / "airgap" / module
        py_compile.compile(
            str(fake),
            cfile=importlib.util.cache_from_source(str(source)),
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    before = sorted(p for p in bundle.rglob("*"))
    env = clean_environ(tmp_path)
    env.update(PYTHON=sys.executable, PYTHONPATH=str(planted))
    r = doctor(bundle, "--json", "--python", sys.executable, env=env, cwd=planted)
    assert "PLANTED" not in r.stdout + r.stderr
    assert r.returncode in (0, 4), r.stderr
    doc = json.loads(r.stdout)
    assert doc["command"] == "doctor" and doc["result"]["host"]["python"].startswith(PY)
    assert sorted(p for p in bundle.rglob("*")) == before


def test_doctor_sh_passes_shellcheck() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    r = subprocess.run(
        ["shellcheck", "-s", "sh", str(ROOT / "templates" / "doctor.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout


def run_doctor_cli(
    prefix: Path, bundle: Path, *wrap: str, python: str = sys.executable
) -> dict[str, dict[str, str]]:
    cmd = [*wrap, python, "-I", "-B", "-c", BOOT, str(ROOT), "doctor", "--bundle", str(bundle)]
    r = subprocess.run(
        [*cmd, "--prefix", str(prefix), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode in (0, 4), r.stderr
    checks = json.loads(r.stdout)["result"]["checks"]
    return {c["id"]: c for c in checks}


BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from verl_bundle.airgap.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_prefix_on_a_read_only_filesystem_fails_the_disk_check(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    ro = tmp_path / "ro"
    ro.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "ro", "none", str(ro)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a read-only filesystem here: {probe.stderr.strip()}")
    bundle = make_bundle(tmp_path / "bundle")
    wrap = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs -o ro none "$0" && exec "$@"', str(ro))
    disk = run_doctor_cli(ro / "venv", bundle, *wrap)["disk"]
    assert disk["status"] == "fail"
    assert disk["summary"] == f"install prefix {ro}/venv (on {ro}) is on a read-only filesystem"
    assert "--prefix DIR" in disk["fix"] and "-venv" not in disk["fix"]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can enter (pytest's tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="verl-doctor-test-", dir=SYSTEM_TMP))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_prefix_this_user_cannot_write_fails_the_disk_check(shared_dir: Path) -> None:
    bundle = make_bundle(shared_dir / "bundle")
    locked = shared_dir / "locked"
    locked.mkdir()
    wrap: tuple[str, ...] = ()
    python = sys.executable
    if os.geteuid() == 0:  # root writes anywhere: ask as an unprivileged user
        if shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists():
            pytest.skip("needs setpriv and /usr/bin/python3 to run as another user")
        wrap = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        python = "/usr/bin/python3"
        readable = subprocess.run([*wrap, python, "-c", f"open({str(ROOT / 'README.md')!r})"])
        if readable.returncode != 0:
            pytest.skip("the repository is not readable by an unprivileged user here")
    else:
        locked.chmod(0o555)
    disk = run_doctor_cli(locked / "venv", bundle, *wrap, python=python)["disk"]
    assert disk["status"] == "fail"
    assert "cannot write to" in disk["summary"] and str(locked) in disk["summary"]
    assert "--prefix DIR" in disk["fix"] and "write access" in disk["fix"]


def test_doctor_with_the_prefix_of_an_installed_venv_runs_its_python_and_says_what_it_checks(
    tmp_path: Path,
) -> None:
    """`./doctor --prefix VENV` on an environment already installed there: the doctor runs on
    that venv's own python (not python3 from PATH, another Python here), and its "ready to
    install" says it answers whether this server can install, not whether VENV can train."""
    other = old_python("3.10")
    bundle = make_bundle(tmp_path / "bundle")
    (bundle / "manifest.json").write_text(json.dumps(needs(python="3.10")))
    venv = tmp_path / "venv"
    subprocess.run([other, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = clean_environ(tmp_path)
    env["PATH"] = (
        f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"  # python3: 3.11
    )
    r = doctor(bundle, "--prefix", str(venv), "--json", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["result"]["host"]["python_executable"] == str(venv / "bin" / "python")
    assert doc["verdict"]["line"] == (
        "ready to install (this checks whether this server can install the bundle, not whether "
        f"the environment in {venv} can train: readiness --deep with its python says that)"
    )
    # A prefix that holds no environment yet: the plain answer.
    fresh = doctor(
        bundle, "--prefix", str(tmp_path / "new"), "--python", other, env=env, cwd=tmp_path
    )
    assert fresh.stdout.rstrip().splitlines()[-1] == "doctor: ready to install", fresh.stdout
