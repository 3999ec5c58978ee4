"""The doctor: check this server against a bundle's needs before anything is installed.

It runs on the server's own python3 (3.8 or newer, standard library only). Each check ends
ok, warn or fail, with what it found and a concrete fix. Every external command runs with a
timeout, so a hung driver cannot hang the doctor: a timeout is a finding, not a crash.

`run_doctor` takes the bundle's needs as a plain dict (the manifest, or what the online host
builds from a profile) and returns a `Report`; `render_text` and `render_json` present it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Tuple

from verl_bundle.airgap.layout import MANIFEST, find_root, read_manifest

TIMEOUT = 10.0  # seconds any one external command may take
VENV_TIMEOUT = 20.0  # creating a venv writes a few hundred files
DISK_MARGIN = 1.2  # free space wanted on top of the installed size
BUSY_MIB = 1024  # memory in use on a GPU that no listed process explains
GIB = 1 << 30
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
MEMINFO = "/proc/meminfo"
LDCONFIG = ("/sbin/ldconfig", "/usr/sbin/ldconfig")
DEFAULT_CUDA = "/usr/local/cuda"
GPU_QUERY = "--query-gpu=index,uuid,memory.total,memory.used,driver_version,name"
APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
CSV = "--format=csv,noheader,nounits"
TORCHRUN_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
STATUSES = ("ok", "warn", "fail")
LABELS = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}

# Run by the interpreter the venv will be made from. triton swaps Debian's default sysconfig
# scheme (posix_local, whose paths point under /usr/local) for posix_prefix before it looks for
# Python.h, so the doctor looks where triton will.
PYTHON_PROBE = """
import json, sys, sysconfig
get = getattr(sysconfig, "get_default_scheme", None) or getattr(sysconfig, "_get_default_scheme")
scheme = get()
if scheme == "posix_local":
    scheme = "posix_prefix"
print(json.dumps({
    "version": ".".join(str(p) for p in sys.version_info[:3]),
    "implementation": sys.implementation.name,
    "include": sysconfig.get_paths(scheme=scheme)["include"],
    "executable": sys.executable,
}))
"""

# Run in a child process: a broken or hung driver can crash or block whoever loads it.
DRIVER_PROBE = """
import ctypes, json
out = {}
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    out["error"] = str(exc)
else:
    out["init"] = lib.cuInit(0)
    version = ctypes.c_int(0)
    out["rc"] = lib.cuDriverGetVersion(ctypes.byref(version))
    out["version"] = version.value
    try:
        with open("/proc/self/maps") as fh:
            out["path"] = [l.split()[-1] for l in fh if "libcuda.so" in l][0]
    except (OSError, IndexError):
        pass
print(json.dumps(out))
"""

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

CUDA_ERRORS = {
    3: "CUDA_ERROR_NOT_INITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One finding: `status` is "ok", "warn" or "fail"; `fix` is empty when there is none."""

    id: str
    status: str
    summary: str
    detail: str = ""
    fix: str = ""


@dataclass(frozen=True)
class Report:
    checks: list[Check]
    host: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No check failed (warnings do not stop an install)."""
        return all(c.status != "fail" for c in self.checks)

    def check(self, check_id: str) -> Check:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)


# -- versions: a tiny PEP 440-like reader, so that the server needs no `packaging` -------------

Version = Tuple[int, ...]


def parse_version(text: str) -> Version | None:
    """The dotted number at the start of `text` ("12.2.0", "11.8", "520.61.05"), or None."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _compare(a: Version, b: Version) -> int:
    n = max(len(a), len(b))
    a2, b2 = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a2 > b2) - (a2 < b2)


def version_matches(version: str, spec: str) -> bool:
    """Whether `version` satisfies `spec`: clauses of >=, <=, <, >, ==, != (and ==X.*), joined
    by commas, as in ">=6,<12". Raises ValueError on anything else."""
    v = parse_version(version)
    if v is None:
        raise ValueError(f"not a version: {version!r}")
    for clause in spec.split(","):
        clause = clause.strip()
        if not clause:
            continue
        m = re.fullmatch(r"(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)(\.\*)?", clause)
        if not m:
            raise ValueError(f"cannot read version specifier {clause!r} in {spec!r}")
        op, text, star = m.groups()
        want = tuple(int(p) for p in text.split("."))
        if star:
            if op not in ("==", "!="):
                raise ValueError(f"{op} cannot take a wildcard: {clause!r}")
            same = (v + (0,) * len(want))[: len(want)] == want
            good = same if op == "==" else not same
        else:
            c = _compare(v, want)
            good = {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "==": c == 0, "!=": c != 0}[
                op
            ]
        if not good:
            return False
    return True


def _highest_major(spec: str) -> int | None:
    """The newest major version (e.g. of gcc) that `spec` accepts."""
    for major in range(30, 3, -1):
        with contextlib.suppress(ValueError):
            if version_matches(str(major), spec):
                return major
    return None


def _short(version: str | None) -> str | None:
    v = parse_version(version or "")
    return ".".join(str(p) for p in v[:2]) if v else None


# -- what the bundle needs ---------------------------------------------------------------------


@dataclass(frozen=True)
class SourceBuild:
    package: str
    gib_per_job: float
    limit: int | None
    needs_cuda: bool


@dataclass(frozen=True)
class Needs:
    """The subset of a manifest (or of a profile) the doctor reads."""

    python: str | None
    arch: str | None
    glibc: str | None
    cuda: str | None
    nvcc: str | None
    gcc: str | None
    driver: str | None
    driver_compat: str | None
    builds: tuple[SourceBuild, ...]
    installed_size: int

    @property
    def cuda_build(self) -> bool:
        return any(b.needs_cuda for b in self.builds)

    @property
    def toolkit(self) -> str | None:
        return self.nvcc or self.cuda

    def build_names(self) -> str:
        return ", ".join(b.package for b in self.builds if b.needs_cuda) or "none"


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"needs: {key!r} is not a table")
    return value


