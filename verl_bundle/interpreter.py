"""Finding a Python interpreter from what a user typed: a path, a command name, or a version.

`--python` means an interpreter in doctor and rehearse; a user who writes `3.10` there (as in
build) gets pythonX.Y from PATH, else a pyenv install of that version.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

from verl_bundle.errors import UsageError

_VERSION = re.compile(r"3\.\d{1,2}")


def python_version(python: str) -> str:
    """'3.10' for an interpreter, or 'unknown' when it does not run."""
    try:
        proc = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def find_python(version: str) -> str | None:
    """An interpreter of this version: pythonX.Y on PATH, else a pyenv install (a pyenv shim
    on PATH may point at another version, so each candidate is asked)."""
    candidates = [shutil.which(f"python{version}")]
    pattern = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
    candidates += sorted(glob.glob(pattern), reverse=True)
    for candidate in candidates:
        if candidate and python_version(candidate) == version:
            return candidate
    return None


def interpreter(value: str, option: str = "--python") -> str:
    """A path to an interpreter for `value`: a path, a command on PATH, or a version X.Y."""
    if _VERSION.fullmatch(value.strip()):
        found = find_python(value.strip())
        if found is None:
            raise UsageError(
                f"{option} {value}: no python{value.strip()} on PATH or in ~/.pyenv/versions; "
                "install it, or give the interpreter's path"
            )
        return found
    if os.sep in value:
        if not os.path.isfile(value):
            raise UsageError(
                f"{option} {value}: no such file; give an interpreter's path or a version X.Y"
            )
        return value
    found = shutil.which(value)
    if found is None:
        raise UsageError(
            f"{option} {value}: not found on PATH; give an interpreter's path or a version X.Y"
        )
    return found
