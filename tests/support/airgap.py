"""Running a bundle's install.sh the way a server would: extracted somewhere else, no network."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_environ

# The toy stack (tests/support/stack.py) is ready to train once installed: verl's trainer modules
# import and its config composes with the real Hydra. A complete install ends exit 0 with
# "ready to train on the CPU side ...; not proven here: the trainer's start (...)" as its last
# line (its verl 0.2 has no dry run; the one exit table, airgap/errors.py).
READY = 0


def find_python(version: str) -> str | None:
    from verl_bundle.interpreter import find_python as find

    return find(version)


def python310() -> str:
    py = find_python("3.10")
    if py is None:
        pytest.skip("no Python 3.10 on this machine (pyenv install 3.10)")
    return py


def netns_prefix() -> list[str]:
    """`unshare -n` (a new network namespace with no interfaces but a down loopback)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"the kernel refuses a network namespace here: {probe.stderr.strip()}")
    return ["unshare", "-n"]


def extract(tarball: Path, dest: Path) -> Path:
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tf:
        tf.extractall(dest, filter="data")
        top = tf.getmembers()[0].name
    return dest / top


def run_install(
    bundle: Path,
    home: Path,
    *args: str,
    offline: bool = True,
    env: dict[str, str] | None = None,
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    environ = clean_environ(home)
    environ["HOME"] = str(home)
    environ.update(env or {})
    cmd = [*(netns_prefix() if offline else []), str(bundle / "install.sh"), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=environ, cwd=home, timeout=timeout
    )


def install_into(
    bundle: Path, home: Path, prefix: Path, *args: str, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """install.sh into a new venv at `prefix` made from Python 3.10 (the usual test install)."""
    return run_install(
        bundle, home, "--prefix", str(prefix), "--python", python310(), *args, **kwargs
    )


def start_install(
    bundle: Path,
    home: Path,
    prefix: Path,
    *args: str,
    offline: bool = True,
    quiet: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """install.sh into `prefix` (Python 3.10) in the background, in a session of its own so that
    a test can signal it like a terminal would; output discarded when `quiet`, else piped."""
    environ = clean_environ(home)
    environ["HOME"] = str(home)
    environ.update(env or {})
    cmd = [*(netns_prefix() if offline else []), str(bundle / "install.sh")]
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(
        [*cmd, "--prefix", str(prefix), "--python", python310(), *args],
        stdout=out,
        stderr=out,
        text=True,
        env=environ,
        start_new_session=True,
    )


def resign(root: Path) -> None:
    """After a test changed files of an extracted bundle on purpose, make its manifest and
    SHA256SUMS agree again, as a (broken) upstream release would: the checks pass, the content
    is what the test wants to see fail later."""
    import hashlib
    import json

    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    manifest = json.loads((root / "manifest.json").read_text())
    for entry in [*manifest["files"], *manifest["generated"]]:
        path = root / entry["path"]
        entry["sha256"], entry["size"] = digest(path), path.stat().st_size
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    lines = [
        f"{digest(p)}  {p.relative_to(root).as_posix()}"
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "SHA256SUMS"
    ]
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")


# Run as scripts on their own (not through the CLI): the probe and the trainer dry run's entry
# wrapper in the venv's python, the --from fetcher before any of lib/ exists on the node, and
# the installed verifier (its own small command, so that what checks a bundle is never the
# program that bundle carries).
STANDALONE = {
    "inside/probe.py",
    "inside/dryrun_entry.py",
    "inside/dryrun_workers.py",
    "verify/served.py",
    "trust/verifier.py",
}
