"""Finding the CUDA toolkit as torch's extension builder would (CUDA_HOME, nvcc, the toolkit an
nvcc belongs to) and the libcudart an extension compiled here would load: probes that fill
`Facts.toolkit` and `Facts.ldcache`, read by the checks in cuda.py and by the installer."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from verl_bundle.airgap.contract.manifest import Manifest, Phase
from verl_bundle.airgap.doctor.commands import Run, probe, run

DEFAULT_CUDA = "/usr/local/cuda"
LDCONFIG = ("/sbin/ldconfig", "/usr/sbin/ldconfig")

# Loads each libcudart name the way a built extension's loader would (LD_LIBRARY_PATH, the
# ldconfig cache, the default directories).
CUDART_PROBE = """
import ctypes, json, sys
libs = []
for name in sys.argv[1:]:
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        libs.append({"name": name, "error": str(exc)})
        continue
    version = ctypes.c_int(0)
    try:
        rc = lib.cudaRuntimeGetVersion(ctypes.byref(version))
    except AttributeError:
        rc = -1
    libs.append({"name": name, "version": version.value if rc == 0 else None})
paths = []
try:
    with open("/proc/self/maps") as fh:
        paths = sorted({l.split()[-1] for l in fh if "/libcudart" in l})
except OSError:
    pass
print(json.dumps({"libs": libs, "paths": paths}))
"""


@dataclass(frozen=True)
class CudaLibs:
    """The toolkit's libcudart and whether the loader finds it."""

    root: str  # the toolkit checked
    dirs: tuple[str, ...]  # its library directories
    soname: str | None  # the most specific libcudart name; None: the toolkit has none
    answer: dict[str, Any] | None = None  # CUDART_PROBE's answer; None: see `run`
    run: Run | None = None


@dataclass(frozen=True)
class Toolkit:
    """The CUDA toolkit as torch's extension builder would see it."""

    home: str | None  # the CUDA_HOME torch would use
    home_source: str  # how torch would get it
    nvcc: str | None  # the nvcc a build would run: $CUDA_HOME/bin/nvcc, else the first found
    run: Run | None  # `nvcc --version`
    version: str | None  # "11.8"
    root: str | None  # the toolkit that nvcc belongs to, through wrappers and links
    path_nvcc: str | None  # nvcc on PATH
    path_root: str | None
    libs: CudaLibs | None = None  # None: no toolkit to check


def is_toolkit(path: Path) -> bool:
    return (path / "bin" / "nvcc").is_file() and (path / "include" / "cuda_runtime.h").is_file()


def nvcc_root(nvcc: str) -> str:
    """The toolkit an nvcc really runs: nvcc -dryrun names it even through a wrapper script."""
    r = run([nvcc, "-dryrun", "-E", "-x", "cu", os.devnull])
    m = re.search(r"^#\$ _HERE_=(.+)$", r.out + "\n" + r.err, re.M)
    if m:
        return str(Path(m.group(1).strip()).parent)
    return str(Path(nvcc).resolve().parent.parent)


def lib_dirs(root: Path) -> list[Path]:
    dirs = [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib"))]
    seen: dict[Path, Path] = {}
    for d in dirs:
        if d.is_dir():
            seen.setdefault(d.resolve(), d)
    return list(seen.values())


def probe_libs(root: Path) -> CudaLibs:
    dirs = lib_dirs(root)
    names = sorted(
        {
            p.name
            for d in dirs
            for p in d.glob("libcudart.so*")
            if re.fullmatch(r"libcudart\.so(\.\d+)*", p.name)
        },
        key=len,
    )
    shown = tuple(str(d) for d in dirs)
    if not dirs or not names:
        return CudaLibs(str(root), shown, None)
    # The most specific soname (libcudart.so.11.0) is what a built extension asks the loader for.
    versioned = [x for x in names if x != "libcudart.so"]
    soname = min(versioned, key=len) if versioned else "libcudart.so"
    answer, r = probe(CUDART_PROBE, soname)
    return CudaLibs(str(root), shown, soname, answer, r)


def find_toolkit(env: Mapping[str, str]) -> Toolkit:
    env_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    source = "CUDA_HOME" if env.get("CUDA_HOME") else "CUDA_PATH"
    path_nvcc = shutil.which("nvcc")
    home: str | None = env_home
    if home is None and path_nvcc:
        # torch does not resolve links here: /usr/local/bin/nvcc gives /usr/local.
        home, source = str(Path(path_nvcc).parent.parent), f"the directory above {path_nvcc}"
    if home is None and Path(DEFAULT_CUDA).exists():
        home, source = DEFAULT_CUDA, f"the default {DEFAULT_CUDA}"
    candidates = [str(Path(home) / "bin" / "nvcc")] if home else []
    candidates += [path_nvcc or ""]
    candidates += [
        str(Path(v) / "bin" / "nvcc") for v in (env.get("CUDA_HOME"), env.get("CUDA_PATH")) if v
    ]
    candidates.append(str(Path(DEFAULT_CUDA) / "bin" / "nvcc"))
    nvcc = next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)
    if nvcc is None:
        libs = probe_libs(Path(home)) if home and is_toolkit(Path(home)) else None
        return Toolkit(home, source, None, None, None, None, path_nvcc, None, libs)
    r = run([nvcc, "--version"])
    m = re.search(r"release (\d+\.\d+)", r.out)
    root = nvcc_root(nvcc)
    path_root = root if path_nvcc in (None, nvcc) else nvcc_root(path_nvcc)
    lib_root = Path(home) if home and is_toolkit(Path(home)) else Path(root)
    return Toolkit(
        home,
        source,
        nvcc,
        r,
        m.group(1) if m else None,
        root,
        path_nvcc,
        path_root,
        probe_libs(lib_root),
    )


def read_ldconfig() -> Run:
    exe = shutil.which("ldconfig") or next((p for p in LDCONFIG if Path(p).is_file()), "ldconfig")
    return run([exe, "-p"])


# The wheels whose files together make the toolkit tree (their names may end in -cuNN).
TREE = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-runtime")


def stack_nvcc(m: Manifest, phase: Phase) -> str | None:
    """The version of the bundle's CUDA 13+ nvidia-cuda-nvcc wheel when a phase before `phase`
    installs it with the rest of the tree, for the bundle's CUDA major; else None."""
    names = [p.name for p in m.phases]
    earlier = set(names[: names.index(phase.name)]) if phase.name in names else set()
    want = m.target.cuda.split(".")[0]
    found = {
        re.sub(r"-cu\d+$", "", f.name): f.version
        for f in m.files
        if f.kind == "wheel" and f.phase in earlier
    }
    version = found.get("nvidia-cuda-nvcc")
    if version is None or not all(n in found for n in TREE):
        return None
    major = version.split(".")[0]
    return version if major == want and major.isdigit() and int(major) >= 13 else None
