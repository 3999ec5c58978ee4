"""The interpreter the venv will be made from: its version, whether it can make a venv, and
its headers (Python.h), which triton and every source build compile against."""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.doctor.commands import Run, probe, run
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok
from verl_bundle.airgap.doctor.versions import short

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts

VENV_TIMEOUT = 20.0  # creating a venv writes a few hundred files

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


@dataclass(frozen=True)
class Interpreter:
    path: str
    run: Run
    version: str | None = None
    include: str | None = None
    venv_problem: str | None = None  # None: `-m venv` works (or was not tried)

    @property
    def short(self) -> str | None:
        return short(self.version)


def _venv_problem(path: str) -> str | None:
    """Why `path -m venv --without-pip` does not make a venv, or None when it does."""
    try:
        with tempfile.TemporaryDirectory(prefix="verl-doctor-") as tmp:
            target = Path(tmp) / "venv"
            r = run([path, "-I", "-m", "venv", "--without-pip", str(target)], VENV_TIMEOUT)
            if r.ok and (target / "bin" / "python").exists():
                return None
            return r.why() if not r.ok else "it made no bin/python"
    except OSError as exc:
        return f"could not try it in a temporary directory: {exc}"


def probe_python(path: str) -> Interpreter:
    with ThreadPoolExecutor(max_workers=1) as pool:
        venv = pool.submit(_venv_problem, path)  # the trial venv beside the probe: both wait
        data, r = probe(PYTHON_PROBE, python=path)
        if data is None:
            return Interpreter(path, r)
        include = data.get("include")
        return Interpreter(
            path,
            r,
            str(data.get("version") or "") or None,
            include if isinstance(include, str) else None,
            venv.result(),
        )


@dataclass(frozen=True)
class ServerPython:
    """A python3 or python3.X on this server's PATH, and its version (None: it does not run)."""

    path: str
    version: str | None


# What a python on PATH is, asked without site (-E -s -S: a pyenv or conda shim still answers in
# a few milliseconds of its own) and in a form every Python 3 understands.
SERVER_PYTHON_PROBE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"


def probe_server_pythons() -> tuple[ServerPython, ...]:
    """python3 and every python3.X on PATH: what the server itself offers. Asked side by side:
    each may be a shim (pyenv's take ~0.2 s each), and there may be ten."""
    paths: dict[str, str] = {}
    for name in ["python3", *(f"python3.{n}" for n in range(6, 15))]:
        path = shutil.which(name)
        if path is not None:
            paths.setdefault(os.path.realpath(path), path)
    if not paths:
        return ()
    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        runs = pool.map(
            lambda p: run([p, "-E", "-s", "-S", "-c", SERVER_PYTHON_PROBE], 20.0), paths.values()
        )
        return tuple(
            ServerPython(path, r.out.strip() if r.ok else None)
            for path, r in zip(paths.values(), runs)
        )


def bundled_mark(python: str) -> str | None:
    """The sha256 that the bundle's own CPython carries beside its bin/ (install.sh writes it when
    it unpacks the interpreter), or None for any other Python."""
    mark = os.path.join(os.path.dirname(os.path.dirname(python)), ".sha256")
    try:
        with open(mark, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _bundled(plan: Plan, py: Interpreter) -> bool:
    """Whether `py` is the bundle's own CPython as install.sh unpacks it (PREFIX/python)."""
    carried = plan.manifest.interpreter if plan.manifest else None
    return carried is not None and bundled_mark(py.path) == carried.sha256


def why_bundled(want: str | None, pythons: tuple[ServerPython, ...]) -> str:
    """Why the bundled CPython is the one: nothing on this server fits, or it was asked for."""
    fits = [s for s in pythons if want and short(s.version) == want]
    if fits:
        return f"chosen with --python bundled; this server's {fits[0].path} would also do"
    own = "; ".join(f"{s.path} is {s.version or 'broken'}" for s in pythons)
    return f"this server has no Python {want}" + (f" ({own})" if own else " (no python3 at all)")


@check("python", generic=True)
def check_python(plan: Plan, facts: Facts, opts: Options) -> Check:
    py, distro, want = facts.python, facts.distro, plan.python
    pkg = f"python{want}" if want else "python3"
    carried = plan.manifest.interpreter if plan.manifest else None
    bundled = (
        f"run ./install.sh --python bundled (this bundle carries CPython {carried.version})"
        if carried
        else ""
    )
    if py.version is None:
        return found(
            "fail",
            f"{py.path} did not answer as a Python interpreter ({py.run.why()})",
            "",
            bundled or f"pass --python with the path of a Python {want or '3'} interpreter",
        )
    if want and py.short != want:
        other = shutil.which(f"python{want}")
        return found(
            "fail",
            f"{py.path} is Python {py.version}; this bundle's wheels are for Python {want}",
            "wheels tagged for one Python minor version do not install on another",
            f"pass --python {other}"
            if other
            else bundled
            or distro.install(f"{pkg} {pkg}-venv {pkg}-dev", f"{pkg} {pkg}-devel")
            + f", then pass --python /usr/bin/{pkg} (or build the bundle with --with-python)",
        )
    if py.venv_problem is not None:
        pkg = f"python{want or py.short or '3'}"
        return found(
            "fail",
            f"Python {py.version} at {py.path} cannot create a venv",
            f"`{py.path} -m venv --without-pip` failed: {py.venv_problem}. Debian and Ubuntu "
            f"ship venv separately, as {pkg}-venv.",
            distro.install(f"{pkg}-venv", pkg),
        )
    pip = "; pip comes from the bundle" if not plan.generic else ""
    if carried is not None and _bundled(plan, py):
        why = why_bundled(want, facts.server_pythons)
        return ok(f"the bundled CPython {py.version} at {py.path} ({why}); venv works{pip}")
    also = (
        f"the bundle also carries CPython {carried.version} (--python bundled)" if carried else ""
    )
    return ok(f"Python {py.version} at {py.path}; venv works{pip}", also)


@check("headers")
def check_headers(plan: Plan, facts: Facts, opts: Options) -> Check:
    py, distro = facts.python, facts.distro
    pkg = f"python{py.short or plan.python or '3'}"
    if py.include is None:
        return found(
            "warn",
            f"not checked: {py.path} did not answer (see python)",
            "",
            "fix the python check first, or pass --python with a working interpreter",
        )
    header = Path(py.include) / "Python.h"
    if header.is_file():
        return ok(f"{header}")
    why = []
    if plan.compiles_at_run_time:
        why.append("triton compiles small launchers at run time against them")
    if plan.builds:
        why.append(f"the bundle compiles {', '.join(b.package for b in plan.builds)} from source")
    return found(
        "fail" if why else "warn",
        f"no Python.h in {py.include}",
        ("; ".join(why) + ", so they are needed even when every package is a wheel.")
        if why
        else "nothing in this bundle compiles against them"
        + plan.left_out_note()
        + "; CUDA extensions compiled here later will need them.",
        distro.install(f"{pkg}-dev", "python3-devel (python3.X-devel for a non-default Python)")
        + " (for a Python built from source, reinstall it with its headers)",
    )
