"""The readiness probe keeps the bytecode of what it imports, written on a thread
(probe.BytecodeWriter), and runs its imports with the cyclic collector off.

A real venv, a real source-only package in it, the probe run as post-install runs it
(`python -I probe.py SPEC RESULT`), on this machine's oldest and newest Pythons the project
supports where pyenv has them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import site_packages

from verl_bundle.airgap.postinstall import readiness


def venv_with(root: Path, python: str, files: dict[str, str]) -> Path:
    """A venv made by `python`, with `files` written into its site-packages as source."""
    venv = root / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = site_packages(py)
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    return py


def probe(py: Path, root: Path, spec: dict[str, Any]) -> dict[str, Any]:
    (root / "spec.json").write_text(json.dumps(spec))
    run = subprocess.run(
        [str(py), "-I", readiness.PROBE, str(root / "spec.json"), str(root / "result.json")],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert run.returncode == 0, run.stderr
    result: dict[str, Any] = json.loads((root / "result.json").read_text())
    return result


PACKAGE = {
    "pkgx/__init__.py": "",
    "pkgx/a.py": "from pkgx import b\nVALUE = b.VALUE + 1\n",
    "pkgx/b.py": "VALUE = 41\n",
    "pkgx/unused.py": "VALUE = 0\n",
    "pkgx/broken.py": "import no_such_module_here\n",
    # What a module sees of the cyclic collector while the probe imports it.
    "pkgx/collector.py": "import gc\nENABLED = gc.isenabled()\n__version__ = str(ENABLED)\n",
}


def pythons() -> list[str]:
    """This interpreter, and pyenv's newest 3.8 where it is installed (the oldest Python the
    probe runs on)."""
    return [sys.executable, *[str(p) for p in sorted(Path.home().glob(OLDEST))[-1:]]]


OLDEST = ".pyenv/versions/3.8*/bin/python3.8"


@pytest.mark.parametrize("python", pythons(), ids=lambda p: Path(p).name)
def test_the_probe_keeps_the_bytecode_of_what_it_imported(tmp_path: Path, python: str) -> None:
    py = venv_with(tmp_path, python, PACKAGE)
    result = probe(py, tmp_path, {"modules": ["pkgx.a", "pkgx.broken"], "checks": []})
    imports = {i["module"]: i["ok"] for i in result["imports"]}
    assert imports == {"pkgx.a": True, "pkgx.broken": False}
    cache = site_packages(py) / "pkgx" / "__pycache__"
    # Every module compiled has its bytecode, written before the probe ended: no temporary
    # file left, nothing for what was never imported.
    assert sorted(p.name.split(".")[0] for p in cache.iterdir()) == ["__init__", "a", "b", "broken"]
    for pyc in cache.iterdir():
        # Valid bytecode a later interpreter loads: the magic number, then a code object.
        check = (
            "import importlib.util, marshal; "
            f"data = open({str(pyc)!r}, 'rb').read(); "
            "assert data[:4] == importlib.util.MAGIC_NUMBER; "
            "assert type(marshal.loads(data[16:])).__name__ == 'code'"
        )
        subprocess.run([str(py), "-I", "-c", check], check=True)


def test_the_probe_imports_with_the_collector_off(tmp_path: Path) -> None:
    py = venv_with(tmp_path, sys.executable, PACKAGE)
    result = probe(py, tmp_path, {"modules": [], "checks": ["pkgx.collector"]})
    (found,) = result["checks"]
    assert (found["ok"], found["version"]) == (True, "False")  # what the module saw


def test_under_dash_b_the_probe_writes_no_bytecode(tmp_path: Path) -> None:
    """-B (no bytecode asked for): the writer stays out of the way and nothing is written."""
    py = venv_with(tmp_path, sys.executable, PACKAGE)
    (tmp_path / "spec.json").write_text(json.dumps({"modules": ["pkgx.a"], "checks": []}))
    spec, result = str(tmp_path / "spec.json"), str(tmp_path / "result.json")
    subprocess.run([str(py), "-I", "-B", readiness.PROBE, spec, result], check=True)
    assert json.loads(Path(result).read_text())["imports"][0]["ok"] is True
    assert not (site_packages(py) / "pkgx" / "__pycache__").exists()
