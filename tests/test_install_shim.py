"""install.sh as a POSIX sh shim: any shell, no HOME, no usable Python, and code the bundle does
not list never runs (issue 8 #6)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, clean_environ
from support.airgap import python310, run_install

from verl_bundle.bundle.plan import render_install

pytestmark = pytest.mark.slow

CONTEXT = {
    "name": "verl-bundle-cu118-cp310-manylinux_2_17_x86_64",
    "version": "0",
    "profile": "cu118",
    "python_version": "3.10",
    "python_tag": "cp310",
    "platform": "manylinux_2_17_x86_64",
    "cuda": "11.8",
    "phases": ["torch", "wheels"],
    # A bundle that carries a CPython (the longest form of the shim, for shellcheck).
    "python_archive": "python/cpython-3.10.15+20241016-x86_64-unknown-linux-gnu-install_only.tar.gz",
    "python_sha256": "0" * 64,
    "served_sha256": "0" * 64,
}


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def _shell_lines(text: str) -> list[str]:
    """install.sh's shell, without the Python it carries between `<<'PYTHON'` and `PYTHON`."""
    head, rest = text.split("<<'PYTHON'\n", 1)
    return [*head.splitlines(), *rest.split("\nPYTHON\n", 1)[1].splitlines()]


def test_the_shim_is_readable_and_passes_shellcheck(tmp_path: Path) -> None:
    """One statement a line, lines under 100 characters, and no Python of its own: the program
    it runs first is airgap/install/boot.py's text, linted and type-checked with the rest."""
    text = render_install(CONTEXT)
    assert text.startswith("#!/bin/sh\n")
    assert all(len(line) < 100 for line in text.splitlines())
    boot = (ROOT / "verl_bundle" / "airgap" / "install" / "boot.py").read_text()
    assert f"<<'PYTHON'\n{boot.rstrip()}\nPYTHON\n" in text
    assert "PYTHON" not in boot.splitlines()  # the heredoc's end never comes early
    for line in _shell_lines(text):
        code = re.sub(r"'[^']*'|\"(\\.|[^\"\\])*\"", "", line)
        code = re.sub(r"(^|\s)#.*$", "", code)
        code = code.replace(";;", "").replace("; then", "").replace("; do", "")
        assert ";" not in code, f"two statements on one line: {line}"
        assert "python -c" not in line and "exec(" not in line, line
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    script = tmp_path / "install.sh"
    script.write_text(text)
    proc = subprocess.run(["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_sh_bash_and_direct_runs_all_work_without_home(bundle: Path, tmp_path: Path) -> None:
    env = clean_environ(tmp_path)
    env.pop("HOME", None)
    prefix = tmp_path / "p"
    for shell in (["sh"], ["bash"], []):
        cmd = [*shell, str(bundle / "install.sh"), "--prefix", str(prefix), "--dry-run"]
        proc = _run([*cmd, "--python", python310()], env, tmp_path)
        assert proc.returncode == 0, (shell, proc.stderr)
        assert "dry run: nothing is changed" in proc.stdout
        assert "unbound variable" not in proc.stderr and "Illegal option" not in proc.stderr
    no_prefix = _run([str(bundle / "install.sh"), "--python", python310()], env, tmp_path)
    assert no_prefix.returncode == 2
    assert no_prefix.stderr.strip().splitlines() == [
        "install.sh: HOME is not set, so there is no default prefix; pass --prefix DIR"
    ]
    assert not prefix.exists()


def test_no_python_that_can_run_the_installer_gets_the_sentence(
    bundle: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    old = fake / "python3"
    old.write_text("#!/bin/sh\necho 3.6\n")  # what an old python3 prints for the version probe
    old.chmod(0o755)
    for tool in ("dirname", "tr"):
        found = shutil.which(tool)
        assert found
        (fake / tool).symlink_to(found)
    env = clean_environ(tmp_path)
    env["PATH"] = str(fake)
    proc = _run(
        ["/bin/sh", str(bundle / "install.sh"), "--prefix", str(tmp_path / "p")], env, tmp_path
    )
    assert proc.returncode == 4, proc.stderr
    assert "no Python 3.8 or newer found" in proc.stderr and "Python 3.10 (cp310)" in proc.stderr
    assert "apt: python3.10 python3.10-venv python3.10-dev" in proc.stderr
    given = _run([str(bundle / "install.sh"), "--python", str(old)], env, tmp_path)
    assert given.returncode == 4
    assert (
        f"{old} is Python 3.6, but this bundle's wheels are built for Python 3.10" in given.stderr
    )
    assert "Traceback" not in given.stderr and "SyntaxError" not in given.stderr


def test_a_planted_sitecustomize_never_runs(bundle: Path, home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (bundle / "lib" / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    proc = run_install(bundle, home, "--prefix", str(tmp_path / "p"), "--python", python310())
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "sitecustomize.py" in proc.stderr and "nothing was installed" in proc.stderr
    assert not marker.exists()
    assert not (tmp_path / "p").exists()


def test_planted_bytecode_never_replaces_the_verifier(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """A .pyc in lib/'s __pycache__ that matches verify.py's size and time (so Python would
    take it for verify.py's) is neither run nor accepted."""
    marker = tmp_path / "ran"
    source = bundle / "lib" / "verl_bundle" / "airgap" / "verify" / "bundle.py"
    original, stat = source.read_bytes(), source.stat()
    evil = f"open({str(marker)!r}, 'w').write('x')\n".encode()
    source.write_bytes(evil + b"#" * (len(original) - len(evil) - 1) + b"\n")
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    py = python310()  # compiled by the interpreter that runs the installer: its magic number
    compile_it = "import py_compile, sys; print(py_compile.compile(sys.argv[1], doraise=True))"
    pyc = subprocess.run(
        [py, "-c", compile_it, str(source)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert "__pycache__" in pyc
    source.write_bytes(original)
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    proc = run_install(bundle, home, "--prefix", str(tmp_path / "p"), "--python", py, "--yes")
    assert not marker.exists()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "lib/verl_bundle/airgap/verify/__pycache__/" in proc.stderr
    assert not (tmp_path / "p").exists()


def test_json_result_is_one_envelope_on_stdout(bundle: Path, home: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    proc = run_install(bundle, home, "--prefix", str(prefix), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] == "install" and doc["ok"] is True
    assert doc["result"]["exit_code"] == 0 and doc["result"]["target"] == str(prefix)
    assert "dry run: nothing is changed" in proc.stderr  # people's text goes to stderr
    bad = run_install(
        bundle, home, "--prefix", str(tmp_path / "b"), "--python", "/nonexistent", "--json"
    )
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip() == (
        "install.sh: --python /nonexistent: no such file; give the path of a Python 3.10 "
        "interpreter, or leave --python out"
    )


def test_install_sh_alone_without_its_bundle_is_one_line(bundle: Path, tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(bundle / "install.sh", alone / "install.sh")
    env = clean_environ(tmp_path)
    cmd = [str(alone / "install.sh"), "--prefix", str(tmp_path / "p"), "--python", python310()]
    proc = _run(cmd, env, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no bundle beside this install.sh" in lines[0], lines
    assert "--from URL" in lines[0]
    assert not (tmp_path / "p").exists()


def _pyenv_shims(where: Path) -> Path:
    """pyenv's shims as they behave outside their context: `python3.10` and `python3` that
    print pyenv's complaint and exit 127."""
    where.mkdir()
    for name in ("python3.10", "python3"):
        shim = where / name
        shim.write_text(f'#!/bin/sh\necho "pyenv: {name}: command not found" >&2\nexit 127\n')
        shim.chmod(0o755)
    return where


def test_a_pyenv_shim_first_on_path_is_passed_over_for_the_next_python(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """The issue's host: PATH starts with pyenv's shims (exit 127), a real Python 3.10 comes
    later. Both install.sh and the installer try the next candidate, and the plan names it."""
    shims = _pyenv_shims(tmp_path / "shims")
    real = tmp_path / "real"
    real.mkdir()
    (real / "python3.10").symlink_to(python310())
    env = {"PATH": os.pathsep.join([str(shims), str(real), "/usr/bin", "/bin"])}
    proc = run_install(bundle, home, "--prefix", str(tmp_path / "p"), "--dry-run", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"  python:  {real / 'python3.10'} is 3.10 (must be 3.10)" in proc.stdout
    assert "unknown" not in proc.stdout + proc.stderr


def test_only_a_shim_of_the_bundles_python_never_gets_python_unknown(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """No Python 3.10 that runs: the shim is named as not running, and no advice says to
    build for "Python unknown"."""
    shims = _pyenv_shims(tmp_path / "shims")
    env = {"PATH": os.pathsep.join([str(shims), "/usr/bin", "/bin"])}
    given = run_install(
        bundle,
        home,
        "--prefix",
        str(tmp_path / "p"),
        "--python",
        str(shims / "python3.10"),
        env=env,
    )
    assert given.returncode == 4, given.stdout + given.stderr
    assert f"{shims / 'python3.10'} does not run (it printed no version)" in given.stderr
    assert "unknown" not in given.stdout + given.stderr
    assert not (tmp_path / "p").exists()


def test_the_installer_passes_over_every_python_that_reports_no_version(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """choose_python with only shims on PATH and a running interpreter of another X.Y: one
    line naming the shims, exit 4; with a real 3.10 behind them, that one."""
    from verl_bundle.airgap.contract.manifest import load
    from verl_bundle.airgap.errors import ServerNotReadyError
    from verl_bundle.airgap.install import env as envs
    from verl_bundle.airgap.install.options import Options

    shims = _pyenv_shims(tmp_path / "shims")
    manifest = load(str(bundle))
    opts = Options(bundle=str(bundle))
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3.99")  # not a 3.10 either
    with pytest.raises(ServerNotReadyError) as refused:
        envs.choose_python(opts, manifest, str(tmp_path / "p"))
    assert refused.value.code == 4
    assert f"{shims / 'python3.10'}, {shims / 'python3'} did not report a version" in str(
        refused.value
    )
    real = tmp_path / "real"
    real.mkdir()
    (real / "python3.10").symlink_to(python310())
    monkeypatch.setenv("PATH", os.pathsep.join([str(shims), str(real)]))
    assert envs.choose_python(opts, manifest, str(tmp_path / "p")) == str(real / "python3.10")
