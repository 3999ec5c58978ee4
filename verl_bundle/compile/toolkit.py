"""Finding a toolkit on the online host that can compile a profile's source builds: an nvcc of
the profile's CUDA major, a gcc/g++ that nvcc and the profile accept, and the Python headers of
the *target* Python (not the one running verl-bundle)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from verl_bundle.errors import BundleError
from verl_bundle.interpreter import find_python, python_version

_RELEASE = re.compile(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)+)")


class ToolkitError(BundleError):
    """No toolkit here fits the profile (or the one given does not): one line, what and why."""


@dataclass(frozen=True)
class Nvcc:
    path: Path  # bin/nvcc of the toolkit
    home: Path  # CUDA_HOME for the build
    release: str  # "13.0"
    version: str  # "13.0.88"
    from_stack: bool = False  # unpacked from the stack's own nvidia-cuda-nvcc wheels

    @property
    def major(self) -> int:
        return int(self.release.split(".")[0])


@dataclass(frozen=True)
class Compiler:
    cc: str
    cxx: str
    version: str  # gcc -dumpfullversion

    def describe(self) -> str:
        return f"gcc {self.version}"


@dataclass(frozen=True)
class HostPython:
    path: str
    version: str  # "3.10"
    include: str  # holds Python.h


@dataclass(frozen=True)
class Toolkit:
    """What a host compile uses; `describe` is what the manifest records as provenance."""

    nvcc: Nvcc
    compiler: Compiler
    python: HostPython

    def describe(self) -> str:
        where = "the stack's nvidia-cuda-nvcc wheels" if self.nvcc.from_stack else self.nvcc.home
        return f"nvcc {self.nvcc.version} ({where})"


@dataclass(frozen=True)
class ToolkitRequest:
    """Where to look, from the command line (None: search)."""

    cuda_home: Path | None = None
    cc: str | None = None
    cxx: str | None = None
    host_python: str | None = None
    # A toolkit unpacked from the stack's own wheels (CUDA 13+), tried after the host's own.
    stack_home: Path | None = None


def nvcc_release(nvcc: Path) -> tuple[str, str] | None:
    """("13.0", "13.0.88") from `nvcc --version`, or None when it does not run or say so."""
    try:
        proc = subprocess.run(
            [str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _RELEASE.search(proc.stdout)
    return (f"{m.group(1)}.{m.group(2)}", m.group(3)) if m else None


def _homes(req: ToolkitRequest, environ: Mapping[str, str]) -> tuple[list[Path], str | None]:
    """Toolkit directories to try, and the option or variable that named one (then it is the
    only one: a toolkit the user pointed at is used or refused, never silently replaced)."""
    if req.cuda_home is not None:
        return [req.cuda_home], "--cuda-home"
    if environ.get("CUDA_HOME"):
        return [Path(environ["CUDA_HOME"])], "CUDA_HOME"
    homes: list[Path] = []
    on_path = shutil.which("nvcc", path=environ.get("PATH"))
    if on_path:
        # A wrapper script (/usr/local/bin/nvcc here) has no toolkit beside it: skipped, and
        # the real one is found among /usr/local/cuda*.
        homes.append(Path(on_path).resolve().parent.parent)
    homes.append(Path("/usr/local/cuda"))
    homes += [Path(p) for p in sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    if req.stack_home is not None:
        homes.append(req.stack_home)
    return homes, None


def find_nvcc(cuda: str, req: ToolkitRequest, environ: Mapping[str, str]) -> Nvcc:
    """An nvcc of `cuda`'s major (a newer minor is fine: torch accepts it)."""
    want = int(cuda.split(".")[0])
    homes, named_by = _homes(req, environ)
    seen: list[str] = []
    tried: set[Path] = set()
    for home in homes:
        if home.resolve() in tried:  # /usr/local/cuda is usually a link to a cuda-X.Y
            continue
        tried.add(home.resolve())
        nvcc = home / "bin" / "nvcc"
        # A wrapper script (/usr/local/bin/nvcc -> /usr/local) has no toolkit headers beside it.
        if not nvcc.is_file() or not (home / "include" / "cuda_runtime.h").is_file():
            continue
        found = nvcc_release(nvcc)
        if found is None:
            seen.append(f"{nvcc} does not report its release")
            continue
        release, version = found
        if int(release.split(".")[0]) == want and Version(release) >= Version(cuda):
            stack = req.stack_home is not None and home == req.stack_home
            return Nvcc(home.resolve() / "bin" / "nvcc", home.resolve(), release, version, stack)
        seen.append(f"nvcc {release} at {home}")
    if named_by:
        what = f"{named_by} {homes[0]}: " + (
            seen[0] if seen else "no bin/nvcc and include/cuda_runtime.h there"
        )
        raise ToolkitError(
            f"{what}; the profile needs CUDA {want}.x (>= {cuda}) to compile here; point "
            f"{named_by} at a CUDA {want} toolkit, or pass --compile never to build on the server"
        )
    found_text = ", ".join(seen) if seen else "no nvcc on PATH or in /usr/local/cuda*"
    if req.stack_home is None and want >= 13:
        found_text += ", and the stack locks no nvidia-cuda-nvcc wheel with nvcc in it"
    raise ToolkitError(
        f"no CUDA {want}.x toolkit (>= {cuda}) on this host ({found_text}); give --cuda-home"
    )


