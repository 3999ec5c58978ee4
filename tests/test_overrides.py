"""The stack's own overrides (airgap/postinstall/overrides.py): a pip check finding that an
override the lock carries explains (verl main's uv.lock takes numpy 2.4.6 over mistral-common's
numpy<2.4) is said, not failed; anything else still fails. A real venv, real wheels, the real
`uv pip check`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.pkgindex import build_wheel

from verl_bundle.airgap.postinstall.overrides import accepted, parse
from verl_bundle.airgap.postinstall.probing import pip_check
from verl_bundle.uvcmd import uv_binary

UV_LINE = (
    "The package `mistral-common` requires `numpy>=1.25,<2.4 ; python_full_version < '3.13'`, "
    "but `2.4.6` is installed"
)


def test_a_finding_the_override_explains_is_accepted() -> None:
    table = parse(["numpy>=2.0.0", "kernels>=0.10.2,<0.11"])
    assert accepted(UV_LINE, table) == (
        "mistral-common's own numpy requirement is overridden by the stack "
        "(numpy>=2.0.0; 2.4.6 installed)"
    )
    # pip's wording of the same finding
    pip_line = "mistral-common 1.11.3 has requirement numpy<2.4,>=1.25, but you have numpy 2.4.6."
    assert accepted(pip_line, table) is not None


@pytest.mark.parametrize(
    "line",
    [
        UV_LINE.replace("2.4.6", "1.26.0"),  # installed below the override: not what was meant
        UV_LINE.replace("numpy", "torch"),  # a package the stack does not override
        "some other finding",
    ],
)
def test_anything_else_is_not(line: str) -> None:
    assert accepted(line, parse(["numpy>=2.0.0"])) is None


def test_an_override_the_comparator_does_not_understand_accepts_nothing() -> None:
    assert accepted(UV_LINE, parse(["numpy~=2.0"])) is None


@pytest.fixture
def env(tmp_path: Path) -> Path:
    """A venv where `dependent` requires `numpy<2.4` and numpy 2.4.6 is installed."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True
    )
    python = tmp_path / "venv" / "bin" / "python"
    wheels = [
        build_wheel(tmp_path / "w", "dependent", "1.0", requires=["numpy>=1.25,<2.4"]),
        build_wheel(tmp_path / "w", "numpy", "2.4.6"),
    ]
    subprocess.run(
        [
            uv_binary(),
            "pip",
            "install",
            "--no-deps",
            "--offline",
            "--no-cache",
            "--python",
            str(python),
            *map(str, wheels),
        ],
        check=True,
        capture_output=True,
    )
    return python


def test_the_pip_check_says_the_override_instead_of_failing(env: Path) -> None:
    """Before: pip-check failed, and readiness said "not ready" for upstream's own lock."""
    plain = pip_check(str(env), uv_binary())
    assert plain.status == "fail" and "requires `numpy>=1.25,<2.4`" in plain.summary
    meant = pip_check(str(env), uv_binary(), ["numpy>=2.0.0"])
    assert meant.status == "ok"
    assert meant.summary == (
        "no broken requirements but the stack's own overrides: dependent's own numpy "
        "requirement is overridden by the stack (numpy>=2.0.0; 2.4.6 installed)"
    )
    assert pip_check(str(env), uv_binary(), ["numpy>=3"]).status == "fail"