def _opt_str(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None or isinstance(value, str):
        return value or None
    raise ValueError(f"needs: {where}.{key} must be a string, not {value!r}")


def read_needs(needs: Mapping[str, Any]) -> Needs:
    """The doctor's view of a manifest or of the dict the online host builds from a profile."""
    target, toolchain = _table(needs, "target"), _table(needs, "toolchain")
    arch = _opt_str(target, "arch", "target")
    plat = _opt_str(target, "platform", "target")
    if arch is None and plat:
        m = re.search(r"(x86_64|aarch64|ppc64le|s390x)$", plat)
        arch = m.group(1) if m else None
    builds: list[SourceBuild] = []
    phases = needs.get("phases") or []
    if not isinstance(phases, list):
        raise ValueError("needs: 'phases' is not a list")
    for phase in phases:
        for b in (phase.get("source_builds") or []) if isinstance(phase, Mapping) else []:
            if not isinstance(b, Mapping):
                raise ValueError(f"needs: a source build is not a table: {b!r}")
            jobs = b.get("max_jobs") or {}
            try:
                limit = jobs.get("limit")
                build = SourceBuild(
                    package=str(b.get("package", "?")),
                    gib_per_job=float(jobs.get("gib_per_job") or 9.0),
                    limit=int(limit) if limit else None,
                    needs_cuda=bool(b.get("needs_cuda", True)),
                )
            except (AttributeError, TypeError, ValueError) as exc:
                raise ValueError(f"needs: cannot read source build {b!r}: {exc}") from exc
            builds.append(build)
    size = needs.get("installed_size") or 0
    if not isinstance(size, int) or isinstance(size, bool):
        raise ValueError(f"needs: installed_size must be a number of bytes, not {size!r}")
    return Needs(
        python=_opt_str(target, "python", "target"),
        arch=arch,
        glibc=_opt_str(target, "glibc", "target"),
        cuda=_opt_str(target, "cuda", "target"),
        nvcc=_opt_str(toolchain, "nvcc", "toolchain"),
        gcc=_opt_str(toolchain, "gcc", "toolchain"),
        driver=_opt_str(toolchain, "driver", "toolchain"),
        driver_compat=_opt_str(toolchain, "driver_compat", "toolchain"),
        builds=tuple(builds),
        installed_size=size,
    )


# -- running things ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What one external command did; `problem` says why it did not run to completion."""

    argv: tuple[str, ...]
    returncode: int | None = None
    out: str = ""
    err: str = ""
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and self.returncode == 0

    def why(self) -> str:
        if self.problem:
            return self.problem
        last = (self.err.strip() or self.out.strip()).splitlines()
        return f"exited with status {self.returncode}" + (f": {last[-1]}" if last else "")


def run(argv: Sequence[str], timeout: float = TIMEOUT) -> Run:
    """Run a command with a deadline; its whole process group is killed when it runs over."""
    env = dict(os.environ, LC_ALL="C")
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        return Run(tuple(argv), problem="not found")
    except OSError as exc:
        return Run(tuple(argv), problem=f"cannot run: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        # A process stuck inside the kernel (a hung driver) cannot be reaped: leave it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        return Run(tuple(argv), problem=f"did not answer within {timeout:g} s")
    return Run(
        tuple(argv),
        proc.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )


def _probe(code: str, *args: str, python: str | None = None) -> tuple[dict[str, Any] | None, Run]:
    r = run([python or sys.executable, "-I", "-c", code, *args])
    if not r.ok:
        return None, r
    lines = r.out.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return None, Run(r.argv, r.returncode, r.out, r.err, "answered something that is not JSON")
    return data, r


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


# -- the distribution: which package command to suggest ----------------------------------------


@dataclass(frozen=True)
class Distro:
    name: str
    family: str  # "apt", "dnf", "yum" or "" when unknown

    def install(self, apt: str, dnf: str) -> str:
        if self.family == "apt":
            return f"apt-get install -y {apt}"
        if self.family in ("dnf", "yum"):
            return f"{self.family} install -y {dnf}"
        return f"install {apt} (Debian/Ubuntu) or {dnf} (RHEL/Fedora) with the package manager"


def read_distro() -> Distro:
    fields: dict[str, str] = {}
    for name in OS_RELEASE:
        try:
            text = Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip().strip("\"'")
        break
    ids = {fields.get("ID", "")} | set(fields.get("ID_LIKE", "").split())
    family = ""
    if ids & {"debian", "ubuntu"}:
        family = "apt"
    elif ids & {"rhel", "centos", "fedora", "rocky", "almalinux", "alma", "ol", "amzn"}:
        family = "yum" if shutil.which("yum") and not shutil.which("dnf") else "dnf"
    return Distro(fields.get("PRETTY_NAME") or platform.system(), family)


# -- 1. operating system, architecture, glibc --------------------------------------------------


def glibc_version() -> str | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        text = ""
    if text.startswith("glibc "):
        return text.split()[1]
    lib, version = platform.libc_ver()
    return version if lib == "glibc" and version else None


def _norm_arch(arch: str) -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch.lower(), arch.lower())


def check_os(n: Needs, distro: Distro) -> Check:
    system, arch, glibc = platform.system(), _norm_arch(platform.machine()), glibc_version()
    found = f"{system} {arch} ({distro.name}), glibc {glibc or 'not found'}"
    if system != "Linux":
        return Check(
            "os", "fail", f"{found}: this bundle is for Linux", "", "run it on a Linux server"
        )
    if n.arch and _norm_arch(n.arch) != arch:
        return Check(
            "os",
            "fail",
            f"{found}: this bundle is for {n.arch}",
            f"its wheels are built for {n.arch} and cannot run on {arch}",
            f"build a bundle for this server's platform (verl-bundle build --platform ..._{arch})",
        )
    if n.glibc:
        if glibc is None:
            return Check(
                "os",
                "fail",
                f"{found}: the bundle's manylinux wheels need glibc >= {n.glibc}",
                "no GNU C library was found (musl-based systems such as Alpine cannot load them)",
                "use a glibc-based distribution (Debian, Ubuntu, RHEL and its rebuilds)",
            )
        if _compare(parse_version(glibc) or (0,), parse_version(n.glibc) or (0,)) < 0:
            return Check(
                "os",
                "fail",
                f"glibc {glibc} is older than the {n.glibc} the bundle's wheels need",
                f"{found}; a manylinux_{n.glibc.replace('.', '_')} wheel will not load here",
                "build the bundle for this glibc (verl-bundle build --platform "
                f"manylinux_{glibc.replace('.', '_')}_{arch}) or upgrade the operating system",
            )
    need = f" >= {n.glibc}" if n.glibc else ""
    return Check("os", "ok", f"{system} {arch} ({distro.name}), glibc {glibc}{need}")


# -- 2, 3. the interpreter, venv, Python headers -----------------------------------------------


@dataclass(frozen=True)
class Interpreter:
    path: str
    run: Run
    version: str | None = None
    include: str | None = None

    @property
    def short(self) -> str | None:
        return _short(self.version)


def probe_python(path: str) -> Interpreter:
    data, r = _probe(PYTHON_PROBE, python=path)
    if data is None:
        return Interpreter(path, r)
    return Interpreter(path, r, str(data.get("version") or "") or None, data.get("include"))


def _venv_works(path: str) -> tuple[bool, str]:
    try:
        with tempfile.TemporaryDirectory(prefix="verl-doctor-") as tmp:
            target = Path(tmp) / "venv"
            r = run([path, "-I", "-m", "venv", "--without-pip", str(target)], VENV_TIMEOUT)
            if r.ok and (target / "bin" / "python").exists():
                return True, ""
            return False, r.why() if not r.ok else "it made no bin/python"
    except OSError as exc:
        return False, f"could not try it in a temporary directory: {exc}"


def check_python(n: Needs, py: Interpreter, distro: Distro) -> Check:
    want = n.python
    pkg = f"python{want}" if want else "python3"
    if py.version is None:
        return Check(
            "python",
            "fail",
            f"{py.path} did not answer as a Python interpreter ({py.run.why()})",
            "",
            f"pass --python with the path of a Python {want or '3'} interpreter",
        )
    if want and py.short != want:
        other = shutil.which(f"python{want}")
        return Check(
            "python",
            "fail",
            f"{py.path} is Python {py.version}; this bundle's wheels are for Python {want}",
            "wheels tagged for one Python minor version do not install on another",
            f"pass --python {other}"
            if other
            else distro.install(f"{pkg} {pkg}-venv {pkg}-dev", f"{pkg} {pkg}-devel")
            + f", then pass --python /usr/bin/{pkg}",
        )
    works, why = _venv_works(py.path)
    if not works:
        return Check(
            "python",
            "fail",
            f"Python {py.version} at {py.path} cannot create a venv",
            f"`{py.path} -m venv --without-pip` failed: {why}. Debian and Ubuntu ship venv "
            f"separately, as {pkg}-venv.",
            distro.install(f"{pkg}-venv", pkg),
        )
    return Check(
        "python",
        "ok",
        f"Python {py.version} at {py.path}; venv works; pip comes from the bundle",
    )


def check_headers(n: Needs, py: Interpreter, distro: Distro) -> Check:
    pkg = f"python{py.short or n.python or '3'}"
    if py.include is None:
        return Check("headers", "warn", f"not checked: {py.path} did not answer (see python)")
    header = Path(py.include) / "Python.h"
    if header.is_file():
        return Check("headers", "ok", f"{header}")
    return Check(
        "headers",
        "fail",
        f"no Python.h in {py.include}",
        "triton compiles small launchers at run time and every source build compiles against "
        "the Python headers, so they are needed even when every package is a wheel.",
        distro.install(f"{pkg}-dev", "python3-devel (python3.X-devel for a non-default Python)")
        + " (for a Python built from source, reinstall it with its headers)",
    )


# -- 4, 5. compilers and ninja -----------------------------------------------------------------


def _first_version(text: str) -> str | None:
    m = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", text)
    return m.group(1) if m else None


def compiler_version(cmd: Sequence[str]) -> tuple[str | None, Run]:
    """gcc's full version: -dumpfullversion (gcc >= 7), else -dumpversion (older gcc)."""
    r = Run(tuple(cmd))
    for flag in ("-dumpfullversion", "-dumpversion"):
        r = run([*cmd, flag])
        if r.problem:
            return None, r
        text = _last_line(r.out)
        if r.ok and re.fullmatch(r"\d+(\.\d+)*", text):
            return text, r
    return None, r


def check_gcc(n: Needs, distro: Distro) -> Check:
    """gcc and g++ (or $CC and $CXX, which torch prefers) against the range nvcc accepts."""
    compilers = (
        ("C", shlex.split(os.environ.get("CC") or "gcc") or ["gcc"]),
        ("C++", shlex.split(os.environ.get("CXX") or "g++") or ["g++"]),
    )
    found: list[str] = []
    outside: list[str] = []
    problems: list[tuple[str, str, str]] = []  # status, short, long
    for role, cmd in compilers:
        if shutil.which(cmd[0]) is None:
            if role == "C":
                why = "triton compiles its launchers with it at run time"
            else:
                why = "source builds compile C++" if n.builds else "no source build needs it"
            status = "fail" if role == "C" or n.builds else "warn"
            problems.append((status, f"{cmd[0]} not found", f"no {role} compiler: {why}"))
            continue
        version, r = compiler_version(cmd)
        if version is None:
            problems.append(("fail", f"{cmd[0]} does not run", f"{' '.join(cmd)}: {r.why()}"))
            continue
        found.append(f"{cmd[0]} {version}")
        if not n.gcc:
            continue
        try:
            if not version_matches(version, n.gcc):
                outside.append(f"{cmd[0]} {version}")
        except ValueError as exc:
            problems.append(("warn", "the bundle's gcc range is not understood", str(exc)))
    if outside:
        where = (
            f"the bundle compiles {n.build_names()} with nvcc, which stops with "
            "'unsupported GNU version'"
            if n.cuda_build
            else "no CUDA source build in this bundle, so this only matters for CUDA "
            "extensions compiled here later"
        )
        problems.append(
            (
                "fail" if n.cuda_build else "warn",
                f"{' and '.join(outside)} outside {n.gcc}",
                f"CUDA {n.toolkit or '?'}'s nvcc accepts gcc {n.gcc}; {where}",
            )
        )
    if not problems:
        accepts = f" (nvcc accepts {n.gcc})" if n.gcc else ""
        return Check("gcc", "ok", ", ".join(found) + accepts)
    status = "fail" if any(p[0] == "fail" for p in problems) else "warn"
    fix = distro.install("gcc g++", "gcc gcc-c++")
    top = _highest_major(n.gcc) if n.gcc else None
    if outside and top:
        fix = (
            distro.install(f"gcc-{top} g++-{top}", f"gcc-toolset-{top}")
            + f", then export CC=gcc-{top} CXX=g++-{top} (torch hands CC to nvcc as -ccbin)"
        )
        if distro.family in ("dnf", "yum"):
            fix += f"; with gcc-toolset: source /opt/rh/gcc-toolset-{top}/enable"
    return Check(
        "gcc",
        status,
        "; ".join(p[1] for p in problems),
        "\n".join([p[2] for p in problems] + ([f"found: {', '.join(found)}"] if found else [])),
        fix,
    )


def check_ninja(n: Needs, distro: Distro) -> Check:
    ninja = shutil.which("ninja")
    if ninja is None:
        if not n.builds:
            return Check("ninja", "ok", "not needed: no source build in this bundle")
        return Check(
            "ninja",
            "fail",
            f"ninja not found; the bundle builds {', '.join(b.package for b in n.builds)}",
            "torch's extension builder needs ninja on PATH; without it the build falls back to "
            "a serial build that can take hours, or fails",
            distro.install("ninja-build", "ninja-build (from EPEL on RHEL)"),
        )
    r = run([ninja, "--version"])
    if not r.ok:
        status = "fail" if n.builds else "warn"
        return Check("ninja", status, f"{ninja} does not run: {r.why()}", "", "reinstall ninja")
    return Check("ninja", "ok", f"ninja {_last_line(r.out)} at {ninja}")


# -- 6, 7. the CUDA toolkit: nvcc, CUDA_HOME, libraries ----------------------------------------


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


def _is_toolkit(path: Path) -> bool:
    return (path / "bin" / "nvcc").is_file() and (path / "include" / "cuda_runtime.h").is_file()


def _nvcc_root(nvcc: str) -> str:
    """The toolkit an nvcc really runs: nvcc -dryrun names it even through a wrapper script."""
    r = run([nvcc, "-dryrun", "-E", "-x", "cu", os.devnull])
    m = re.search(r"^#\$ _HERE_=(.+)$", r.out + "\n" + r.err, re.M)
    if m:
        return str(Path(m.group(1).strip()).parent)
    return str(Path(nvcc).resolve().parent.parent)


def find_toolkit() -> Toolkit:
    env_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    source = "CUDA_HOME" if os.environ.get("CUDA_HOME") else "CUDA_PATH"
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
        str(Path(v) / "bin" / "nvcc")
        for v in (os.environ.get(k) for k in ("CUDA_HOME", "CUDA_PATH"))
        if v
    ]
    candidates.append(str(Path(DEFAULT_CUDA) / "bin" / "nvcc"))
    nvcc = next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)
    if nvcc is None:
        return Toolkit(home, source, None, None, None, None, path_nvcc, None)
    r = run([nvcc, "--version"])
    m = re.search(r"release (\d+\.\d+)", r.out)
    root = _nvcc_root(nvcc)
    path_root = root if path_nvcc in (None, nvcc) else _nvcc_root(path_nvcc)
    return Toolkit(home, source, nvcc, r, m.group(1) if m else None, root, path_nvcc, path_root)


