"""Where the data shipped with verl-bundle lives: in the wheel, or at the top of a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """profiles/ or templates/: inside the installed package, else beside it in the checkout."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"verl-bundle is installed without its {name}/ directory")


def airgap_dir() -> Path:
    """The standard-library-only package the bundle carries to the server."""
    return _PACKAGE / "airgap"
