"""A fake GPU server for the doctor's tests: real executables on a temporary PATH (nvcc, gcc,
ninja, nvidia-smi answering recorded output) and tiny real shared libraries (libcuda.so.1,
libcudart) compiled with this machine's gcc, found through LD_LIBRARY_PATH."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from verl_bundle.airgap import doctor

# The variables a test machine must not inherit from this one (the doctor reads them).
CLEARED = (
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CC",
    "CXX",
    "MAX_JOBS",
    "LD_LIBRARY_PATH",
    *doctor.TORCHRUN_VARS,
)

# Looked up before any test narrows PATH.
REAL_GCC = shutil.which("gcc")
SLEEP = shutil.which("sleep") or "/bin/sleep"

# The exact questions nvidia-smi answers; anything else gets its usage error, as the real one.
GPU_ARGS = (
    "--query-gpu=index,uuid,memory.total,memory.used,driver_version,name "
    "--format=csv,noheader,nounits"
)
APPS_ARGS = (
    "--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits"
)

LIBCUDA_C = """
#include <unistd.h>
int cuInit(unsigned int flags) { (void)flags; if (HANG) sleep(HANG); return INIT_RESULT; }
int cuDriverGetVersion(int *version) { *version = DRIVER_VERSION; return 0; }
"""
LIBCUDART_C = "int cudaRuntimeGetVersion(int *version) { *version = RUNTIME_VERSION; return 0; }\n"


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-5e1f-4c1a-9a3b-{index:012x}"


@dataclass(frozen=True)
class FakeGpu:
    index: int
    name: str
    memory_total: int  # MiB
    memory_used: int = 0

    @property
    def uuid(self) -> str:
        return gpu_uuid(self.index)


@dataclass(frozen=True)
class FakeApp:
    gpu: int
    pid: int
    name: str
    used_memory: int


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
# Six 80 GB and two 40 GB GPUs; GPU 2 and GPU 5 are held by other processes.
BUSY = (
    FakeApp(2, 4242, "python3", 30000),
    FakeApp(5, 5151, "/usr/bin/vllm-worker", 70000),
    FakeApp(5, 5152, "ray::WorkerDict", 2000),
)
EIGHT_GPUS = tuple(
    FakeGpu(
        i,
        H100 if i < 6 else A100,
        81559 if i < 6 else 40960,
        sum(a.used_memory for a in BUSY if a.gpu == i) + 4,
    )
    for i in range(8)
)


def gpu_csv(gpus: tuple[FakeGpu, ...], driver: str) -> str:
    return "".join(
        f"{g.index}, {g.uuid}, {g.memory_total}, {g.memory_used}, {driver}, {g.name}\n"
        for g in gpus
    )


def apps_csv(apps: tuple[FakeApp, ...]) -> str:
    return "".join(f"{gpu_uuid(a.gpu)}, {a.pid}, {a.name}, {a.used_memory}\n" for a in apps)


def compile_library(out: Path, source: str, soname: str, **defines: int) -> Path:
    """A real shared library, built with the machine's gcc."""
    if REAL_GCC is None:
        pytest.skip("no gcc on this machine to build the fake CUDA libraries")
    src = out.parent / (out.name + ".c")
    src.write_text(source)
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    subprocess.run(
        [REAL_GCC, "-shared", "-fPIC", f"-Wl,-soname,{soname}", *flags, "-o", str(out), str(src)],
        check=True,
    )
    return out