def _toolkit_fix(need: str | None, distro: Distro) -> str:
    if not need:
        return "install the CUDA toolkit and export CUDA_HOME"
    pkg = "cuda-toolkit-" + need.replace(".", "-")
    return (
        distro.install(pkg, pkg) + f" (from NVIDIA's CUDA repository, or its runfile), then export "
        f"CUDA_HOME=/usr/local/cuda-{need} PATH=/usr/local/cuda-{need}/bin:$PATH"
    )


def check_nvcc(n: Needs, tk: Toolkit, distro: Distro) -> Check:
    need = n.toolkit
    sev = "fail" if n.cuda_build else "warn"
    why = (
        f"The bundle compiles {n.build_names()} from source, which needs the CUDA {need} toolkit."
        if n.cuda_build
        else "No CUDA source build in this bundle: its wheels carry their CUDA runtime, so nvcc "
        "only matters for compiling CUDA extensions later."
    )
    if tk.nvcc is None:
        status = sev if need else "ok"
        return Check(
            "nvcc",
            status,
            "no nvcc found" + (f"; the bundle's CUDA is {need}" if need else ""),
            f"Searched PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, {DEFAULT_CUDA}/bin. {why}",
            _toolkit_fix(need, distro) if need else "",
        )
    if tk.version is None:
        return Check(
            "nvcc",
            sev if need else "warn",
            f"{tk.nvcc} did not report its release ({tk.run.why() if tk.run else '?'})",
            why,
            _toolkit_fix(need, distro),
        )
    if not need:
        return Check("nvcc", "ok", f"nvcc {tk.version} at {tk.nvcc}; the bundle needs no CUDA")
    found, want = parse_version(tk.version) or (0,), parse_version(need) or (0,)
    if found[0] != want[0]:
        return Check(
            "nvcc",
            sev,
            f"nvcc {tk.version} at {tk.nvcc}, but the bundle's CUDA is {need}",
            f"torch refuses to build an extension with a CUDA major version other than its own. "
            f"{why}",
            _toolkit_fix(need, distro),
        )
    if found[:2] != want[:2]:
        return Check(
            "nvcc",
            "warn",
            f"nvcc {tk.version} at {tk.nvcc}; the bundle's CUDA is {need} (same major version)",
            "torch builds with a different minor version, with a warning",
            _toolkit_fix(need, distro) if n.cuda_build else "",
        )
    return Check("nvcc", "ok", f"nvcc {tk.version} at {tk.nvcc}")


