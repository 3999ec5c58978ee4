"""The bundled CPython on the server: install.sh checks the archive's sha256 and unpacks it into
PREFIX/python before anything runs from it (it may be the only Python there is); this module
checks again what was unpacked (the archive's hash, no link that leaves the tree, the binary
there) and says why it is the interpreter the venv is made from."""

from __future__ import annotations

import os

from verl_bundle.airgap.contract.manifest import Manifest
from verl_bundle.airgap.errors import DamagedError, UsageError
from verl_bundle.airgap.install.options import (
    Options,
)

MARK = ".sha256"  # install.sh writes the archive's sha256 here once the tree is unpacked


def binary(root: str, m: Manifest) -> str:
    return os.path.join(root, "bin", f"python{m.target.python}")


def chosen(opts: Options, m: Manifest) -> str | None:
    """The bundled interpreter the venv is made from, or None (this server's own)."""
    if opts.bundled_python:
        if m.interpreter is None:
            raise UsageError("--bundled-python: this bundle carries no Python")
        return binary(os.path.abspath(opts.bundled_python), m)
    if opts.python == "bundled":
        raise UsageError(
            "--python bundled: run the bundle's ./install.sh (it checks and unpacks the bundled "
            "CPython before the installer starts)",
        )
    return None


def checked(opts: Options, m: Manifest, python: str) -> str:
    """ "bundled CPython X.Y.Z" once the unpacked tree of `python` checks out; "" when the
    venv is made from this server's own interpreter."""
    if not opts.bundled_python or m.interpreter is None:
        return ""
    check_tree(os.path.dirname(os.path.dirname(python)), m)
    return f"bundled CPython {m.interpreter.version}"


def check_tree(root: str, m: Manifest) -> None:
    """What install.sh unpacked is this bundle's archive, complete, and stays inside `root`:
    DamagedError naming the problem otherwise."""
    carried = m.interpreter
    assert carried is not None
    problem = ""
    try:
        with open(os.path.join(root, MARK), encoding="ascii") as fh:
            mark = fh.read().strip()
    except OSError:
        mark = ""
    if mark != carried.sha256:
        problem = f"{root} is not the unpacked {carried.filename} (its {MARK} does not match)"
    elif not os.access(binary(root, m), os.X_OK):
        problem = f"{binary(root, m)} is missing"
    else:
        real = os.path.realpath(root)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                if os.path.islink(path) and not _inside(os.path.realpath(path), real):
                    problem = f"{path} links outside {root}"
                    break
            if problem:
                break
    if problem:
        raise DamagedError(
            f"the bundled Python is damaged: {problem}; remove {root} and run ./install.sh again",
        )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def why(opts: Options, m: Manifest) -> str:
    """Why the bundled interpreter is used: asked for, or nothing on this server fits."""
    if opts.python == "bundled":
        return "--python bundled"
    from verl_bundle.airgap.doctor.python import probe_server_pythons, why_bundled

    return why_bundled(m.target.python, probe_server_pythons())
