"""Readiness: a bundle whose trainer cannot import is reported not ready; one that can is ready.

Real wheels of a fake verl, vllm, torch and flash_attn (built here, installed with uv into a
real venv), with the real hydra-core and omegaconf copied in from this test environment, so the
config compose step runs the real Hydra. The fake verl carries verl's own vLLM gate logic
(verl/third_party/vllm/__init__.py at v0.2.0.post2 and v0.3.0.post1) and the imports that
break on torch 2.1 (torch.distributed.device_mesh) and without flash_attn.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, clean_environ
from support.readiness import (
    CONFIG,
    GATE_V03,
    ROLLOUT_V02,
    bundle,
    fake_torch,
    fake_verl,
    make_env,
    packages,
    wheel,
)
from support.shared import Value, once

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.errors import UsageError
from verl_bundle.airgap.postinstall import readiness

# verl/third_party/vllm/__init__.py at v0.2.0.post2: exact version strings (abridged: the
# adapters themselves are not needed to refuse or accept a version).
GATE_V02 = """
from importlib.metadata import version, PackageNotFoundError
from packaging import version as vs
package_version = version('vllm')
if package_version in ('0.3.1', '0.4.2', '0.5.4', '0.6.3'):
    vllm_version = package_version
elif vs.parse(package_version) >= vs.parse('0.6.6.post2.dev252+g8027a724'):
    from vllm import LLM
else:
    raise ValueError(
        f'vllm version {package_version} not supported. Currently supported versions are '
        '0.3.1, 0.4.2, 0.5.4, 0.6.3 and 0.7.0+'
    )
"""
# verl 0.3.0.post1's vllm_rollout/__init__.py asks for the device name at import.
ROLLOUT_V03 = """
import torch
if "AMD" in torch.cuda.get_device_name():
    raise SystemExit("not on this test")