def _suggest_home(need: str | None, tk: Toolkit) -> tuple[str | None, bool]:
    """The toolkit to point CUDA_HOME at, and whether it is of the bundle's CUDA version."""
    if need and _is_toolkit(Path(f"/usr/local/cuda-{need}")):
        return f"/usr/local/cuda-{need}", True
    root = tk.path_root or tk.root
    return root, bool(need and tk.version == need and root == tk.root)


def check_cuda_home(n: Needs, tk: Toolkit) -> Check:
    need = n.toolkit
    sev = "fail" if n.cuda_build else "warn"
    if tk.home is None:
        return Check(
            "cuda-home",
            "warn" if need else "ok",
            "no CUDA toolkit for torch to find (see nvcc)",
        )
    home = Path(tk.home)
    suggest, right = _suggest_home(need, tk)
    fix = ""
    if suggest:
        fix = f"export CUDA_HOME={suggest}"
        if not right and need:
            fix += (
                f" (the toolkit found here); for this bundle a CUDA {need} toolkit is the right "
                f"one, e.g. /usr/local/cuda-{need}"
            )
    why = "torch's extension builder takes nvcc, headers and libraries from CUDA_HOME"
    if tk.home_source in ("CUDA_HOME", "CUDA_PATH") and not home.is_dir():
        return Check(
            "cuda-home",
            sev,
            f"{tk.home_source}={home} does not exist",
            why,
            fix or f"unset {tk.home_source}",
        )
    if not _is_toolkit(home):
        lacks = [p for p in ("bin/nvcc", "include/cuda_runtime.h") if not (home / p).is_file()]
        through = ""
        if tk.nvcc and tk.root and Path(tk.root).resolve() != home.resolve():
            through = f"; {tk.nvcc} runs the nvcc of {tk.root}"
        return Check(
            "cuda-home",
            sev,
            f"torch would take CUDA_HOME={home} (from {tk.home_source}), which is not a CUDA "
            f"toolkit",
            f"it has no {' or '.join(lacks)}{through}. {why}.",
            fix,
        )
    if tk.path_nvcc and tk.path_root and Path(tk.path_root).resolve() != home.resolve():
        return Check(
            "cuda-home",
            "warn",
            f"CUDA_HOME={home}, but the nvcc on PATH ({tk.path_nvcc}) is from {tk.path_root}",
            f"{why}, while tools run the nvcc on PATH: the two disagree",
            f"export PATH={home}/bin:$PATH",
        )
    return Check("cuda-home", "ok", f"torch would take CUDA_HOME={home} (from {tk.home_source})")


def read_ldconfig() -> Run:
    exe = shutil.which("ldconfig") or next((p for p in LDCONFIG if Path(p).is_file()), "ldconfig")
    return run([exe, "-p"])


