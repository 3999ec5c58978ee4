"""A tiny, real copy of the verl CUDA 11.8 stack: wheels and sdists shaped like the real ones,
served from local indexes that stand for the PyTorch cu118 index, the default index (PyPI) and
the GitHub release hosts of flash-attn and vllm."""

from __future__ import annotations

import base64
import ensurepip
import hashlib
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from support.pkgindex import build_sdist, build_wheel, installed_files

CP = "cp310"
MANY = "manylinux_2_17_x86_64.manylinux2014_x86_64"
UPLOADED = "2024-06-01T00:00:00Z"
TOO_NEW = "2026-02-01T00:00:00Z"

TORCH_INIT = """
__version__ = "2.1.2+cu118"
from torch import version, cuda, _C
"""
TORCH_VERSION = 'cuda = "11.8"\n__version__ = "2.1.2+cu118"\n'
TORCH_CUDA = "def is_available():\n    return False\n\ndef device_count():\n    return 0\n"
TORCH_C = "_GLIBCXX_USE_CXX11_ABI = False\n"

# vllm's dependencies as the cu118 profile's static metadata lists them; each gets a tiny wheel.
# verl's trainer config as the toy verl carries it: interpolations Hydra must resolve.
VERL_CONFIG = """\
data:
  train_batch_size: 1024
actor_rollout_ref:
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
  rollout:
    name: vllm
    log_prob_micro_batch_size: ${actor_rollout_ref.actor.ppo_mini_batch_size}
trainer:
  project_name: verl_examples
  default_local_dir: checkpoints/${trainer.project_name}
"""

SIMPLE_DEPS = [
    "ninja",
    "psutil",
    "sentencepiece",
    "numpy",
    "fastapi",
    "uvicorn",
    "aioprometheus",
    "einops",
    "filelock",
    "typing-extensions",
    "wheel",
]


@dataclass(frozen=True)
class StackDirs:
    pytorch: Path  # stands for https://download.pytorch.org/whl/cu118 (HTML, no upload times)
    pypi: Path  # stands for the default index (JSON with upload times)
    files: Path  # stands for the GitHub release hosts (v{version}/{file})


def bundled_wheel(prefix: str) -> Path:
    """pip and setuptools wheels that ship with this Python (real, installable offline)."""
    found = sorted((Path(ensurepip.__file__).parent / "_bundled").glob(f"{prefix}-*.whl"))
    if not found:
        raise RuntimeError(f"no bundled {prefix} wheel in ensurepip")
    return found[-1]