from verl.third_party.vllm import LLM
"""


def run(py: Path, bundle_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m verl_bundle.airgap readiness` run by the environment's python, as post-install
    runs it (the bundle's lib/ on the path)."""
    env = clean_environ(bundle_dir.parent)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [str(py), "-m", "verl_bundle.airgap", "readiness", "--bundle", str(bundle_dir), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """torch 2.1.2 (no device_mesh), vllm 0.3.1+cu118 and verl 0.2.0.post2's gate; no flash_attn.
    Made once per run (read-only)."""

    def make(root: Path) -> Value:
        w = root / "wheels"
        py = make_env(
            root,
            [
                wheel(w, "torch", "2.1.2+cu118", fake_torch("2.1.2+cu118", device_mesh=False)),
                wheel(w, "vllm", "0.3.1+cu118", {"vllm/__init__.py": "LLM = object\n"}),
                wheel(w, "verl", "0.2.0.post2", fake_verl(GATE_V02, ROLLOUT_V02)),
            ],
        )
        versions = {"torch": "2.1.2+cu118", "vllm": "0.3.1+cu118", "verl": "0.2.0.post2"}
        where = bundle(root, versions, limit="torch 2.1.2: verl's FSDP trainer cannot start")
        return [str(py), str(where)]

    made = once(tmp_path_factory, "readiness.legacy", make)
    assert isinstance(made, list)
    py, where = (Path(str(p)) for p in made)
    return py, where


@pytest.fixture(scope="module")
def current(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """torch 2.5.1 with device_mesh, vllm 0.7.3+cu118, verl 0.3.0.post1's gate, flash_attn.
    Made once per run (read-only)."""

    def make(root: Path) -> Value:
        w = root / "wheels"
        py = make_env(
            root,
            [
                wheel(w, "torch", "2.5.1+cu118", fake_torch("2.5.1+cu118", device_mesh=True)),
                wheel(w, "vllm", "0.7.3+cu118", {"vllm/__init__.py": "LLM = object\n"}),
                wheel(w, "verl", "0.3.0.post1", fake_verl(GATE_V03, ROLLOUT_V03)),
                wheel(
                    w,
                    "flash-attn",
                    "2.7.3",
                    packages({"flash_attn/bert_padding.py": "def pad_input(*a):\n    pass\n"}),
                ),
            ],
        )
        versions = {
            "torch": "2.5.1+cu118",
            "vllm": "0.7.3+cu118",
            "verl": "0.3.0.post1",
            "flash-attn": "2.7.3",
        }
        return [str(py), str(bundle(root, versions))]

    made = once(tmp_path_factory, "readiness.current", make)
    assert isinstance(made, list)
    py, where = (Path(str(p)) for p in made)
    return py, where


@pytest.mark.slow
def test_a_trainer_that_cannot_import_is_not_ready(legacy: tuple[Path, Path]) -> None:
    py, where = legacy
    out = run(py, where)
    assert out.returncode == 5, out.stderr  # installed, not ready to train
    text = out.stdout
    last = text.splitlines()[-1]
    assert last.startswith(
        "not ready to train: verl.workers.fsdp_workers: No module named "
        "'torch.distributed.device_mesh' (and 3 more)"
    )
    assert last.endswith(
        "(the profile's known limit: torch 2.1.2: verl's FSDP trainer cannot start)"
    )
    assert "all passed" not in text
    assert "torch has only from 2.2" in text  # the cause from readiness.json
    # verl's own gate refuses the +cu118 label, and the rollout behind it fails the same way.
    assert "fail     import:verl.third_party.vllm: vllm version 0.3.1+cu118 not supported" in text
    assert "fail     import:verl.workers.rollout.vllm_rollout: vllm version 0.3.1+cu118" in text
    assert "fail     import:verl.workers.actor.dp_actor: No module named 'flash_attn'" in text
    assert "ok       import:verl.trainer.main_ppo: imports" in text
    assert "ok       config: composes offline" in text
    assert "known limit: torch 2.1.2: verl's FSDP trainer cannot start" in text


@pytest.mark.slow
def test_a_trainer_that_imports_is_ready(current: tuple[Path, Path]) -> None:
    py, where = current
    out = run(py, where, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert (doc["schema"], doc["command"], doc["ok"]) == (1, "readiness", True)
    result = doc["result"]
    assert set(result) == {"purpose", "limit", "versions", "checks"}
    status = {c["id"]: c["status"] for c in result["checks"]}
    assert status == {
        "import:verl.trainer.main_ppo": "ok",
        "import:verl.workers.fsdp_workers": "ok",
        "import:verl.workers.actor.dp_actor": "ok",
        "import:verl.third_party.vllm": "ok",
        # It asks torch for the device name at import: not provable without a GPU.
        "import:verl.workers.rollout.vllm_rollout": "untested",
        "import:flash_attn": "ok",
        "config": "ok",
        "pip-check": "ok",
        "unlisted": "ok",
        # Readiness without --deep never starts verl's trainer: named as not proven.
        "dryrun": "untested",
    }
    # Never a bare "ready": what could not be exercised here is named.
    assert doc["verdict"]["state"] == "ready-cpu"
    assert doc["verdict"]["line"] == (
        "ready to train on the CPU side (PPO with FSDP and vLLM rollout); not proven here: "
        "verl.workers.rollout.vllm_rollout (needs a GPU: --require-gpu on a GPU server); "
        "the trainer's start (not started: readiness --deep)"
    )
    assert result["versions"]["vllm"] == "0.7.3+cu118"


@pytest.mark.slow
def test_require_gpu_without_a_gpu_is_not_ready(current: tuple[Path, Path]) -> None:
    py, where = current
    out = run(py, where, "--require-gpu")
    assert out.returncode == 5
    assert out.stdout.splitlines()[-1] == (
        "not ready to train: gpu smoke test: NoGPU: torch sees no CUDA device"
    )


@pytest.mark.slow
def test_a_config_that_does_not_resolve_is_not_ready(tmp_path: Path) -> None:
    broken = CONFIG.replace("${trainer.project_name}", "${trainer.no_such_key}")
    w = tmp_path / "wheels"
    py = make_env(
        tmp_path,
        [
            wheel(w, "torch", "2.5.1", fake_torch("2.5.1", device_mesh=True)),
            wheel(w, "vllm", "0.7.3", {"vllm/__init__.py": "LLM = object\n"}),
            wheel(w, "verl", "0.3.0.post1", fake_verl(GATE_V03, ROLLOUT_V02, broken)),
        ],
    )
    where = bundle(
        tmp_path,
        {"torch": "2.5.1", "vllm": "0.7.3", "verl": "0.3.0.post1"},
        modules=["verl.trainer.main_ppo", "verl.third_party.vllm"],
        purpose="PPO with FSDP and vLLM rollout",
        config="ppo_trainer",
    )
    out = run(py, where)
    assert out.returncode == 5
    last = out.stdout.splitlines()[-1]
    assert last.startswith("not ready to train: config ppo_trainer: InterpolationKeyError:"), last
    assert "no_such_key" in last
    # The declared modules, not the table's, were imported.
    assert "fsdp_workers" not in out.stdout


@pytest.mark.slow
def test_an_inconsistent_set_fails_the_pip_check(tmp_path: Path) -> None:
    w = tmp_path / "wheels"
    needs = wheel(w, "verl", "0.3.0.post1", fake_verl(GATE_V03, ROLLOUT_V02))
    # Rewrite verl's METADATA to require a torch the environment does not have.
    py = make_env(
        tmp_path,
        [
            wheel(w, "torch", "2.5.1", fake_torch("2.5.1", device_mesh=True)),
            wheel(w, "vllm", "0.7.3", {"vllm/__init__.py": "LLM = object\n"}),
            needs,
        ],
    )
    meta = next((py.parent.parent / "lib").glob("python*/site-packages/verl-*.dist-info/METADATA"))
    meta.write_text(meta.read_text() + "Requires-Dist: torch==2.6.0\n")
    where = bundle(tmp_path, {"torch": "2.5.1", "vllm": "0.7.3", "verl": "0.3.0.post1"})
    out = run(py, where)
    assert out.returncode == 5
    assert "fail     pip-check:" in out.stdout and "torch" in out.stdout


def test_a_bundle_without_a_manifest_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from verl_bundle.airgap.cli import main

    code = main(["readiness", "--bundle", str(tmp_path)])
    assert code == 2  # not a bundle: a usage error
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "manifest.json" in err


# -- the table ---------------------------------------------------------------------------------


def test_every_known_cause_matches_its_sample() -> None:
    table = readiness.load_table()
    for entry in table["causes"]:
        assert re.search(entry["match"], entry["sample"]), entry["id"]
        cause, fix = readiness.explain(entry["sample"], table, entry.get("from") or "0.9.1")
        assert "{" not in cause + fix, entry["id"]
        if "{" not in entry["cause"]:
            assert (cause, fix) == (entry["cause"], entry["fix"]), entry["id"]
        assert (cause, fix) != readiness.explain("nothing known", table)
    for pattern in table["gpu_only"]["patterns"]:
        assert pattern["match"] in pattern["sample"]


@pytest.mark.parametrize(
    ("verl", "cites", "not_cited"),
    [
        ("0.3.0.post1", "verl/workers/actor/dp_actor.py", "verl/workers/config/model.py"),
        ("0.4.1", "verl/workers/fsdp_workers.py:221", "verl/workers/config/model.py"),
        ("0.9.1", "verl/workers/config/model.py:185", "fsdp_workers.py"),
    ],
)
def test_the_flash_attn_cause_cites_the_file_of_each_release(
    verl: str, cites: str, not_cited: str
) -> None:
    """Where verl hard-codes flash_attention_2 differs per release: the cause names that
    release's file, never another's."""
    cause, fix = readiness.explain("ModuleNotFoundError: No module named 'flash_attn'", None, verl)
    assert cites in cause and not_cited not in cause
    assert "flash-attn phase" in fix


def test_the_vllm_gate_cause_names_the_version() -> None:
    cause, _ = readiness.explain("ValueError: vllm version 0.3.1+cu118 not supported.")
    assert "refuses 0.3.1+cu118" in cause


@pytest.mark.parametrize(
    ("verl", "workers"),
    [
        ("0.2.0.post2", "verl.workers.fsdp_workers"),
        ("0.3.0.post1", "verl.workers.fsdp_workers"),
        ("0.4.1", "verl.workers.fsdp_workers"),
        ("0.9.1", "verl.workers.engine_workers"),
    ],
)
def test_modules_follow_the_bundles_verl_release(verl: str, workers: str, tmp_path: Path) -> None:
    m = mf.load(str(bundle(tmp_path, {"verl": verl, "flash-attn": "2.7.3"})))
    plan = readiness.plan_for(m)
    assert plan.modules[0] == "verl.trainer.main_ppo"
    assert workers in plan.modules
    assert plan.modules[-1] == "flash_attn"
    assert plan.purpose == "PPO with FSDP and vLLM rollout"
    megatron = readiness.plan_for(m, "ppo-megatron-vllm")
    assert megatron.purpose == "PPO with Megatron and vLLM rollout"
    if verl.startswith("0.9"):
        assert "verl.workers.fsdp_workers" not in plan.modules
    else:
        assert "verl.workers.megatron_workers" in megatron.modules


def test_an_unknown_purpose_is_refused(tmp_path: Path) -> None:
    m = mf.load(str(bundle(tmp_path, {"verl": "0.3.0.post1"})))
    with pytest.raises(UsageError, match="not a known purpose"):
        readiness.plan_for(m, "dpo-everything")


def test_the_probe_is_carried_in_every_bundle() -> None:
    """assemble carries airgap's .py and .json files: the probe and the table are among them."""
    here = Path(readiness.__file__).parent
    assert (here.parent / "inside" / "probe.py").is_file() and (here / "readiness.json").is_file()
    assert os.path.basename(readiness.PROBE) == "probe.py"


# -- post-install ------------------------------------------------------------------------------


def postinstall(py: Path, bundle_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_environ(bundle_dir.parent)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [str(py), "-m", "verl_bundle.airgap", "postinstall", "--bundle", str(bundle_dir), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_post_install_fails_when_the_trainer_cannot_start(
    legacy: tuple[Path, Path], tmp_path: Path
) -> None:
    """Every install check passes, but verl cannot train and the profile declares no such
    limit: a failed install, and never "all passed"."""
    py, limited = legacy
    doc = json.loads((limited / mf.MANIFEST).read_text())
    del doc["readiness"]
    plain = tmp_path / "bundle"
    plain.mkdir()
    (plain / mf.MANIFEST).write_text(json.dumps(doc))
    out = postinstall(py, plain)
    assert out.returncode == 5, out.stdout + out.stderr
    assert "ok    versions" in out.stdout
    last = out.stdout.rstrip().splitlines()[-1]
    assert last.startswith("post-install: not ready to train: verl.workers.fsdp_workers")
    assert "all passed" not in out.stdout
    # With the limit declared (cu118-legacy), the same verdict and exit code, with the limit.
    kept = postinstall(py, limited)
    assert kept.returncode == 5, kept.stdout + kept.stderr
    assert kept.stdout.rstrip().endswith(
        "(the profile's known limit: torch 2.1.2: verl's FSDP trainer cannot start)"
    )


@pytest.mark.slow
def test_post_install_says_ready(current: tuple[Path, Path]) -> None:
    py, where = current
    out = postinstall(py, where)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        out.stdout.rstrip()
        .splitlines()[-1]
        .startswith("post-install: ready to train on the CPU side (PPO with FSDP and vLLM rollout)")
    )


@pytest.mark.slow
def test_a_skipped_phase_never_drops_an_import_the_trainer_needs(tmp_path: Path) -> None:
    """flash-attn's phase left out: verl 0.9 imports without it, but loads models with
    flash_attention_2 by default, so flash_attn stays in the probe and its absence makes the
    environment not ready, naming the phase and the way back."""
    w = tmp_path / "wheels"
    py = make_env(
        tmp_path,
        [
            wheel(w, "torch", "2.9.0", fake_torch("2.9.0", device_mesh=True)),
            wheel(w, "vllm", "0.11.0", {"vllm/__init__.py": "LLM = object\n"}),
            wheel(w, "verl", "0.9.1", fake_verl(GATE_V03, ROLLOUT_V02)),
        ],
    )
    where = bundle(
        tmp_path,
        {"torch": "2.9.0", "vllm": "0.11.0", "verl": "0.9.1"},
        modules=["verl.trainer.main_ppo", "verl.third_party.vllm"],
        purpose="PPO with FSDP and vLLM rollout",
        config="ppo_trainer",
    )
    doc = json.loads((where / mf.MANIFEST).read_text())
    doc["phases"].append({"name": "flash-attn", "requirements": "requirements/02-flash-attn.txt"})
    doc["files"].append(
        {
            "path": "wheels/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl",
            "name": "flash-attn",
            "version": "2.8.3",
            "sha256": "0" * 64,
            "size": 1,
            "phase": "flash-attn",
            "kind": "wheel",
        }
    )
    (where / mf.MANIFEST).write_text(json.dumps(doc))
    out = postinstall(py, where, "--skip-phase", "flash-attn", "--json")
    assert out.returncode == 5, out.stdout + out.stderr
    verdict = json.loads(out.stdout)["verdict"]
    assert verdict["state"] == "not-ready"
    assert (
        verdict["line"]
        == "not ready to train: flash_attn: flash_attn is not installed (phase flash-attn was left out)"
    )
    text = postinstall(py, where, "--skip-phase", "flash-attn")
    assert text.stdout.rstrip().splitlines()[-1] == "post-install: " + verdict["line"]
    assert "without --skip-phase flash-attn" in text.stdout
    assert "ready to train:" not in text.stdout.replace("not ready to train:", "")


def test_readiness_is_told_the_phases_left_out_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """readiness --skip-phase (rehearse passes install.sh's): a phase the bundle has not is one
    usage line naming its phases; a known one makes what it would have installed say so."""
    from verl_bundle.airgap.cli import main

    where = bundle(tmp_path, {"verl": "0.3.0.post1", "flash-attn": "2.7.3"})
    assert main(["readiness", "--bundle", str(where), "--skip-phase", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "readiness: --skip-phase nope: the bundle has no such phase; its phases are wheels"
    ]
    m = mf.load(str(where))
    plan = readiness.plan_for(m, None, None, ["wheels"])
    assert plan.left_out["flash-attn"] == "wheels"