def _lib_dirs(root: Path) -> list[Path]:
    dirs = [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib"))]
    seen: dict[Path, Path] = {}
    for d in dirs:
        if d.is_dir():
            seen.setdefault(d.resolve(), d)
    return list(seen.values())


def check_cuda_libs(n: Needs, tk: Toolkit, ldcache: Run) -> Check:
    need = n.toolkit
    sev = "fail" if n.cuda_build else "warn"
    home = Path(tk.home) if tk.home else None
    root = home if home and _is_toolkit(home) else (Path(tk.root) if tk.root else None)
    if root is None:
        return Check(
            "cuda-libs",
            "warn" if need else "ok",
            "no CUDA toolkit to check (see nvcc)",
        )
    dirs = _lib_dirs(root)
    names = sorted(
        {
            p.name
            for d in dirs
            for p in d.glob("libcudart.so*")
            if re.fullmatch(r"libcudart\.so(\.\d+)*", p.name)
        },
        key=len,
    )
    if not dirs or not names:
        return Check(
            "cuda-libs",
            sev,
            f"the toolkit at {root} has no libcudart",
            "a CUDA extension built here links against it",
            "reinstall the CUDA toolkit",
        )
    loader = {
        Path(p).resolve() for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p
    }
    if ldcache.ok:
        for line in ldcache.out.splitlines():
            if "=>" in line:
                loader.add(Path(line.split("=>", 1)[1].strip()).parent.resolve())
    on_path = [d for d in dirs if d.resolve() in loader]
    # The most specific soname (libcudart.so.11.0) is what a built extension asks the loader for.
    versioned = [x for x in names if x != "libcudart.so"]
    soname = min(versioned, key=len) if versioned else "libcudart.so"
    data, r = _probe(CUDART_PROBE, soname)
    loaded = [lib for lib in (data or {}).get("libs", []) if "error" not in lib]
    paths = ", ".join((data or {}).get("paths", [])) or "?"
    fix = (
        f"echo {dirs[0]} > /etc/ld.so.conf.d/cuda.conf && ldconfig "
        f"(or export LD_LIBRARY_PATH={dirs[0]}:$LD_LIBRARY_PATH)"
    )
    if data is None:
        return Check("cuda-libs", sev, f"could not try to load {soname}: {r.why()}", "", fix)
    if not loaded:
        return Check(
            "cuda-libs",
            sev,
            f"{soname} does not load: {', '.join(str(d) for d in dirs)} is not on the loader path",
            "the torch wheels carry their own CUDA runtime, but an extension compiled here "
            f"needs {soname} from the toolkit at run time"
            + (f" (the bundle compiles {n.build_names()})" if n.cuda_build else ""),
            fix,
        )
    version = loaded[0].get("version")
    found = f"{soname} loads ({paths})"
    if isinstance(version, int) and version and need:
        have = f"{version // 1000}.{version % 1000 // 10}"
        found += f", CUDA runtime {have}"
        if (parse_version(have) or (0,))[0] != (parse_version(need) or (0,))[0]:
            return Check(
                "cuda-libs",
                "warn",
                f"{found}, but the bundle's CUDA is {need}",
                "the loader path holds another CUDA major version than the bundle's",
                "",
            )
    if not on_path:
        return Check(
            "cuda-libs",
            "warn",
            f"{found}, but {dirs[0]} is neither on LD_LIBRARY_PATH nor in the ldconfig cache",
            "",
            fix,
        )
    return Check("cuda-libs", "ok", found)


# -- 8, 9. driver, GPUs, placement -------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    memory_total: int | None  # MiB
    memory_used: int | None
    driver: str
    name: str


@dataclass(frozen=True)
class App:
    gpu_uuid: str
    pid: str
    name: str
    used_memory: int | None  # MiB


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_gpus(text: str) -> list[Gpu]:
    """Rows of `nvidia-smi GPU_QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", 5)]
        if len(parts) == 6 and parts[0].isdigit():
            gpus.append(
                Gpu(int(parts[0]), parts[1], _int(parts[2]), _int(parts[3]), parts[4], parts[5])
            )
    return gpus


def parse_apps(text: str) -> list[App]:
    """Rows of `nvidia-smi APPS_QUERY --format=csv,noheader,nounits`."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0]:
            apps.append(App(parts[0], parts[1], ",".join(parts[2:-1]), _int(parts[-1])))
    return apps


@dataclass(frozen=True)
class GpuListing:
    gpus: tuple[Gpu, ...] = ()
    apps: tuple[App, ...] = ()
    problem: str = ""  # why there is no listing


def list_gpus() -> GpuListing:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuListing(problem="nvidia-smi not found")
    r = run([smi, GPU_QUERY, CSV])
    if not r.ok:
        why = r.problem or _last_line(r.out) or r.why()
        return GpuListing(problem=f"nvidia-smi {why}" if r.problem else f"nvidia-smi: {why}")
    gpus = parse_gpus(r.out)
    if not gpus:
        return GpuListing(problem=f"nvidia-smi lists no GPU ({_last_line(r.out) or 'no output'})")
    apps = run([smi, APPS_QUERY, CSV])
    return GpuListing(tuple(gpus), tuple(parse_apps(apps.out)) if apps.ok else ())


def _cuda_name(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


@dataclass(frozen=True)
class DriverProbe:
    """What loading libcuda.so.1 in a child process told: `data` is None when it did not
    answer (see `run`)."""

    data: dict[str, Any] | None
    run: Run


def probe_driver() -> DriverProbe:
    data, r = _probe(DRIVER_PROBE)
    return DriverProbe(data, r)


def check_driver(n: Needs, probe: DriverProbe, listing: GpuListing, require_gpu: bool) -> Check:
    """libcuda.so.1's CUDA version (cuDriverGetVersion) and nvidia-smi's driver version."""
    sev = "fail" if require_gpu else "warn"
    found: list[str] = []
    problems: list[tuple[str, str, str]] = []  # status, short, long
    data, r = probe.data, probe.run
    need = parse_version(n.cuda or "")
    if data is None:
        short = f"loading libcuda.so.1 {r.why()}"
        problems.append((sev, short, f"{short} (a hung or broken driver?)"))
    elif "error" in data:
        problems.append(
            (sev, "libcuda.so.1 not found", f"libcuda.so.1 does not load: {data['error']}")
        )
    else:
        version = int(data.get("version") or 0)
        found.append(f"libcuda supports CUDA {_cuda_name(version)}")
        init = int(data.get("init") or 0)
        if init:
            short = f"cuInit failed with {init} ({CUDA_ERRORS.get(init, 'error')})"
            problems.append((sev, short, short))
        if need and version < need[0] * 1000 + (need[1] if len(need) > 1 else 0) * 10:
            short = (
                f"the driver supports CUDA {_cuda_name(version)}, older than the bundle's {n.cuda}"
            )
            compat = ""
            if version // 1000 == need[0]:
                compat = (
                    "; within one major version CUDA minor-version compatibility may still run "
                    "the wheels, without newer features and without JIT of newer PTX"
                )
            problems.append((sev, short, short + compat))
    if listing.problem:
        problems.append((sev, listing.problem, listing.problem))
    elif listing.gpus:
        driver = listing.gpus[0].driver
        found.insert(0, f"driver {driver}")
        have = parse_version(driver) or (0,)
        if n.driver_compat and _compare(have, parse_version(n.driver_compat) or (0,)) < 0:
            short = f"driver {driver} is older than {n.driver_compat}"
            problems.append(
                (sev, short, f"{short}, the oldest driver for any CUDA {n.cuda} runtime")
            )
        elif n.driver and _compare(have, parse_version(n.driver) or (0,)) < 0:
            short = (
                f"driver {driver} is older than {n.driver}: CUDA {n.cuda} runs in minor-version "
                "compatibility mode"
            )
            problems.append(
                (
                    "warn",
                    short,
                    f"driver {driver} is older than {n.driver} (CUDA {n.cuda}'s full toolkit) but "
                    f"not than {n.driver_compat}: CUDA {n.cuda} wheels run in minor-version "
                    "compatibility mode, where PTX newer than the driver cannot be JIT-compiled",
                )
            )
    wanted = f"bundle: CUDA {n.cuda}" + (f", driver >= {n.driver}" if n.driver else "")
    if not problems:
        return Check("driver", "ok", f"{', '.join(found)} ({wanted})")
    status = "fail" if any(p[0] == "fail" for p in problems) else "warn"
    summary = "; ".join(p[1] for p in problems)
    want = n.driver or n.driver_compat
    fix = (
        f"upgrade the NVIDIA driver to >= {want} (NVIDIA's cuda-drivers package or the "
        "distribution's driver packages) and reboot"
        if want
        else "reinstall the NVIDIA driver and reboot"
    )
    if data is not None and "error" in data and listing.problem == "nvidia-smi not found":
        summary = "no NVIDIA driver: neither libcuda.so.1 nor nvidia-smi is here"
        fix = (
            fix.replace("upgrade", "install", 1)
            + "; on a staging machine without GPUs this warning is expected (--require-gpu "
            "makes it a failure)"
        )
    return Check(
        "driver",
        status,
        summary,
        "\n".join([p[2] for p in problems] + ([f"found: {', '.join(found)}"] if found else []))
        + f"\n{wanted}",
        fix,
    )


def visible_devices(value: str | None, gpus: Sequence[Gpu]) -> tuple[list[Gpu], list[str]]:
    """The GPUs CUDA_VISIBLE_DEVICES=`value` selects, in CUDA's order, and what is wrong with it.
    With no GPU list (`gpus` empty) only its form is checked."""
    if value is None:
        return list(gpus), []
    if not value.strip():
        return [], ["CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible"]
    chosen: list[Gpu] = []
    problems: list[str] = []
    seen: set[str] = set()
    for token in (t.strip() for t in value.split(",")):
        if re.fullmatch(r"\d+", token):
            index = int(token)
            key = f"#{index}"
            match = [g for g in gpus if g.index == index]
            if gpus and not match:
                problems.append(
                    f"GPU {index} does not exist: this server has {len(gpus)} (0-{len(gpus) - 1})"
                )
        elif re.fullmatch(r"GPU-[0-9A-Fa-f-]+", token):
            key = token.lower()
            match = [g for g in gpus if g.uuid.lower().startswith(token.lower())]
            if gpus and not match:
                problems.append(f"no GPU has UUID {token}")
            elif len(match) > 1:
                problems.append(f"{token} names several GPUs: give more of the UUID")
                match = []
        elif token.startswith("MIG-"):
            key, match = token, []
        else:
            problems.append(
                f"{token!r} is neither a GPU index nor a GPU UUID (GPU-...); CUDA ignores it "
                "and every entry after it"
            )
            break
        if match:
            key = match[0].uuid.lower()
        if key in seen:
            label = f"GPU {token}" if token.isdigit() else token
            problems.append(f"{label} is listed twice")
            continue
        seen.add(key)
        chosen += match
    return chosen, problems


def torchrun_problems(env: Mapping[str, str], visible: int | None) -> list[str]:
    """Inconsistencies among the torchrun/verl variables that are set; `visible` is the number
    of GPUs this process would see (None when unknown)."""
    problems: list[str] = []
    nums: dict[str, int] = {}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        if name in env:
            text = env[name].strip()
            if not re.fullmatch(r"\d+", text):
                problems.append(f"{name}={env[name]!r} is not a whole number")
            else:
                nums[name] = int(text)
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        if nums.get(name) == 0:
            problems.append(f"{name}=0: there must be at least one process")
    rank, world = nums.get("RANK"), nums.get("WORLD_SIZE")
    local, local_world = nums.get("LOCAL_RANK"), nums.get("LOCAL_WORLD_SIZE")
    if rank is not None and world and rank >= world:
        problems.append(f"RANK={rank} is not below WORLD_SIZE={world}")
    if local is not None and local_world and local >= local_world:
        problems.append(f"LOCAL_RANK={local} is not below LOCAL_WORLD_SIZE={local_world}")
    if local_world and world and local_world > world:
        problems.append(f"LOCAL_WORLD_SIZE={local_world} is above WORLD_SIZE={world}")
    if visible is not None:
        if local is not None and local >= visible:
            problems.append(
                f"LOCAL_RANK={local}, but only {visible} GPU(s) are visible: cuda:{local} does "
                "not exist"
            )
        if local_world and local_world > visible:
            problems.append(
                f"LOCAL_WORLD_SIZE={local_world} processes, but only {visible} GPU(s) are visible"
            )
    if "MASTER_PORT" in env:
        port = env["MASTER_PORT"].strip()
        if not (port.isdigit() and 1 <= int(port) <= 65535):
            problems.append(f"MASTER_PORT={env['MASTER_PORT']!r} is not a port (1-65535)")
    if "MASTER_ADDR" in env and not env["MASTER_ADDR"].strip():
        problems.append("MASTER_ADDR is set but empty")
    return problems


def _mib(value: int | None) -> str:
    return f"{value} MiB" if value is not None else "? MiB"


def check_gpus(listing: GpuListing, require_gpu: bool) -> Check:
    sev = "fail" if require_gpu else "warn"
    if listing.problem:
        return Check(
            "gpus",
            sev,
            f"no GPU listed: {listing.problem}",
            "nothing to check on a machine without a working NVIDIA driver",
            "install the NVIDIA driver (see driver), or run this on the GPU server",
        )
    visible, _ = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), listing.gpus)
    sizes: dict[int | None, list[Gpu]] = {}
    for g in visible:
        sizes.setdefault(g.memory_total, []).append(g)
    kinds = ", ".join(
        f"{len(gs)} x {gs[0].name} ({_mib(size)})"
        for size, gs in sorted(sizes.items(), key=lambda kv: -(kv[0] or 0))
    )
    summary = f"{len(visible)} of {len(listing.gpus)} GPUs visible: {kinds or 'none'}"
    problems: list[str] = []
    busy: list[Gpu] = []
    for g in visible:
        held = [a for a in listing.apps if a.gpu_uuid.lower() == g.uuid.lower()]
        if held:
            busy.append(g)
            who = ", ".join(f"pid {a.pid} {a.name} ({_mib(a.used_memory)})" for a in held)
            problems.append(f"GPU {g.index} ({g.uuid}) is busy: {who}")
        elif (g.memory_used or 0) > BUSY_MIB:
            busy.append(g)
            problems.append(
                f"GPU {g.index} ({g.uuid}) has {_mib(g.memory_used)} in use by processes not "
                "visible here (another container?)"
            )
    fixes: list[str] = []
    if busy:
        free = [g for g in visible if g not in busy]
        fixes.append(
            "stop those processes, or leave their GPUs out: export CUDA_VISIBLE_DEVICES="
            + ",".join(str(g.index) for g in free)
        )
    if len(sizes) > 1:
        largest = max(sizes.items(), key=lambda kv: (len(kv[1]), kv[0] or 0))[1]
        problems.append(
            f"mixed memory sizes among the visible GPUs ({kinds}): verl sizes its work per GPU, "
            "so the smallest one sets the limit and out-of-memory errors come from it"
        )
        fixes.append(
            "use one kind: export CUDA_VISIBLE_DEVICES=" + ",".join(str(g.index) for g in largest)
        )
    if not visible:
        return Check("gpus", sev, summary, "no GPU is visible to CUDA (see placement)", "")
    if not problems:
        return Check("gpus", "ok", summary + "; none busy")
    return Check("gpus", "warn", summary, "\n".join(problems), "; ".join(fixes))