@dataclass
class FakeMachine:
    """What the doctor sees: PATH, LD_LIBRARY_PATH and other variables point into `root`."""

    root: Path
    path: list[Path] = field(default_factory=list)
    ld_path: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bin.mkdir(parents=True, exist_ok=True)
        self.lib.mkdir(parents=True, exist_ok=True)
        self.path.append(self.bin)
        self.ld_path.append(self.lib)

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    def environ(self) -> dict[str, str]:
        return {
            "PATH": os.pathsep.join(str(p) for p in self.path),
            "LD_LIBRARY_PATH": os.pathsep.join(str(p) for p in self.ld_path),
            **self.env,
        }

    def script(self, name: str, body: str, where: Path | None = None) -> Path:
        path = (where or self.bin) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return path

    def toolkit(self, release: str = "11.8", *, on_path: bool = True, ld: bool = True) -> Path:
        """A CUDA toolkit tree: bin/nvcc, include/cuda_runtime.h, lib64/libcudart."""
        root = self.root / f"cuda-{release}"
        major, minor = (int(p) for p in release.split("."))
        lines = [
            "nvcc: NVIDIA (R) Cuda compiler driver",
            "Copyright (c) 2005-2022 NVIDIA Corporation",
            f"Cuda compilation tools, release {release}, V{release}.89",
            f"Build cuda_{release}.r{release}/compiler.31833905_0",
        ]
        self.script(
            "nvcc",
            'for a in "$@"; do\n'
            '  if [ "$a" = -dryrun ]; then\n'
            f"    echo {shlex.quote(f'#$ _HERE_={root}/bin')} >&2\n"
            f"    echo {shlex.quote(f'#$ TOP={root}/bin/..')} >&2\n"
            "    exit 0\n"
            "  fi\n"
            "done\n"
            'if [ "$1" = --version ]; then\n'
            f"  printf '%s\\n' {' '.join(shlex.quote(line) for line in lines)}\n"
            "  exit 0\n"
            "fi\n"
            "echo 'nvcc fatal   : No input files specified' >&2\n"
            "exit 1\n",
            where=root / "bin",
        )
        (root / "include").mkdir(parents=True, exist_ok=True)
        (root / "include" / "cuda_runtime.h").write_text("/* fake */\n")
        lib64 = root / "lib64"
        lib64.mkdir(exist_ok=True)
        soname = f"libcudart.so.{major}.0" if major < 12 else f"libcudart.so.{major}"
        real = compile_library(
            lib64 / f"libcudart.so.{release}.89",
            LIBCUDART_C,
            soname,
            RUNTIME_VERSION=major * 1000 + minor * 10,
        )
        for link in (soname, "libcudart.so"):
            (lib64 / link).symlink_to(real.name)
        if on_path:
            self.path.insert(0, root / "bin")
        if ld:
            self.ld_path.append(lib64)
        return root

    def nvcc_wrapper(self, toolkit: Path) -> Path:
        """A two-line nvcc in bin/ that runs the toolkit's, as some servers have in
        /usr/local/bin."""
        return self.script("nvcc", f'exec {toolkit / "bin" / "nvcc"} "$@"\n')

    def gcc(self, version: str = "11.4.0", names: tuple[str, str] = ("gcc", "g++")) -> None:
        major = version.split(".")[0]
        for name in names:
            self.script(
                name,
                'case "$1" in\n'
                f"  -dumpfullversion) echo {version} ;;\n"
                f"  -dumpversion) echo {major} ;;\n"
                f"  --version) echo '{name} (GCC) {version}' ;;\n"
                f"  *) echo '{name}: fatal error: no input files' >&2; exit 1 ;;\n"
                "esac\n",
            )

    def ninja(self, version: str = "1.11.1") -> None:
        self.script("ninja", f'[ "$1" = --version ] && echo {version} && exit 0\nexit 1\n')

    def nvidia_smi(
        self,
        gpus: tuple[FakeGpu, ...] = EIGHT_GPUS,
        apps: tuple[FakeApp, ...] = BUSY,
        driver: str = "535.104.05",
    ) -> None:
        self.script(
            "nvidia-smi",
            'case "$*" in\n'
            f"  {shlex.quote(GPU_ARGS)}) printf '%s' {shlex.quote(gpu_csv(gpus, driver))} ;;\n"
            f"  {shlex.quote(APPS_ARGS)}) printf '%s' {shlex.quote(apps_csv(apps))} ;;\n"
            "  *) echo 'Invalid combination of input arguments.' ; exit 2 ;;\n"
            "esac\n",
        )

    def nvidia_smi_recorded(self, recorded: Path) -> None:
        """An nvidia-smi that prints, byte for byte, what a real one printed (the outputs
        `bench/gpu_proof.py --save-fixtures` keeps: one file per query, named as in its RAW)."""
        cases = {GPU_ARGS: "gpu-query", APPS_ARGS: "apps-query", "-L": "list", "topo -m": "topo"}
        cat = shutil.which("cat") or "/bin/cat"  # PATH holds only the fake machine's bin/
        body = 'case "$*" in\n'
        for args, name in cases.items():
            body += f"  {shlex.quote(args)}) exec {cat} {shlex.quote(str(recorded / (name + '.out')))} ;;\n"
        body += f"  '') exec {cat} {shlex.quote(str(recorded / 'plain.out'))} ;;\n"
        body += "  *) echo 'Invalid combination of input arguments.' ; exit 2 ;;\nesac\n"
        self.script("nvidia-smi", body)

    def nvidia_smi_hanging(self, seconds: int = 30) -> None:
        """An nvidia-smi stuck on a wedged driver."""
        self.script("nvidia-smi", f"exec {SLEEP} {seconds}\n")

    def libcuda(self, version: int, init: int = 0, hang: int = 0) -> Path:
        return compile_library(
            self.lib / "libcuda.so.1",
            LIBCUDA_C,
            "libcuda.so.1",
            DRIVER_VERSION=version,
            INIT_RESULT=init,
            HANG=hang,
        )


def relocated_python(root: Path) -> Path:
    """This interpreter copied under `root`, with its standard library linked in but no include
    directory: a real Python whose headers are missing."""
    base = Path(sys.base_prefix)
    real = Path(sys.executable).resolve()
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    exe = root / "bin" / version
    shutil.copy2(real, exe)
    (root / "lib" / version).symlink_to(base / "lib" / version)
    for lib in (base / "lib").glob("libpython*.so*"):
        (root / "lib" / lib.name).symlink_to(lib)
    probe = subprocess.run(
        [str(exe), "-I", "-c", "import sys, sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0 or not probe.stdout.startswith(str(root)):
        pytest.skip(f"this Python cannot be relocated for the test: {probe.stderr.strip()}")
    return exe


def topo(n: int, nvlink: bool = True) -> str:
    """`nvidia-smi topo -m` for `n` GPUs, all joined by NVLink or (not `nvlink`) none."""
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = "".join(
        f"GPU{i}\t"
        + "\t".join("X" if i == j else ("NV18" if nvlink else "SYS") for j in range(n))
        + "\t0-47\t0\n"
        for i in range(n)
    )
    return (
        head
        + rows
        + "\nLegend:\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    )