def build_uv_wheel(directory: Path) -> Path:
    """A wheel of the real uv binary this host runs, shaped like uv's own wheels (the binary in
    uv-X.data/scripts/), so that bundles can bring uv to the server."""
    from uv import find_uv_bin

    binary = Path(find_uv_bin())
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    tag = "py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64"
    path = directory / f"uv-{version}-{tag}.whl"
    info = f"uv-{version}.dist-info"
    files = {
        "uv/__init__.py": b"",
        f"uv-{version}.data/scripts/uv": binary.read_bytes(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: verl-bundle-tests\nRoot-Is-Purelib: false\n"
            b"Tag: py3-none-manylinux_2_17_x86_64\nTag: py3-none-manylinux2014_x86_64\n"
        ),
    }
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for arc, data in files.items():
            zi = zipfile.ZipInfo(arc, date_time=(2024, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if "scripts" in arc else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return path


def build_stack(root: Path) -> StackDirs:
    dirs = StackDirs(root / "pytorch", root / "pypi", root / "files")
    pt, pypi, files = dirs.pytorch, dirs.pypi, dirs.files

    # The PyTorch index: the +cu118 builds, linux_x86_64 tag as the real files have.
    build_wheel(
        pt,
        "torch",
        "2.1.2+cu118",
        tag=f"{CP}-{CP}-linux_x86_64",
        requires=["triton==2.1.0", "filelock", "typing-extensions"],
        metadata=("License-Expression: BSD-3-Clause",),
        modules={
            "torch": TORCH_INIT,
            "torch/version": TORCH_VERSION,
            "torch/cuda": TORCH_CUDA,
            "torch/_C": TORCH_C,
        },
    )
    build_wheel(
        pt,
        "triton",
        "2.1.0",
        tag=f"{CP}-{CP}-{MANY}",
        requires=["filelock"],
        metadata=("License: MIT License",),
    )
    build_wheel(
        pt, "xformers", "0.0.23.post1+cu118", tag=f"{CP}-{CP}-{MANY}", requires=["torch==2.1.2"]
    )

    # The default index: a *higher* torch (and an equal one without +cu118) that must never be
    # chosen for a cu118 profile, plus everything else.
    build_wheel(
        pypi, "torch", "2.3.0", tag=f"{CP}-{CP}-manylinux1_x86_64", requires=["triton==2.3.0"]
    )
    build_wheel(
        pypi, "torch", "2.1.2", tag=f"{CP}-{CP}-manylinux1_x86_64", requires=["triton==2.1.0"]
    )
    build_wheel(pypi, "triton", "2.3.0", tag=f"{CP}-{CP}-{MANY}")
    build_wheel(
        pypi, "xformers", "0.0.23.post1", tag=f"{CP}-{CP}-{MANY}", requires=["torch==2.1.2"]
    )
    for name in SIMPLE_DEPS:
        build_wheel(pypi, name, "1.0.0")
    # The real Hydra, omegaconf, PyYAML and packaging of this test environment (their Python
    # files), so that readiness composes the toy verl's config with the real Hydra offline.
    _, _, real = installed_files("packaging")
    build_wheel(pypi, "packaging", "24.0", modules={}, data=dict(real))
    for name in ("hydra-core", "omegaconf", "PyYAML"):
        version, requires, real = installed_files(name)
        build_wheel(pypi, name, version, modules={}, requires=requires, data=dict(real))
    build_wheel(pypi, "einops", "1.1.0")  # a second version, for "one pin changed" rebuilds
    build_wheel(pypi, "pydantic", "2.5.0")
    build_wheel(
        pypi,
        "ray",
        "2.10.0",
        tag=f"{CP}-{CP}-{MANY}",
        metadata=("Classifier: License :: OSI Approved :: Apache Software License",),
    )
    build_wheel(pypi, "pynvml", "11.5.0")
    # Licensed as NVIDIA's CUDA wheels are: an approver must read it.
    build_wheel(
        pypi,
        "cupy-cuda11x",
        "12.1.0",
        tag=f"{CP}-{CP}-{MANY}",
        metadata=(
            "License: NVIDIA Proprietary Software",
            "Classifier: License :: Other/Proprietary License",
        ),
    )
    build_wheel(pypi, "cupy-cuda12x", "12.1.0", tag=f"{CP}-{CP}-{MANY}")
    build_wheel(pypi, "tensordict", "0.5.0", tag=f"{CP}-{CP}-{MANY}")
    build_wheel(pypi, "tensordict", "0.6.0", tag=f"{CP}-{CP}-{MANY}")
    # Several wheels of one package, of different tags: the cp310 manylinux_2_17 one is the
    # best for the target; 2_28 is too new for it, cp311 is another Python.
    for tag in (
        f"{CP}-{CP}-{MANY}",
        f"{CP}-{CP}-manylinux_2_28_x86_64",
        f"cp311-cp311-{MANY}",
        "py3-none-any",
    ):
        build_wheel(pypi, "transformers", "4.40.0", tag=tag)
    build_wheel(pypi, "transformers", "5.0.0")  # uploaded after the cut-off
    # Pure-Python, sdist-only (like antlr4-python3-runtime and pylatexenc): built on the host.
    build_sdist(pypi, "pylatexenc", "2.10")
    _, _, antlr4 = installed_files("antlr4-python3-runtime")  # the real runtime, 4.9.3
    build_sdist(pypi, "antlr4-python3-runtime", "4.9.3", modules={}, files=antlr4)
    # flash-attn on the default index is an sdist whose build imports torch, like its setup.py.
    build_sdist(
        pypi,
        "flash-attn",
        "2.5.8",
        requires=["torch", "einops", "packaging", "ninja"],
        modules={"flash_attn": "__version__ = '2.5.8'\n"},
        extra_import="import torch  # flash-attn's setup.py needs torch to build",
        wheel_tag=f"{CP}-{CP}-linux_x86_64",
    )
    build_wheel(
        pypi,
        "vllm",
        "0.3.1",
        tag=f"{CP}-{CP}-manylinux1_x86_64",
        requires=["torch==2.1.2", "xformers==0.0.23.post1", "cupy-cuda12x==12.1.0"],
    )
    build_wheel(
        pypi,
        "verl",
        "0.2.0.post2",
        # The modules readiness imports for verl 0.2 (readiness.json), shaped like the real
        # ones (the actor needs flash_attn), and a config the real Hydra composes: the toy
        # stack installs ready to train, and leaving flash-attn out makes it not ready.
        data={"verl/trainer/config/ppo_trainer.yaml": VERL_CONFIG},
        modules={
            "verl": "__version__ = '0.2.0.post2'\n",
            "verl/trainer/main_ppo": "",
            "verl/workers/fsdp_workers": "",
            "verl/workers/actor/dp_actor": "from flash_attn import __version__ as _fa\n",
            "verl/third_party/vllm": "",
            "verl/workers/rollout/vllm_rollout": "",
        },
        requires=[
            "tensordict<0.6",
            "ray>=2.10",
            "transformers",
            "pylatexenc",
            "antlr4-python3-runtime==4.9.3",
            "hydra-core>=1.3",
            "numpy",
        ],
    )
    for prefix in ("pip", "setuptools"):
        shutil.copy(bundled_wheel(prefix), pypi)
    build_uv_wheel(pypi)

    # The release hosts: the prebuilt flash-attn wheel and vllm's +cu118 wheel.
    build_wheel(
        files / "v2.5.8",
        "flash_attn",
        "2.5.8+cu118torch2.1cxx11abiFALSE",
        tag=f"{CP}-{CP}-linux_x86_64",
        requires=["torch", "einops", "packaging", "ninja"],
        modules={"flash_attn": "__version__ = '2.5.8'\n"},
    )
    build_wheel(
        files / "v0.3.1",
        "vllm",
        "0.3.1+cu118",
        tag=f"{CP}-{CP}-manylinux1_x86_64",
        requires=["torch==2.1.2", "xformers==0.0.23.post1", "cupy-cuda11x==12.1.0"],
    )
    return dirs


# The cu118-legacy profile's text, for profiles derived from it by one replacement.
CU118 = (Path(__file__).resolve().parents[2] / "profiles" / "cu118-legacy.toml").read_text()


def derived_profile(tmp_path: Path, old: str, new: str) -> Path:
    """cu118-legacy with `old` replaced by `new`, as a profile named "derived" in `tmp_path`."""
    assert old in CU118
    path = tmp_path / "derived.toml"
    path.write_text(CU118.replace(old, new).replace('name = "cu118-legacy"', 'name = "derived"'))
    return path
