"""A CUDA toolkit made of the stack's own wheels.

From CUDA 13, NVIDIA's nvidia-cuda-nvcc wheel holds nvcc itself (with cudafe++, fatbinary,
nvlink and ptxas) under nvidia/cu13/bin, and nvidia-nvvm (cicc), nvidia-cuda-crt,
nvidia-cuda-cccl and nvidia-cuda-runtime hold the rest, all in one tree with its own nvcc.profile.
A stack that locks them (the cu130 stack does: torch 2.11.0 and vllm bring them) carries a
complete nvcc, so the host needs no CUDA installation to compile for it. The CUDA 11 and 12
nvcc wheels hold ptxas and headers only (nvidia/cuda_nvcc/bin/ptxas): no toolkit there.

The tree is unpacked once per set of wheels into <cache>/toolkits/<key>/ (a temporary
directory renamed into place, so an interrupted unpack leaves nothing under the final name).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from verl_bundle.compile.toolkit import ToolkitError

# The wheels that make up the tree (their names may end in -cuNN, as the cu12 ones do).
PACKAGES = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-cuda-runtime",
)
_SUFFIX = re.compile(r"-cu\d+$")


def toolkit_wheels(wheels: Mapping[str, Path]) -> dict[str, Path]:
    """Those of the fetched wheels (file name -> cached path) that belong to the tree."""
    picked: dict[str, Path] = {}
    for filename, path in wheels.items():
        try:
            name = canonicalize_name(parse_wheel_filename(filename)[0])
        except InvalidWheelFilename:
            continue
        if _SUFFIX.sub("", name) in PACKAGES:
            picked[filename] = path
    return picked


def stack_toolkit(wheels: Mapping[str, Path], major: int, cache_root: Path) -> Path | None:
    """The CUDA home (holding bin/nvcc and include/cuda_runtime.h) unpacked from the stack's
    wheels for CUDA `major`, or None when they do not make one (no nvcc in them, or no headers)."""
    picked = toolkit_wheels(wheels)
    if not any(name.startswith("nvidia_cuda_nvcc") for name in picked):
        return None
    ident = "\n".join(
        f"{name} {path.name} {path.stat().st_size}" for name, path in sorted(picked.items())
    )
    key = hashlib.sha256(ident.encode()).hexdigest()[:32]
    sub = f"nvidia/cu{major}"
    root = cache_root / "toolkits"
    final = root / key
    if _complete(final / sub):
        return final / sub
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for path in picked.values():
            _unpack(path, tmp, sub + "/")
        if not _complete(tmp / sub):
            return None
        try:
            os.rename(tmp, final)
        except OSError:  # another build unpacked the same tree first
            if not _complete(final / sub):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / sub


def _complete(home: Path) -> bool:
    return (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file()


def _unpack(wheel: Path, dest: Path, prefix: str) -> None:
    """The members of `wheel` under `prefix` (nvidia/cuNN/), safely: no absolute names, no
    `..`, no links; executables keep their bit (nvcc, cicc, ptxas ... are marked so in the
    wheel's RECORD-less zip attributes, and everything under a bin/ directory is one)."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = PurePosixPath(info.filename)
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            if name.is_absolute() or ".." in name.parts:
                raise ToolkitError(
                    f"{wheel.name}: unsafe member name {info.filename!r}; the wheel is damaged or "
                    "not NVIDIA's: fetch it again or give --cuda-home"
                )
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 4 << 20)
            executable = mode & 0o111 or "bin" in name.parts[:-1]
            target.chmod(0o755 if executable else 0o644)