def check_placement(listing: GpuListing, require_gpu: bool, env: Mapping[str, str]) -> Check:
    sev = "fail" if (listing.gpus or require_gpu) else "warn"
    value = env.get("CUDA_VISIBLE_DEVICES")
    visible, problems = visible_devices(value, listing.gpus)
    count = len(visible) if listing.gpus else None
    if value is not None and not value.strip():
        count = 0
    set_vars = [k for k in TORCHRUN_VARS if k in env]
    problems += torchrun_problems(env, count)
    notes: list[str] = []
    names = {g.name for g in listing.gpus}
    if (
        value
        and re.search(r"(^|,)\s*\d", value)
        and len(names) > 1
        and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
    ):
        notes.append(
            "this server mixes GPU models and CUDA numbers them fastest first unless "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID, while nvidia-smi numbers them by PCI bus: "
            "CUDA_VISIBLE_DEVICES indices may name other GPUs than nvidia-smi shows"
        )
    cvd = (
        f"CUDA_VISIBLE_DEVICES={value}"
        if value is not None
        else "CUDA_VISIBLE_DEVICES not set"
        + (f" (all {len(listing.gpus)} GPUs visible)" if listing.gpus else "")
    )
    torch_vars = " ".join(f"{k}={env[k]}" for k in set_vars) or "no torchrun variables set"
    summary = f"{cvd}; {torch_vars}"
    if problems:
        detail = problems + notes
        if not listing.gpus:
            detail.append("no GPU list to check against on this machine")
        return Check(
            "placement",
            sev,
            problems[0] if len(problems) == 1 else f"{len(problems)} problems: {problems[0]}",
            "\n".join(detail) + f"\n{summary}",
            "export CUDA_VISIBLE_DEVICES as a comma-separated list of distinct GPU indices or "
            "UUIDs (nvidia-smi -L), and give torchrun/verl consistent ranks, sizes and a port "
            "in 1-65535 (or unset those variables: torchrun sets them)",
        )
    if notes:
        return Check(
            "placement",
            "warn",
            summary,
            "\n".join(notes),
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID, or name GPUs by UUID",
        )
    return Check("placement", "ok", summary)


