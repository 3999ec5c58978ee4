"""CUDA_HOME for a source build on the server, when the admin set none and torch would guess
wrong or find nothing.

- torch takes the directory above `which nvcc` without following wrapper scripts or links, so a
  `/usr/local/bin/nvcc` wrapper gives CUDA_HOME=/usr/local, which has no cuda_runtime.h: the build
  then fails on its first object. The toolkit that nvcc really runs (`nvcc -dryrun` names it) is
  used instead.
- With no toolkit of the bundle's CUDA major on the server at all, a CUDA 13+ stack that carries
  NVIDIA's nvcc wheels (nvidia-cuda-nvcc 13 holds nvcc itself; nvidia-nvvm, nvidia-cuda-crt and
  nvidia-cuda-runtime the rest) in an earlier phase brings its own: the venv's
  site-packages/nvidia/cuNN is a complete toolkit once that phase is installed.
A CUDA_HOME or CUDA_PATH the admin exported is always kept.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from verl_bundle.airgap.contract.manifest import Manifest, Phase
from verl_bundle.airgap.doctor.commands import run
from verl_bundle.airgap.doctor.toolkit import is_toolkit, nvcc_root, stack_nvcc


def _major(nvcc: str) -> str | None:
    r = run([nvcc, "--version"])
    m = re.search(r"release (\d+)\.\d+", r.out)
    return m.group(1) if m else None


def build_cuda_home(
    m: Manifest, phase: Phase, target: str, environ: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """(CUDA_HOME, why) for `phase`'s source builds, or None to leave torch's own choice."""
    env = os.environ if environ is None else environ
    if env.get("CUDA_HOME") or env.get("CUDA_PATH"):
        return None
    want = m.target.cuda.split(".")[0]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc is not None and _major(nvcc) == want:
        guess = Path(nvcc).parent.parent
        if is_toolkit(guess):
            return None  # torch finds it by itself
        root = Path(nvcc_root(nvcc))
        if is_toolkit(root):
            return str(root), f"the toolkit {nvcc} runs (torch would take {guess})"
    version = stack_nvcc(m, phase)
    if version is None:
        return None
    site = os.path.join(target, "lib", "python" + m.target.python, "site-packages")
    home = os.path.join(site, "nvidia", "cu" + want)
    return home, f"the bundle's own nvidia-cuda-nvcc {version} wheel"