def find_compiler(spec: str | None, req: ToolkitRequest, environ: Mapping[str, str]) -> Compiler:
    cc = req.cc or environ.get("CC") or "gcc"
    cxx = req.cxx or environ.get("CXX") or "g++"
    path = environ.get("PATH")
    cc_path, cxx_path = shutil.which(cc, path=path), shutil.which(cxx, path=path)
    if cc_path is None or cxx_path is None:
        missing = cc if cc_path is None else cxx
        raise ToolkitError(f"no {missing} on this host; install gcc/g++ or give --cc/--cxx")
    proc = subprocess.run(
        [cxx_path, "-dumpfullversion", "-dumpversion"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    version = proc.stdout.strip()
    try:
        ok = spec is None or Version(version) in SpecifierSet(spec)
    except (InvalidVersion, InvalidSpecifier):
        ok = False
    if not ok:
        raise ToolkitError(
            f"{cxx_path} is gcc {version or '(unknown)'}, the profile's nvcc wants gcc {spec}; "
            "give --cc/--cxx of a gcc in that range"
        )
    return Compiler(cc_path, cxx_path, version)


def find_host_python(version: str, req: ToolkitRequest) -> HostPython:
    """The target Python's interpreter here, with its headers (Python.h)."""
    path = req.host_python or find_python(version)
    if path is None:
        raise ToolkitError(
            f"no Python {version} on this host for the target's headers; install it "
            f"(pyenv install {version}) or give --host-python PATH"
        )
    got = python_version(path)
    if got != version:
        raise ToolkitError(
            f"--host-python {path} is Python {got}, the target is {version}; give a {version}"
        )
    proc = subprocess.run(
        [path, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    include = proc.stdout.strip()
    if not include or not os.path.isfile(os.path.join(include, "Python.h")):
        raise ToolkitError(
            f"{path} has no Python.h (looked in {include or 'its include path'}); install "
            f"python{version}-dev (or python3-devel) or give --host-python"
        )
    return HostPython(path, version, include)


def find_toolkit(
    cuda: str,
    gcc: str | None,
    python: str,
    req: ToolkitRequest,
    environ: Mapping[str, str] | None = None,
) -> Toolkit:
    """Everything a host compile needs for a profile of CUDA `cuda`, gcc range `gcc` and
    target Python `python` ("3.10"), or ToolkitError saying what is missing."""
    env = os.environ if environ is None else environ
    return Toolkit(
        find_nvcc(cuda, req, env), find_compiler(gcc, req, env), find_host_python(python, req)
    )