# -- 10, 11. disk and memory -------------------------------------------------------------------


def _human(size: float) -> str:
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    return f"{size / (1 << 20):.0f} MiB"


def _existing(path: Path) -> Path:
    for p in [path, *path.parents]:
        if p.exists():
            return p
    return Path("/")


def check_disk(n: Needs, prefix: str | None) -> Check:
    need = int(n.installed_size * DISK_MARGIN)
    target = Path(prefix).expanduser().absolute() if prefix else Path.cwd()
    existing = _existing(target)
    where = f"{target} (on {existing})" if existing != target else str(target)
    places = [
        ("install prefix", where, existing),
        ("temp dir", tempfile.gettempdir(), Path(tempfile.gettempdir())),
    ]
    found: list[str] = []
    problems: list[str] = []
    fixes: list[str] = []
    for label, name, path in places:
        try:
            free = shutil.disk_usage(str(path)).free
        except OSError as exc:
            problems.append(f"cannot read the free space of {label} {name}: {exc}")
            continue
        found.append(f"{label} {name}: {_human(free)} free")
        if n.installed_size and free < need:
            problems.append(
                f"{label} {name} has {_human(free)} free; the bundle needs {_human(need)} "
                f"({_human(n.installed_size)} installed + {DISK_MARGIN - 1:.0%})"
            )
            fixes.append(
                f"free {_human(need - free)} there, or install elsewhere (--prefix DIR)"
                if label == "install prefix"
                else "point TMPDIR at a directory with room (export TMPDIR=/path)"
            )
    size = f"needs {_human(need)}" if n.installed_size else "bundle size unknown"
    if problems:
        return Check(
            "disk",
            "fail",
            problems[0],
            "\n".join(problems + found),
            "; ".join(fixes) or "check the paths",
        )
    return Check("disk", "ok", f"{'; '.join(found)} ({size})")


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _cgroup_room() -> int | None:
    """What a cgroup (container) memory limit leaves, when one is set."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < (1 << 60):
            return max(0, int(limit) - int(usage))
    return None


def read_mem_available() -> int | None:
    """Bytes of RAM available for new work: MemAvailable, or less under a container limit."""
    avail = None
    try:
        text = Path(MEMINFO).read_text()
    except OSError:
        text = ""
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.M)
    if m:
        avail = int(m.group(1)) * 1024
    room = _cgroup_room()
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


def max_jobs(
    gib_per_job: float,
    limit: int | None,
    cpus: int | None = None,
    mem_available: int | None = None,
) -> int:
    """The MAX_JOBS a source build should use: half the CPUs, one job per `gib_per_job` GiB
    of available RAM, at most `limit`; at least 1. None reads this machine."""
    if cpus is None:
        cpus = cpu_count()
    if mem_available is None:
        mem_available = read_mem_available()
    jobs = cpus // 2 or 1
    if mem_available is not None and gib_per_job > 0:
        jobs = min(jobs, math.floor(mem_available / GIB / gib_per_job))
    if limit:
        jobs = min(jobs, limit)
    return max(1, jobs)


def check_memory(n: Needs) -> Check:
    avail, cpus = read_mem_available(), cpu_count()
    ram = f"{_human(avail)} available" if avail is not None else "available RAM unknown"
    if not n.builds:
        return Check("memory", "ok", f"{ram}, {cpus} CPUs; no source build in this bundle")
    lines: list[str] = []
    problems: list[str] = []
    forced = os.environ.get("MAX_JOBS", "").strip()
    for b in n.builds:
        jobs = max_jobs(b.gib_per_job, b.limit, cpus, avail)
        cap = f", limit {b.limit}" if b.limit else ""
        lines.append(
            f"{b.package}: MAX_JOBS={jobs} ({ram}, {b.gib_per_job:g} GiB per job, {cpus} CPUs{cap})"
        )
        if avail is not None and avail < b.gib_per_job * GIB:
            problems.append(
                f"{b.package}: {ram}, less than one compile job's {b.gib_per_job:g} GiB: the "
                "build may be killed for lack of memory"
            )
        elif jobs == 1:
            problems.append(f"{b.package} will build with MAX_JOBS=1: expect a slow build")
        if forced.isdigit() and avail is not None and int(forced) * b.gib_per_job * GIB > avail:
            problems.append(
                f"MAX_JOBS={forced} from the environment wins, and needs about "
                f"{int(forced) * b.gib_per_job:g} GiB"
            )
    if forced:
        lines.append(f"MAX_JOBS={forced} is set in the environment and overrides these")
    if problems:
        return Check(
            "memory",
            "warn",
            problems[0],
            "\n".join(problems + lines),
            "free memory (stop other jobs) or add RAM; a lower MAX_JOBS trades time for memory",
        )
    return Check("memory", "ok", "; ".join(lines))


# -- the whole examination ---------------------------------------------------------------------


def _guarded(check_id: str, fn: Callable[..., Check], *args: Any) -> Check:
    """A check that trips over something unforeseen reports it instead of a traceback."""
    try:
        return fn(*args)
    except Exception as exc:  # the doctor must always finish its report
        return Check(
            check_id,
            "warn",
            f"could not check: {type(exc).__name__}: {exc}",
            "this is a bug in the doctor; please report it with the output of --json",
        )


def run_doctor(
    needs: dict[str, Any],
    python: str | None = None,
    prefix: str | None = None,
    require_gpu: bool = False,
) -> Report:
    """Examine this server against `needs` (a manifest, or a dict of the same keys)."""
    n = read_needs(needs)
    distro = read_distro()
    # The probes run side by side, so that a hung driver costs one timeout, not several.
    with ThreadPoolExecutor(max_workers=5) as pool:
        py_job = pool.submit(probe_python, python or sys.executable)
        toolkit_job = pool.submit(find_toolkit)
        ldcache_job = pool.submit(read_ldconfig)
        listing_job = pool.submit(list_gpus)
        driver_job = pool.submit(probe_driver)
    py, toolkit, ldcache = py_job.result(), toolkit_job.result(), ldcache_job.result()
    listing, driver = listing_job.result(), driver_job.result()
    plan: list[tuple[str, Callable[..., Check], tuple[Any, ...]]] = [
        ("os", check_os, (n, distro)),
        ("python", check_python, (n, py, distro)),
        ("headers", check_headers, (n, py, distro)),
        ("gcc", check_gcc, (n, distro)),
        ("ninja", check_ninja, (n, distro)),
        ("nvcc", check_nvcc, (n, toolkit, distro)),
        ("cuda-home", check_cuda_home, (n, toolkit)),
        ("cuda-libs", check_cuda_libs, (n, toolkit, ldcache)),
        ("driver", check_driver, (n, driver, listing, require_gpu)),
        ("gpus", check_gpus, (listing, require_gpu)),
        ("placement", check_placement, (listing, require_gpu, os.environ)),
        ("disk", check_disk, (n, prefix)),
        ("memory", check_memory, (n,)),
    ]
    checks = [_guarded(check_id, fn, *args) for check_id, fn, args in plan]
    host = {
        "os": distro.name,
        "kernel": platform.release(),
        "arch": _norm_arch(platform.machine()),
        "glibc": glibc_version(),
        "python": py.version,
        "python_executable": py.path,
        "cpus": cpu_count(),
        "mem_available": read_mem_available(),
        "gpus": len(listing.gpus),
        "nvcc": toolkit.version,
    }
    return Report(checks, host)


def render_text(report: Report) -> str:
    width = max([len(c.id) for c in report.checks] + [5])
    lines = [f"{LABELS[c.status]:<4}  {c.id:<{width}}  {c.summary}" for c in report.checks]
    for c in report.checks:
        if c.status == "ok":
            continue
        lines += ["", f"{LABELS[c.status]} {c.id}: {c.summary}"]
        lines += [f"  {line}" for line in c.detail.splitlines() if line.strip()]
        if c.fix:
            lines.append(f"  fix: {c.fix}")
    fails = sum(c.status == "fail" for c in report.checks)
    warns = sum(c.status == "warn" for c in report.checks)
    counts = f"{fails} failure(s), {warns} warning(s)"
    verdict = "ready to install" if report.ok else "NOT ready: fix the failures above"
    lines += ["", f"doctor: {verdict} ({counts})"]
    return "\n".join(lines)


def render_json(report: Report) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "checks": [
            {"id": c.id, "status": c.status, "summary": c.summary, "detail": c.detail, "fix": c.fix}
            for c in report.checks
        ],
        "host": dict(report.host),
    }


def _own_bundle() -> str | None:
    """The bundle this file sits in (<bundle>/lib/verl_bundle/airgap/doctor.py), if any."""
    parents = Path(__file__).resolve().parents
    if len(parents) > 3 and parents[2].name == "lib" and (parents[3] / MANIFEST).is_file():
        return str(parents[3])
    return None


def main(argv: list[str]) -> int:
    """`doctor [--bundle DIR] ...`: exit 0 when nothing failed, 1 on a failure, 2 on bad usage."""
    parser = argparse.ArgumentParser(
        prog="doctor", description="Check this server against a bundle's needs, before installing."
    )
    parser.add_argument("--bundle", metavar="DIR", help="the bundle (default: the one I am in)")
    parser.add_argument("--python", metavar="PATH", help="the interpreter the venv will use")
    parser.add_argument("--prefix", metavar="DIR", help="where the bundle will be installed")
    parser.add_argument(
        "--require-gpu", action="store_true", help="no driver or GPU is a failure, not a warning"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    bundle = args.bundle or _own_bundle()
    if bundle is None:
        parser.error("--bundle DIR is required: this doctor is not running from inside a bundle")
    root = find_root(bundle)
    try:
        manifest = read_manifest(root)
        report = run_doctor(manifest, args.python, args.prefix, args.require_gpu)
    except (OSError, ValueError) as exc:
        print(f"doctor: cannot read {Path(root) / MANIFEST}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(render_json(report), indent=2) if args.json else render_text(report))
    return 0 if report.ok else 1


def max_jobs_main(argv: list[str]) -> int:
    """`max-jobs --gib-per-job F --limit N`: print the MAX_JOBS for this machine."""
    parser = argparse.ArgumentParser(
        prog="max-jobs", description="The MAX_JOBS a source build should use on this machine."
    )
    parser.add_argument("--gib-per-job", type=float, default=9.0, metavar="F")
    parser.add_argument("--limit", type=int, default=0, metavar="N", help="0 means no limit")
    args = parser.parse_args(argv)
    if args.gib_per_job <= 0 or args.limit < 0:
        parser.error("--gib-per-job must be above 0 and --limit at least 0")
    print(max_jobs(args.gib_per_job, args.limit or None))
    return 0
