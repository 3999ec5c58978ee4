"""The compiled wheels' cache, under `compiled/KEY/`: the key of everything that changes the
binary (sdist, torch and CUDA, Python tag, GPU architectures, the C++ ABI the torch wheel
declares, compiler versions), and an entry reused only when its wheel is the one compiled here
(its recorded hash, and no other user able to write it); anything else is removed and the wheel
compiled again."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.compile.job import CompileJob
from verl_bundle.compile.toolkit import Toolkit


@dataclass(frozen=True)
class CompiledWheel:
    path: Path
    filename: str
    sha256: str
    size: int
    provenance: mf.Compiled
    reused: bool
    resumed: bool = False  # a stopped compile was taken over (compile/workdir.py)
    not_reused: str = ""  # why a cache entry of the key was not trusted (compiled again)


def torch_abi(torch_wheel: Path | None, torch_version: str | None) -> str:
    """The C++ ABI extensions must be built with, as the torch wheel itself declares it (its
    TorchConfig.cmake sets -D_GLIBCXX_USE_CXX11_ABI=0|1); without the wheel, the known rule:
    the default and PyTorch indexes' torch wheels use the old ABI up to 2.6 and the new one from
    2.7 (FACTS: cxx11abi FALSE for 2.1-2.6)."""
    if torch_wheel is not None:
        declared = _declared_abi(torch_wheel)
        if declared is not None:
            return "cxx11abi=" + ("TRUE" if declared else "FALSE")
    if torch_version is None:
        return "none"
    base = Version(torch_version.split("+")[0])
    return "cxx11abi=" + ("TRUE" if base >= Version("2.7") else "FALSE")


_ABI_FLAG = re.compile(rb"-D_GLIBCXX_USE_CXX11_ABI=([01])")


def _declared_abi(wheel: Path) -> bool | None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            text = zf.read("torch/share/cmake/Torch/TorchConfig.cmake")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = _ABI_FLAG.search(text)
    return None if found is None else found.group(1) == b"1"


def cache_key(job: CompileJob, toolkit: Toolkit, archs: str) -> str:
    parts = {
        "sdist": job.sdist_sha256,
        "torch": f"{job.torch_version}+cuda{job.cuda}",
        "python": job.python_tag,
        "archs": archs,
        "abi": torch_abi(job.torch_wheel, job.torch_version),
        "nvcc": toolkit.nvcc.version,
        "compiler": toolkit.compiler.version,
        "build_requires": sorted(job.build_requires),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


WHEEL_SHA256 = "wheel.sha256"  # in a cache entry: the compiled wheel's hash, written when made


def _untrusted(final: Path) -> str | None:
    """Why a cache entry may hold another user's wheel: the record beside a wheel proves only
    that whoever could write the one could write the other. Every directory above it must be
    owned by root or this user and writable by no one else (unless sticky, as /tmp), and the
    entry and its files by this user or root and by no one else (a team-shared --cache-dir)."""
    me = os.geteuid()
    real = final.resolve()
    for folder in reversed(real.parents):
        st = folder.stat()
        if st.st_uid not in (0, me):
            return f"{folder} belongs to uid {st.st_uid}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"{folder} is writable by other users"
    for path in (real, *sorted(real.iterdir())):
        st = path.lstat()
        if st.st_uid not in (0, me):
            return f"{path} belongs to uid {st.st_uid}"
        if st.st_mode & 0o022:
            return f"{path} is writable by other users"
    return None


def reuse(final: Path, untrusted: list[str] | None = None) -> CompiledWheel | None:
    """The cached wheel of an entry, when it is the one compiled here: its sha256 matches the
    one recorded when it was made, and no other user could have written either (`_untrusted`).
    An entry that does not check out (a wheel replaced or planted, a record missing or
    unreadable, a mode or owner that lets another user in: why, into `untrusted`) is removed,
    and the wheel is compiled again. The wheel is marked as reused, with when it was compiled."""
    if not final.is_dir():
        return None
    why = _untrusted(final)
    if why is not None:
        if untrusted is not None:
            untrusted.append(why)
        shutil.rmtree(final, ignore_errors=True)
        return None
    wheels = sorted(final.glob("*.whl"))
    try:
        recorded = (final / WHEEL_SHA256).read_text().split()
        doc = json.loads((final / "compiled.json").read_text())
        prov = mf.Compiled(**doc)
    except (OSError, ValueError, TypeError):
        recorded, prov = [], None
    if (
        prov is None
        or len(wheels) != 1
        or wheels[0].is_symlink()
        or recorded != [sha256_file(wheels[0]), wheels[0].name]
    ):
        shutil.rmtree(final, ignore_errors=True)
        return None
    return describe(wheels[0], dataclasses.replace(prov, reused_from_cache=True), reused=True)


def describe(path: Path, prov: mf.Compiled, reused: bool) -> CompiledWheel:
    return CompiledWheel(path, path.name, sha256_file(path), path.stat().st_size, prov, reused)


def store(out: Path, prov: mf.Compiled) -> None:
    """The records beside the one wheel in `out` that make it a cache entry: its provenance
    (compiled.json) and its hash, written when it was made (WHEEL_SHA256)."""
    (out / "compiled.json").write_text(json.dumps(vars(prov), sort_keys=True) + "\n")
    (wheel,) = out.glob("*.whl")
    (out / WHEEL_SHA256).write_text(f"{sha256_file(wheel)}  {wheel.name}\n")
