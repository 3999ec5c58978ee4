"""Fake torch, vllm and verl wheels, the environments made from them and the bundle directory
readiness reads: shared by the readiness and dry-run test modules."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from conftest import clean_environ, site_packages
from packaging.requirements import Requirement

from verl_bundle.airgap.contract import manifest as mf

# ... and at v0.3.0.post1: 0.6.3 exactly, or anything packaging parses as >= 0.7.0.
GATE_V03 = """
from importlib.metadata import version
from packaging import version as vs
package_version = version('vllm')
if package_version in ('0.3.1', '0.4.2', '0.5.4', '0.6.3', '0.6.3+rocm624'):
    vllm_version = package_version
elif vs.parse(package_version) >= vs.parse('0.7.0'):
    from vllm import LLM
else:
    raise ValueError(
        f'vllm version {package_version} not supported and SGLang also not Found. '
        'Currently supported vllm versions are 0.3.1, 0.4.2, 0.5.4, 0.6.3 and 0.7.0+'
    )
"""

CONFIG = """\
data:
  train_batch_size: 1024
actor_rollout_ref:
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
  rollout:
    name: vllm
    log_prob_micro_batch_size: ${actor_rollout_ref.actor.ppo_mini_batch_size}
critic:
  strategy: ${actor_rollout_ref.actor.strategy}
trainer:
  project_name: verl_examples
  default_local_dir: checkpoints/${trainer.project_name}
"""

MAIN_PPO = """
import hydra

@hydra.main(config_path='config', config_name='ppo_trainer', version_base=None)
def main(config):
    raise SystemExit('readiness must never start a run')
"""

ROLLOUT_V02 = "from verl.third_party.vllm import LLM\n"


def wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A real wheel holding `files` (path -> text)."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    content = {p: t.encode() for p, t in files.items()}
    content[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    content[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for p, d in content.items()
    ]
    content[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for p, d in content.items():
            zf.writestr(p, d)
    return path


def packages(files: dict[str, str]) -> dict[str, str]:
    """`files` plus an empty __init__.py in every package directory above a .py file."""
    out = dict(files)
    for path in files:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.setdefault("/".join(parts[:i]) + "/__init__.py", "")
    return out


def fake_torch(version: str, device_mesh: bool) -> dict[str, str]:
    files = {
        "torch/__init__.py": f"__version__ = {version!r}\nfrom torch import cuda, distributed\n",
        "torch/distributed/__init__.py": "",
        # A CUDA build of torch on a host without a driver: is_available() is False, and asking
        # for a device raises what torch raises there.
        "torch/cuda/__init__.py": (
            "def is_available():\n    return False\n"
            "def get_device_name(device=None):\n"
            "    raise RuntimeError('Found no NVIDIA driver on your system. Please check that you "
            "have an NVIDIA GPU and installed a driver')\n"
        ),
    }
    if device_mesh:
        files["torch/distributed/device_mesh.py"] = "def init_device_mesh(*a, **k):\n    pass\n"
    return files


def fake_verl(gate: str, rollout: str, config: str = CONFIG) -> dict[str, str]:
    return packages(
        {
            "verl/trainer/main_ppo.py": MAIN_PPO,
            "verl/trainer/config/ppo_trainer.yaml": config,
            "verl/workers/fsdp_workers.py": (
                "import torch\nfrom torch.distributed.device_mesh import init_device_mesh\n"
            ),
            "verl/workers/actor/dp_actor.py": "from flash_attn.bert_padding import pad_input\n",
            "verl/third_party/vllm/__init__.py": gate,
            "verl/workers/rollout/vllm_rollout/__init__.py": rollout,
        }
    )


def copy_dist(name: str, site: Path, done: set[str]) -> None:
    """Copy an installed distribution of this test environment (and what it requires) into a
    venv's site-packages: the real package, file by file from its RECORD."""
    dist = metadata.distribution(name)
    key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
    if key in done:
        return
    done.add(key)
    for f in dist.files or []:
        src = Path(str(dist.locate_file(f)))
        if ".." in f.parts or not src.is_file() or "__pycache__" in f.parts:
            continue
        dest = site / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            copy_dist(req.name, site, done)


def make_env(root: Path, wheels: list[Path]) -> Path:
    """A real venv with the fake wheels installed by uv, hydra-core copied in, and a uv beside
    its python (as the bundled uv would be) for the pip check."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is a dependency of verl-bundle"
    env = clean_environ(root)
    subprocess.run(
        [uv, "pip", "install", "--python", str(py), "--offline", "--no-deps", *map(str, wheels)],
        check=True,
        capture_output=True,
        env=env,
    )
    site = site_packages(py)
    copy_dist("hydra-core", site, set())
    (venv / "bin" / "uv").symlink_to(uv)
    return py


def bundle(root: Path, versions: dict[str, str], **ready: Any) -> Path:
    """A bundle directory whose manifest lists these distributions."""
    doc: dict[str, Any] = {
        "schema": 2,
        "name": "verl-bundle-test",
        "profile": {"name": "test"},
        "target": {
            "python": "3.10",
            "python_tag": "cp310",
            "platform": "manylinux_2_17_x86_64",
            "cuda": "11.8",
        },
        "toolchain": {},
        "phases": [{"name": "wheels", "requirements": "requirements/01-wheels.txt"}],
        "files": [
            {
                "path": f"wheels/{name}-{version}-py3-none-any.whl",
                "name": name,
                "version": version,
                "sha256": hashlib.sha256(name.encode()).hexdigest(),
                "size": 1,
                "phase": "wheels",
                "kind": "wheel",
            }
            for name, version in versions.items()
        ],
    }
    if ready:
        doc["readiness"] = ready
    out = root / "bundle"
    out.mkdir()
    (out / mf.MANIFEST).write_text(json.dumps(doc))
    return out
