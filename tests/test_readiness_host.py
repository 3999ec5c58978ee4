"""`verl-bundle readiness --bundle B --python V`: the host command checks the environment alone.

verl-bundle installed as users install it (our wheel, built here offline, pip-installed into
a site directory of its own, not editable), beside a newer `fakedep` there, checks a real venv
that holds the older fakedep and a distribution requiring exactly it, with pip (no uv) for its
pip check, as the real rehearsed venvs have. Were the host tool's site-packages on the checked
environment's path (as PYTHONPATH), the environment's pip check would see the host's fakedep
and report a conflict the environment does not have (measured on the real cu130 venv with the
host's huggingface_hub, packaging and fsspec). The server program that runs is the bundle's
own lib/, told apart here by a purpose text only that copy has.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, clean_environ
from support.bundlefix import add_server_program
from support.pkgindex import build_wheel
from support.readiness import (
    GATE_V03,
    ROLLOUT_V02,
    bundle,
    fake_torch,
    fake_verl,
    make_env,
    packages,
    wheel,
)

pytestmark = pytest.mark.slow

PAD = "def pad_input(*a):\n    pass\n"
MARK = "PPO with FSDP and vLLM rollout, as this bundle's own lib/ words it"


def _our_wheel(out: Path) -> Path:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return next(out.glob("verl_offline_bundle-*.whl"))


def test_a_pip_installed_verl_bundle_checks_the_environment_not_itself(tmp_path: Path) -> None:
    w = tmp_path / "wheels"
    host = tmp_path / "host-site"
    newer = build_wheel(w / "host", "fakedep", "2.0", modules={"fakedep": ""})
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target"]
    inst = subprocess.run(
        [*pip, str(host), str(_our_wheel(w / "ours")), str(newer)],
        capture_output=True,
        text=True,
    )
    assert inst.returncode == 0, inst.stderr
    py = make_env(
        tmp_path / "env",
        [
            wheel(w, "torch", "2.5.1", fake_torch("2.5.1", device_mesh=True)),
            wheel(w, "vllm", "0.7.3", {"vllm/__init__.py": "LLM = object\n"}),
            wheel(w, "verl", "0.3.0.post1", fake_verl(GATE_V03, ROLLOUT_V02)),
            wheel(w, "flash-attn", "2.7.3", packages({"flash_attn/bert_padding.py": PAD})),
            build_wheel(w, "fakedep", "1.0", modules={"fakedep": ""}),
            build_wheel(w, "needs-fakedep", "1.0", requires=["fakedep==1.0"], modules={"nf": ""}),
        ],
    )
    (py.parent / "uv").unlink()  # the pip check is then pip's, as in the real venvs
    subprocess.run([str(py), "-m", "ensurepip"], check=True, capture_output=True)
    where = add_server_program(bundle(tmp_path, {"torch": "2.5.1", "verl": "0.3.0.post1"}))
    table = where / "lib" / "verl_bundle" / "airgap" / "postinstall" / "readiness.json"
    doc = json.loads(table.read_text())
    doc["purposes"]["ppo-fsdp-vllm"] = MARK
    table.write_text(json.dumps(doc))
    env = clean_environ(tmp_path)
    env["PYTHONPATH"] = str(host)  # the installed tool: its own site-packages, not the checkout
    where_from = subprocess.run(
        [sys.executable, "-c", "import verl_bundle; print(verl_bundle.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where_from.stdout.startswith(str(host)), where_from.stdout
    cmd = [sys.executable, "-m", "verl_bundle", "readiness", "--bundle", str(where)]
    out = subprocess.run(
        [*cmd, "--python", str(py), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout)
    checks = {c["id"]: c for c in got["result"]["checks"]}
    assert checks["pip-check"]["status"] == "ok", checks["pip-check"]
    assert checks["pip-check"]["subject"] == "pip check"
    # The bundle's own lib/ judged it (its purpose text), and the host printed its verdict.
    assert got["verdict"]["line"].startswith(f"ready to train on the CPU side ({MARK})")
    text = subprocess.run(
        [*cmd, "--python", str(py)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout.rstrip().splitlines()[-1] == got["verdict"]["line"]
    # The environment does have the conflict where the host's fakedep is put on its path.
    mixed = dict(env, PYTHONPATH=str(host))
    leak = subprocess.run(
        [str(py), "-m", "pip", "check"], capture_output=True, text=True, env=mixed
    )
    assert "needs-fakedep 1.0 has requirement fakedep==1.0, but you have fakedep 2.0" in leak.stdout
