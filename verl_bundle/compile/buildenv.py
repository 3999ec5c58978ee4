"""A throwaway build venv for the target Python, installed offline from the bundle's own cached
wheels, so an extension is compiled against exactly the torch (and build tools) the server runs."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from verl_bundle.credentials import Redactor
from verl_bundle.errors import BundleError
from verl_bundle.uvcmd import run_uv


class BuildEnvError(BundleError):
    """The build venv could not be made from the bundle's wheels."""


def find_links(wheels: Mapping[str, Path], directory: Path) -> Path:
    """The cache keeps blobs by hash; uv wants files by name: one link per wheel."""
    directory.mkdir(parents=True, exist_ok=True)
    for filename, path in wheels.items():
        if filename.endswith(".whl"):
            os.symlink(path, directory / filename)
    return directory


def make_build_env(
    package: str,
    python: str,
    wheels: Mapping[str, Path],
    requirements: Sequence[str],
    work: Path,
    redact: Redactor,
) -> Path:
    """Create work/venv for `python` and install `requirements` from `wheels` only (no index,
    no network); returns the venv's interpreter."""
    venv = work / "venv"
    run = run_uv(["venv", "--python", python, "--no-project", str(venv)], work, redact)
    if run.returncode != 0:
        raise BuildEnvError(
            f"{package}: cannot make a build venv with {python}: {_tail(run.stderr)}"
        )
    interpreter = venv / "bin" / "python"
    if requirements:
        links = find_links(wheels, work / "links")
        args = ["pip", "install", "--offline", "--no-index", "--find-links", str(links)]
        run = run_uv([*args, "--python", str(interpreter), *requirements], work, redact)
        if run.returncode != 0:
            raise BuildEnvError(
                f"{package}: its build requirements ({', '.join(requirements)}) do not install "
                f"from the bundle's own wheels: {_tail(run.stderr)}; declare them in the "
                "profile's build-requires so the lock carries them"
            )
    return interpreter


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-4:])
