"""`explain LOG`: match a failed install's (or run's) log to known causes, each with a fix.

Runs on the air-gapped server (standard library only, Python 3.8+) when an install.sh phase
fails, and anywhere through `verl-bundle explain`. Logs can be tens of MB (a flash-attn build
with NCCL_DEBUG=INFO runs), so no regular expression walks the whole text: each signature names
literal needles that `str.find` locates, and only the lines holding one are matched in full.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict

TAIL_LINES = 20
EVIDENCE_CHARS = 240
# How far around a matched line a context looks, in characters: an nvcc command line of
# flash-attn is about 3 kB, a urllib traceback with its chained exception about 5 kB.
NEAR_BEFORE = 16000
NEAR_AFTER = 8000
SETUP_BEFORE = 8000
SETUP_AFTER = 4000
# Where placeholder values are looked for around the matched line.
VALUES_BEFORE = 4000
VALUES_AFTER = 1500
# A pattern is matched this far, in characters, around its needle: a multi-megabyte line (a
# progress display without newlines) is not scanned in full for every needle on it.
LINE_REACH = 4000
# A needle that occurs on very many lines which all fail the context check must not make a
# huge log slow: after this many context checks a signature gives up.
MAX_CONTEXT_CHECKS = 1000

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A traceback echoes the source line that raised, message text included: not the error itself.
_SOURCE_ECHO = re.compile(r"\braise \w[\w.]*\(|\bwarnings\.warn\(")


@dataclass(frozen=True)
class Finding:
    """One known cause found in a log: what happened, why, what to do, and where it was seen."""

    id: str
    title: str
    cause: str
    fix: str
    evidence: str
    line: int


Values = Dict[str, str]
Derive = Callable[[Values], Values]
# (text, line start, line end) -> whether the lines around the matched one fit the cause
Context = Callable[[str, int, int], bool]


@dataclass(frozen=True)
class Signature:
    """How one cause shows in a log.

    A line matches when it holds one of `needles` (literal, case-sensitive), `pattern` matches
    it (not in a traceback's echo of the source line that raised) and `context` (if set)
    accepts the lines around it. `cause` and `fix` may hold {placeholders}: filled from the
    named groups of `values` (its match nearest to the line), then `derive`, then `defaults`.
    """

    id: str
    title: str
    cause: str
    fix: str
    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    context: Context | None = None
    values: re.Pattern[str] | None = None
    derive: Derive | None = None
    defaults: tuple[tuple[str, str], ...] = ()


def _gcc_for_nvcc(v: Values) -> Values:
    """The newest gcc the failing nvcc accepts, from its message or torch's."""
    if v.get("later"):
        return {"gcc": v["later"]}
    if v.get("below"):
        return {"gcc": str(int(v["below"]) - 1)}
    return {}


def _wheel_tags(v: Values) -> Values:
    parts = v.get("wheel", "")[: -len(".whl")].split("-")
    if len(parts) < 5:
        return {}
    return {"tags": f" (Python tag {parts[-3]}, platform {parts[-1]})"}


def _requirement(v: Values) -> Values:
    req = v.get("req") or v.get("req2") or v.get("req3")
    return {"req": req} if req else {}


def _driver_cuda(v: Values) -> Values:
    """torch reports the driver's CUDA version as an integer: 11040 is CUDA 11.4."""
    if not v.get("found"):
        return {}
    n = int(v["found"])
    return {"driver": f" (it supports CUDA up to {n // 1000}.{n % 1000 // 10})"}


def _near(pattern: re.Pattern[str]) -> Context:
    """A context: `pattern` occurs within NEAR_BEFORE/NEAR_AFTER characters of the line."""

    def near(text: str, start: int, end: int) -> bool:
        lo, hi = max(0, start - NEAR_BEFORE), min(len(text), end + NEAR_AFTER)
        return pattern.search(text, lo, hi) is not None

    return near


# What shows that output comes from flash-attn's setup.py, and what ends that output.
_FLASH_SETUP_START = re.compile(
    r"Guessing wheel URL|flash[-_]att(?:n|ention)\S*/setup\.py"
    r"|(?:Building wheel|Running setup\.py install) for flash[-_]attn"
)
_FLASH_SETUP_FRAME = re.compile(r"flash[-_]att(?:n|ention)\S*/setup\.py")
_OUTPUT_END = re.compile(
    r"\[end of output\]|Precompiled wheel not found|Raw wheel path|^\s*Successfully "
    r"|^\s*-{20,}\s*$",
    re.MULTILINE,
)


def _in_flash_setup(text: str, start: int, end: int) -> bool:
    """Whether the line is inside flash-attn's setup.py output: after its start (the wheel
    URL guess, a build line) with no end of that output between, or followed by one of its
    traceback frames before the output ends."""
    last: re.Match[str] | None = None
    for m in _FLASH_SETUP_START.finditer(text, max(0, start - SETUP_BEFORE), start):
        last = m
    if last is not None and _OUTPUT_END.search(text, last.end(), start) is None:
        return True
    hi = min(len(text), end + SETUP_AFTER)
    stop = _OUTPUT_END.search(text, end, hi)
    return _FLASH_SETUP_FRAME.search(text, end, stop.start() if stop else hi) is not None


def _outside_flash_setup(text: str, start: int, end: int) -> bool:
    return not _in_flash_setup(text, start, end)


_NETWORK_NEEDLES = (
    "Temporary failure in name resolution",
    "Name or service not known",
    "nodename nor servname",
    "urlopen error",
    "URLError",
    "Failed to establish a new connection",
    "Network is unreachable",
    "Could not resolve host",
)
_NETWORK = re.compile("|".join(re.escape(n) for n in _NETWORK_NEEDLES))
_BUILD = re.compile(
    r"cc1plus|\bcicc\b|\bptxas\b|\bnvcc\b|\bninja\b|Building wheel for|bdist_wheel"
    r"|\bbuilding '|\bg\+\+|\bgcc\b|\bc\+\+:"
)

# Most specific first: a root cause (the build ran out of memory) before what follows from it
# (flash_attn cannot be imported), and network access before pip's "no matching distribution"
# that a failed index lookup produces.
SIGNATURES: tuple[Signature, ...] = (
    Signature(
        id="flash-attn-download",
        title="flash-attn's setup.py tried to download a prebuilt wheel, with no network",
        cause=(
            "flash-attn's setup.py (2.5.x) first tries to download a prebuilt wheel from its "
            "GitHub releases ('Guessing wheel URL') and only then builds. Offline the download "
            "raises a URLError that setup.py does not catch, so the install fails before "
            "anything is compiled."
        ),
        fix=(
            "Set FLASH_ATTENTION_FORCE_BUILD=TRUE so setup.py builds from source without trying "
            "the download (the bundle's install.sh sets it; export it yourself when running pip "
            "by hand), or build the bundle with the matching prebuilt wheel "
            "(flash_attn-<ver>+cu<XY>torch<M.m>cxx11abi<TRUE|FALSE>-cp3X-cp3X-linux_x86_64.whl) "
            "so nothing is downloaded or built here."
        ),
        needles=_NETWORK_NEEDLES,
        pattern=_NETWORK,
        context=_in_flash_setup,
    ),
    Signature(
        id="cuda-mismatch",
        title="the CUDA toolkit (nvcc) does not match the CUDA torch was built with",
        cause=(
            "torch's cpp_extension found nvcc for CUDA {found}, but this torch was built with "
            "CUDA {torch}; it refuses to compile an extension (flash-attn) when the major "
            "versions differ (a minor difference is only a warning)."
        ),
        fix=(
            "Install the CUDA {torch} toolkit (the major version of torch.version.cuda) and point "
            "the build at it: export CUDA_HOME=/usr/local/cuda-{torch}; "
            "export PATH=$CUDA_HOME/bin:$PATH; then `$CUDA_HOME/bin/nvcc --version` must say "
            "release {torch}. torch looks at CUDA_HOME, then CUDA_PATH, then the nvcc on PATH, "
            "then /usr/local/cuda."
        ),
        needles=("The detected CUDA version (",),
        pattern=re.compile(r"The detected CUDA version \([^)]*\) mismatches"),
        values=re.compile(
            r"The detected CUDA version \((?P<found>[^)\s]+)\) mismatches the version that was "
            r"used to compile\s+PyTorch \((?P<torch>[^)\s]+)\)"
        ),
        defaults=(("found", "(another major version)"), ("torch", "<torch.version.cuda>")),
    ),
    Signature(
        id="cuda-home-missing",
        title="no CUDA toolkit (nvcc) for the build",
        cause=(
            "An extension (flash-attn) is compiled on this server, and torch's cpp_extension "
            "found no nvcc: CUDA_HOME is unset and there is no nvcc on PATH or in "
            "/usr/local/cuda. The driver alone (nvidia-smi) is not enough to build: that needs "
            "the CUDA toolkit."
        ),
        fix=(
            "Install the CUDA toolkit with the major version of torch.version.cuda (e.g. 11.8 "
            "for a cu118 bundle), then export CUDA_HOME=/usr/local/cuda-11.8 and "
            "PATH=$CUDA_HOME/bin:$PATH before installing; `$CUDA_HOME/bin/nvcc --version` must "
            "work. Or build the bundle with flash-attn as a prebuilt wheel so nothing compiles "
            "here."
        ),
        needles=(
            "CUDA_HOME environment variable is not set",
            "but nvcc was not found",
            "nvcc'",
            "name 'bare_metal_version' is not defined",
        ),
        pattern=re.compile(
            r"CUDA_HOME environment variable is not set|but nvcc was not found"
            r"|No such file or directory: '[^']*nvcc'"
            r"|command '[^']*nvcc' failed: No such file or directory"
            r"|name 'bare_metal_version' is not defined"
        ),
    ),
    Signature(
        id="nvcc-gcc",
        title="nvcc rejects this gcc version",
        cause=(
            "The host gcc is newer than this CUDA's nvcc accepts (CUDA 11.8 accepts gcc <= 11, "
            "12.1-12.3 accept <= 12, 12.4 and later <= 13), so compiling the CUDA sources stops "
            "in host_config.h (or torch's cpp_extension refuses the compiler first)."
        ),
        fix=(
            "Install a supported gcc next to the default one (`apt install gcc-{gcc} g++-{gcc}`, "
            "or `dnf install gcc-toolset-{gcc}` and `source scl_source enable gcc-toolset-{gcc}`) "
            "and build with it: export CC=gcc-{gcc} CXX=g++-{gcc} NVCC_CCBIN=/usr/bin/gcc-{gcc} "
            "CUDAHOSTCXX=/usr/bin/g++-{gcc}. nvcc's -allow-unsupported-compiler skips the check "
            "at your own risk (miscompiled kernels are possible)."
        ),
        needles=("unsupported GNU version", "is greater than the maximum required version by CUDA"),
        pattern=re.compile(
            r"unsupported GNU version|is greater than the maximum required version by CUDA \d"
        ),
        values=re.compile(
            r"gcc versions later than (?P<later>\d+)"
            r"|maximum required version by CUDA[^\n]*?<\s*(?P<below>\d+)(?:\.\d+)*\)"
        ),
        derive=_gcc_for_nvcc,
        defaults=(("gcc", "11"),),
    ),
    Signature(
        id="compiler-missing",
        title="no C/C++ compiler",
        cause=(
            "A build step needs gcc/g++ and finds none. Even an install of wheels only needs a "
            "C compiler on the server: triton compiles small launchers when the first kernel "
            "runs."
        ),
        fix=(
            "Install the compiler from the OS repository or its local mirror: "
            "`apt install build-essential` (Debian/Ubuntu) or `dnf install gcc gcc-c++ make` "
            "(RHEL and alikes); if it lives somewhere unusual, export CC=/path/to/gcc "
            "CXX=/path/to/g++."
        ),
        needles=(
            "failed: No such file or directory",
            "unable to execute '",
            "Failed to find C compiler",
            "error trying to exec 'cc1",
        ),
        pattern=re.compile(
            r"(?:command|unable to execute) '(?:[^']*/)?(?:[\w.]+-)*"
            r"(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(?:-\d+)?'(?: failed)?: "
            r"No such file or directory"
            r"|Failed to find C compiler|error trying to exec 'cc1(?:plus)?'"
        ),
    ),
    Signature(
        id="python-headers",
        title="the Python headers (Python.h) are missing",
        cause=(
            "A C/C++ compile step includes Python.h, which comes with the Python development "
            "package, not with python3 itself. triton needs it at run time too, to build its "
            "launchers."
        ),
        fix=(
            "Install the headers for the python the bundle installs with: "
            "`apt install python{py}-dev` (Debian/Ubuntu) or `dnf install python3-devel` "
            "(RHEL; python{py}-devel for a non-default python). Check that "
            "`python3 -c \"import sysconfig; print(sysconfig.get_paths()['include'])\"` names a "
            "directory holding Python.h."
        ),
        needles=("Python.h: No such file or directory",),
        pattern=re.compile(r"Python\.h: No such file or directory"),
        values=re.compile(r"include/python(?P<py>3\.\d+)"),
        defaults=(("py", "3.X"),),
    ),
    Signature(
        id="oom-build",
        title="the build ran out of memory (a compiler was killed)",
        cause=(
            "The kernel's OOM killer stopped a compiler (cc1plus, cicc, ptxas or nvcc) during "
            "the build: each parallel nvcc job can take several GB of RAM, and flash-attn "
            "compiles many files in parallel."
        ),
        fix=(
            "Build with fewer parallel jobs: export MAX_JOBS=2 (or what "
            "`python3 -m verl_bundle.airgap max-jobs` suggests for this machine's RAM) and "
            "NVCC_THREADS=1, then run the install again; add swap if RAM is small; or build the "
            "bundle with flash-attn as a prebuilt wheel so nothing compiles here."
        ),
        needles=(
            "Killed",
            "died due to signal 9",
            "MemoryError",
            "Cannot allocate memory",
        ),
        pattern=re.compile(
            r"Killed signal terminated program|died due to signal 9|(?:^|[\s:])Killed\b"
            r"|\bMemoryError\b|Cannot allocate memory",
            re.MULTILINE,
        ),
        context=_near(_BUILD),
    ),
    Signature(
        id="hash-mismatch",
        title="a bundle file does not match its recorded hash",
        cause=(
            "pip (or uv) checked a file against the hash recorded when the bundle was built, and "
            "it differs: the file was damaged in transfer (a truncated copy, a text-mode FTP "
            "transfer) or altered."
        ),
        fix=(
            "Check the whole bundle with `python3 -m verl_bundle.airgap verify <bundle dir or "
            "tarball>` (or `sha256sum -c SHA256SUMS` inside the bundle), then copy the damaged "
            "file, or the whole tarball, again from the original and compare its sha256 with "
            "the build host's. Do not remove --require-hashes to get past it."
        ),
        needles=("DO NOT MATCH THE HASHES", "Hash mismatch for `"),
        pattern=re.compile(r"DO NOT MATCH THE HASHES|Hash mismatch for `"),
    ),
    Signature(
        id="externally-managed",
        title="pip refuses to install into the system Python (PEP 668)",
        cause=(
            "This python is marked as managed by the OS (PEP 668: externally-managed-"
            "environment), so pip refuses to install into it outside a virtual environment."
        ),
        fix=(
            "Install into a virtual environment: the bundle's install.sh creates one "
            "(`python3 -m venv`); when running pip by hand, use that venv's python "
            "(`<venv>/bin/python -m pip ...`). Avoid --break-system-packages: it can break the "
            "OS's own Python tools."
        ),
        needles=("externally-managed-environment",),
        pattern=re.compile(r"externally-managed-environment"),
    ),
    Signature(
        id="venv-missing",
        title="python3 cannot create a virtual environment (venv/ensurepip missing)",
        cause=(
            "Debian and Ubuntu ship venv's ensurepip in a separate package (python3.X-venv), so "
            "this python cannot create the environment the bundle installs into."
        ),
        fix=(
            "Install it from the OS repository or its local mirror: `apt install python{py}-venv` "
            "(for the version `python3 --version` prints), then run install.sh again. On RHEL "
            "venv is part of python3 itself."
        ),
        needles=("ensurepip is not", "No module named ensurepip", "No module named venv"),
        pattern=re.compile(r"ensurepip is not|No module named (?:ensurepip|venv)\b"),
        values=re.compile(r"python(?P<py>3\.\d+)-venv"),
        defaults=(("py", "3.X"),),
    ),
    Signature(
        id="unsupported-wheel",
        title="pip says a wheel does not fit this Python or platform",
        cause=(
            "pip refuses {wheel}{tags}: its tags do not fit this interpreter or this system. "
            "Either the bundle was built for another Python version or platform, or this pip "
            "is too old to know the wheel's platform tag (manylinux_2_x tags need pip >= 20.3, "
            "manylinux2014 needs pip >= 19.3), or the system's glibc is older than the tag "
            "needs."
        ),
        fix=(
            "Use the bundle's own pip: install.sh bootstraps it into the venv before anything "
            "else, so run pip as `<venv>/bin/python -m pip`, not the system's pip. Compare "
            "`python3 --version` and `ldd --version` (glibc) with the bundle's target, and build "
            "the bundle for this server (`verl-bundle build --python X.Y`)."
        ),
        needles=("is not a supported wheel on this platform",),
        pattern=re.compile(r"is not a supported wheel on this platform"),
        values=re.compile(r"(?P<wheel>[^\s/'\"]+\.whl) is not a supported wheel"),
        derive=_wheel_tags,
        defaults=(("wheel", "a wheel"), ("tags", "")),
    ),
    Signature(
        id="network-access",
        title="something tried to reach the network",
        cause=(
            "A step tried to download something (a package index, a model, a file) and this "
            "server has no network or no DNS. An offline install must not download anything."
        ),
        fix=(
            "pip: the bundle installs with --no-index from its own files; check `pip config "
            "list` and PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / PIP_FIND_LINKS for an index that "
            "sneaks in, and that every requirement is in the bundle. At run time (transformers, "
            "huggingface_hub): export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 and give local "
            "model paths."
        ),
        needles=_NETWORK_NEEDLES,
        pattern=_NETWORK,
        context=_outside_flash_setup,
    ),
    Signature(
        id="no-matching-dist",
        title="the installer found no file for a requirement",
        cause=(
            "pip (or uv) found no file for {req} that fits this Python and platform. Offline "
            "(--no-index) it sees only the bundle's files, so the bundle was built for another "
            "Python version or platform, or the file is missing from it."
        ),
        fix=(
            "Compare `python3 --version` with the Python the bundle was built for (its "
            "manifest.json) and build the bundle for this server's Python (`verl-bundle build "
            "--python X.Y`); do not mix files from different bundles; `python3 -m "
            "verl_bundle.airgap verify <bundle>` shows whether a file is missing."
        ),
        needles=(
            "Could not find a version that satisfies the requirement",
            "No matching distribution found for",
            "was not found in the provided package locations",
            "doesn't have a source distribution or wheel for the current platform",
        ),
        pattern=re.compile(
            r"Could not find a version that satisfies the requirement"
            r"|No matching distribution found for"
            r"|was not found in the provided package locations"
            r"|doesn't have a source distribution or wheel for the current platform"
        ),
        values=re.compile(
            r"satisfies the requirement (?P<req>\S+)|distribution found for (?P<req2>\S+)"
            r"|Because (?P<req3>\S+) was not found in the provided"
        ),
        derive=_requirement,
        defaults=(("req", "a requirement"),),
    ),
    Signature(
        id="flash-attn-abi",
        title="flash-attn was built against a different torch",
        cause=(
            "flash-attn's compiled extension (flash_attn_2_cuda) was built against another "
            "torch (version, CUDA or C++ ABI) than the one installed: it loads, but cannot find "
            "torch's symbols."
        ),
        fix=(
            "Rebuild flash-attn against the installed torch: FLASH_ATTENTION_FORCE_BUILD=TRUE "
            "pip install --no-index --find-links <bundle>/sources --no-build-isolation --no-deps "
            "--force-reinstall flash-attn, or use the prebuilt wheel whose name matches `python "
            '-c "import torch; print(torch.__version__, torch.version.cuda, '
            'torch._C._GLIBCXX_USE_CXX11_ABI)"`. Do not upgrade torch after flash-attn is built.'
        ),
        needles=("flash_attn_2_cuda",),
        pattern=re.compile(r"flash_attn_2_cuda[^\s:]*: undefined symbol"),
    ),
    Signature(
        id="build-isolation",
        title="a package that builds against torch could not import torch",
        cause=(
            "A package that compiles against torch (flash-attn's setup.py imports torch) was "
            "built in pip's isolated build environment, which does not see the torch installed "
            "in the venv."
        ),
        fix=(
            "Install it with --no-build-isolation once torch (and setuptools, wheel, packaging, "
            "ninja, psutil) are installed in the same venv: `pip install --no-index --find-links "
            "<bundle>/sources --no-build-isolation flash-attn`; the bundle's install.sh does this."
        ),
        needles=("No module named 'torch'",),
        pattern=re.compile(r"No module named 'torch'"),
        context=_near(
            re.compile(
                r"Getting requirements to build|Preparing metadata|egg_info|bdist_wheel"
                r"|pip-build-env|/setup\.py|Building wheel for"
            )
        ),
    ),
    Signature(
        id="flash-attn-missing",
        title="flash_attn cannot be imported",
        cause=(
            "Python cannot import flash_attn even if the install reported success: this "
            "interpreter is not the one the bundle installed into (another venv, a conda env, "
            "the system python, or a ray worker started with another python), or the build "
            "produced no compiled extension (FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE installs only "
            "the Python files)."
        ),
        fix=(
            "Activate the venv the bundle installed into (`source <venv>/bin/activate`, or call "
            '`<venv>/bin/python`) and check with that interpreter: `python -c "import '
            'flash_attn, flash_attn_2_cuda"`. Make sure FLASH_ATTENTION_SKIP_CUDA_BUILD is '
            "unset, then reinstall flash-attn from the bundle; for ray, start the cluster from "
            "the same venv."
        ),
        needles=("No module named 'flash_attn", "the package flash_attn seems to be not installed"),
        pattern=re.compile(
            r"No module named '(?:flash_attn|flash_attn_2_cuda)'"
            r"|error: the package flash_attn seems to be not installed"
        ),
    ),
    Signature(
        id="driver-too-old",
        title="the NVIDIA driver is too old for this CUDA",
        cause=(
            "The installed NVIDIA driver is older than the CUDA that torch (or another library) "
            "was built with needs{driver}."
        ),
        fix=(
            "Compare `nvidia-smi` (top right: the newest CUDA the driver supports) with "
            "torch.version.cuda. Upgrade the driver (the CUDA 11.8 toolkit needs >= 520.61.05 "
            "and any 11.x runtime runs on >= 450.80.02; 12.x runtimes need >= 525.60.13, 12.4 "
            "needs >= 550.54.14, 12.6 >= 560.28.03), or use a bundle built for an older CUDA "
            "(e.g. a cu118 profile)."
        ),
        needles=(
            "CUDA driver version is insufficient for CUDA runtime version",
            "NVIDIA driver on your system is too old",
        ),
        pattern=re.compile(
            r"CUDA driver version is insufficient for CUDA runtime version"
            r"|NVIDIA driver on your system is too old"
        ),
        values=re.compile(r"too old \(found version (?P<found>\d+)\)"),
        derive=_driver_cuda,
        defaults=(("driver", ""),),
    ),
    Signature(
        id="libcuda-missing",
        title="no NVIDIA driver library (libcuda.so.1)",
        cause=(
            "The NVIDIA driver's user-space library libcuda.so.1 cannot be loaded: no driver is "
            "installed, or its library directory is not on the loader path (common in a "
            "container started without GPU support)."
        ),
        fix=(
            "Run `nvidia-smi`; if it fails, install the NVIDIA driver. If it works, find the "
            "library (`ldconfig -p | grep libcuda`, usually in /usr/lib/x86_64-linux-gnu or "
            "/usr/lib64), add its directory to a file in /etc/ld.so.conf.d/ and run `ldconfig`. "
            "In a container, start it through the NVIDIA Container Toolkit "
            "(`docker run --gpus all ...`)."
        ),
        needles=(
            "libcuda.so.1: cannot open shared object file",
            "Found no NVIDIA driver on your system",
            "libcuda.so cannot found",
        ),
        pattern=re.compile(
            r"libcuda\.so\.1: cannot open shared object file"
            r"|Found no NVIDIA driver on your system|libcuda\.so cannot found"
        ),
    ),
    Signature(
        id="no-kernel-image",
        title="no GPU code for this GPU's architecture",
        cause=(
            "A binary has no code for this GPU's compute capability: flash-attn 2 is built only "
            "for sm_80 and newer (A100, A10, L40, H100), or torch or an extension was built "
            "without this GPU's architecture (TORCH_CUDA_ARCH_LIST)."
        ),
        fix=(
            "Compare the GPU's capability (`nvidia-smi --query-gpu=name,compute_cap "
            '--format=csv`) with `python -c "import torch; print(torch.cuda.get_arch_list())"`; '
            'rebuild the extension with TORCH_CUDA_ARCH_LIST set for this GPU (e.g. "8.0" for '
            'A100, "9.0" for H100) or use a torch build that supports it. flash-attn 2 does '
            "not run on V100 or T4 (sm_70/sm_75)."
        ),
        needles=(
            "no kernel image is available for execution on the device",
            "is not compatible with the current PyTorch installation",
        ),
        pattern=re.compile(
            r"no kernel image is available for execution on the device"
            r"|is not compatible with the current PyTorch installation"
        ),
    ),
    Signature(
        id="invalid-ordinal",
        title="a GPU index outside the visible GPUs",
        cause=(
            "A process asked for a GPU index that does not exist among the GPUs it can see. "
            "CUDA_VISIBLE_DEVICES renumbers devices: with CUDA_VISIBLE_DEVICES=3,1 only cuda:0 "
            "(physical GPU 3) and cuda:1 (physical GPU 1) exist."
        ),
        fix=(
            "Keep device ordinals below the number of visible GPUs: check CUDA_VISIBLE_DEVICES "
            "and `nvidia-smi -L`, and that trainer.n_gpus_per_node is not larger than the GPUs "
            "each node really has visible; `verl-bundle doctor` (on the server `python3 -m "
            "verl_bundle.airgap doctor`) lists them."
        ),
        needles=("invalid device ordinal",),
        pattern=re.compile(r"invalid device ordinal"),
    ),
    Signature(
        id="device-mismatch",
        title="tensors on different devices",
        cause=(
            "An operation got tensors on different devices ({a} and {b}): usually a worker's "
            "LOCAL_RANK is not mapped to its own GPU, or part of the model or a batch stayed on "
            "another device (the CPU)."
        ),
        fix=(
            "Call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before building the model "
            "(verl's workers do), check CUDA_VISIBLE_DEVICES in each worker and that ray gives "
            "each worker its own GPU (num_gpus), move inputs to the model's device, and set "
            "offload options (param_offload) the same for every worker."
        ),
        needles=("Expected all tensors to be on the same device",),
        pattern=re.compile(r"Expected all tensors to be on the same device"),
        values=re.compile(r"found at least two devices, (?P<a>[\w:]+) and (?P<b>[\w:]+)"),
        defaults=(("a", "e.g. cuda:0"), ("b", "cuda:1 or cpu")),
    ),
    Signature(
        id="nccl-timeout",
        title="an NCCL collective timed out",
        cause=(
            "A collective operation (all-reduce, all-gather, ...) or the rendezvous did not "
            "finish in time: one rank hung or died (look for the first error in every rank's "
            "log), not all ranks were started, or the network between the ranks is blocked."
        ),
        fix=(
            "Run again with NCCL_DEBUG=INFO (and TORCH_DISTRIBUTED_DEBUG=DETAIL) to see where it "
            "stops; choose the right interface with NCCL_SOCKET_IFNAME=<iface> (and "
            "NCCL_IB_DISABLE=1 if there is no working InfiniBand); open MASTER_PORT and NCCL's "
            "ports between the nodes in the firewall; check that every rank started; keep "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 so a hang fails fast, and raise the timeout only "
            "for steps that are genuinely slow."
        ),
        # Not a bare "timeout": config prints are full of it.
        needles=(
            "timed out",
            "Timed out",
            "timing out",
            "operation timeout",
            "Socket Timeout",
            "socket timeout",
            "got stuck",
        ),
        pattern=re.compile(
            r"Watchdog caught collective operation timeout|milliseconds before timing out"
            r"|(?i:(?:nccl|processgroup|c10d|diststore|distbackend|tcpstore|rendezvous)"
            r".*(?:timed out|socket timeout|got stuck))"
            r"|Timed out after \d+ seconds waiting for clients"
        ),
    ),
    Signature(
        id="cuda-oom",
        title="a GPU ran out of memory",
        cause="A GPU ran out of memory during training or generation.",
        fix=(
            "Lower the per-GPU micro batch sizes (ppo_micro_batch_size[_per_gpu], "
            "log_prob_micro_batch_size[_per_gpu]), lower "
            "actor_rollout_ref.rollout.gpu_memory_utilization (vLLM keeps that share of each "
            "GPU), enable actor_rollout_ref.model.enable_gradient_checkpointing and FSDP "
            "param/optimizer offload; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "against fragmentation; check with nvidia-smi that no other process holds the GPU."
        ),
        needles=("CUDA out of memory",),
        pattern=re.compile(r"CUDA out of memory"),
    ),
)


class _Values(Dict[str, str]):
    def __init__(self, values: Values, defaults: tuple[tuple[str, str], ...]) -> None:
        super().__init__(values)
        self._defaults = dict(defaults)

    def __missing__(self, key: str) -> str:
        return self._defaults.get(key, "?")


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, len(text) if end == -1 else end


def _first_match(sig: Signature, text: str) -> tuple[int, int, re.Match[str]] | None:
    """The earliest line that matches `sig`: (line start, line end, the match)."""
    best: tuple[int, int, re.Match[str]] | None = None
    context_checks = 0
    for needle in sig.needles:
        limit = best[0] if best is not None else len(text)
        pos = text.find(needle, 0, limit + len(needle))
        while pos != -1 and pos < limit:
            start, end = _line_bounds(text, pos)
            m = sig.pattern.search(text, max(start, pos - LINE_REACH), min(end, pos + LINE_REACH))
            if m is not None and _SOURCE_ECHO.search(text, max(start, m.start() - 400), m.start()):
                m = None
            if m is not None and sig.context is not None:
                context_checks += 1
                if context_checks > MAX_CONTEXT_CHECKS:
                    return best
                if not sig.context(text, start, end):
                    m = None
            if m is not None:
                best = (start, end, m)
                break
            pos = text.find(needle, end, limit + len(needle))
    return best


def _values(sig: Signature, text: str, start: int) -> Values:
    found: Values = {}
    if sig.values is not None:
        lo = max(0, start - VALUES_BEFORE)
        hi = min(len(text), start + VALUES_AFTER)
        nearest: re.Match[str] | None = None
        for m in sig.values.finditer(text, lo, hi):
            if nearest is None or abs(m.start() - start) < abs(nearest.start() - start):
                nearest = m
        if nearest is not None:
            found = {k: v for k, v in nearest.groupdict().items() if v is not None}
    if sig.derive is not None:
        found.update(sig.derive(found))
    return found


def _evidence(text: str, start: int, end: int, at: int) -> str:
    """The matched line, trimmed: the \\r-segment that matched, ANSI colours removed."""
    seg_start = max(start, text.rfind("\r", start, at) + 1)
    seg_end = text.find("\r", at, end)
    raw = text[seg_start : end if seg_end == -1 else seg_end]
    line = _ANSI.sub("", raw).strip()
    if len(line) <= EVIDENCE_CHARS:
        return line
    # A long line (an nvcc command, a pip warning with a repr inside): keep the matched part.
    first = max(0, at - seg_start - EVIDENCE_CHARS // 3)
    piece = _ANSI.sub("", raw[first : first + EVIDENCE_CHARS]).strip()
    return ("..." if first else "") + piece + ("..." if first + EVIDENCE_CHARS < len(raw) else "")


def explain_text(text: str) -> list[Finding]:
    """Every known cause found in `text`, most specific first, each once (its first line)."""
    findings: list[Finding] = []
    for sig in SIGNATURES:
        hit = _first_match(sig, text)
        if hit is None:
            continue
        start, end, m = hit
        values = _Values(_values(sig, text, start), sig.defaults)
        findings.append(
            Finding(
                id=sig.id,
                title=sig.title,
                cause=sig.cause.format_map(values),
                fix=sig.fix.format_map(values),
                evidence=_evidence(text, start, end, m.start()),
                line=text.count("\n", 0, start) + 1,
            )
        )
    return findings


def tail(text: str, n: int = TAIL_LINES) -> list[str]:
    """The last `n` lines as a terminal shows them (last \\r-segment, no colours)."""
    end = len(text)
    while end > 0 and text[end - 1] in "\r\n":
        end -= 1
    if end == 0:
        return []
    pos = end
    for _ in range(n):
        pos = text.rfind("\n", 0, pos)
        if pos == -1:
            break
    lines = text[pos + 1 : end].split("\n")
    return [_ANSI.sub("", line.rstrip("\r").rsplit("\r", 1)[-1]) for line in lines]


def render_text(findings: list[Finding], text: str) -> str:
    """For people: each finding's title, cause, fix and where it was seen; or the log's tail."""
    if not findings:
        last = tail(text)
        out = [f"explain: no known cause for this log; its last {len(last)} lines:"]
        out += ["    " + line for line in last]
        return "\n".join(out)
    noun = "cause" if len(findings) == 1 else "causes"
    out = [f"explain: {len(findings)} known {noun} in this log, most specific first"]
    for i, f in enumerate(findings, 1):
        out += [
            "",
            f"{i}. {f.title} [{f.id}]",
            f"   cause: {f.cause}",
            f"   fix: {f.fix}",
            f"   seen at line {f.line}: {f.evidence}",
        ]
    return "\n".join(out)


def render_json(findings: list[Finding], text: str) -> dict[str, Any]:
    """For machines: {"known", "findings": [{id, title, cause, fix, evidence, line}], "tail"}."""
    return {
        "known": bool(findings),
        "findings": [
            {
                "id": f.id,
                "title": f.title,
                "cause": f.cause,
                "fix": f.fix,
                "evidence": f.evidence,
                "line": f.line,
            }
            for f in findings
        ],
        "tail": tail(text),
    }


def read_log(path: str) -> str:
    """The log's text (`-` is standard input); undecodable bytes become U+FFFD."""
    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    return data.decode("utf-8", "replace")


def _emit(text: str) -> None:
    # A server's C locale may leave stdout ASCII; pip's box drawing must not crash the report.
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(text.encode(encoding, "replace").decode(encoding, "replace"))


def main(argv: list[str]) -> int:
    """`explain LOGFILE [--json]`: exit 0 when a cause is known, 1 when none is, 2 on bad usage."""
    parser = argparse.ArgumentParser(
        prog="explain",
        description="Match a failed install's log to known causes and print a fix for each.",
    )
    parser.add_argument("log", metavar="LOGFILE", help="the log to read; - reads standard input")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 after --help
        return exc.code if isinstance(exc.code, int) else 2
    try:
        text = read_log(args.log)
    except OSError as exc:
        print(f"explain: {args.log}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    findings = explain_text(text)
    if args.json:
        _emit(json.dumps(render_json(findings, text), indent=2))
    else:
        _emit(render_text(findings, text))
    return 0 if findings else 1
