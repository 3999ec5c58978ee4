"""Post-install checks over the typed manifest, without noise a user cannot act on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from verl_bundle.airgap.postinstall import check_imports, run_checks


def test_setuptools_distutils_warning_does_not_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module that (like torch, through setuptools' distutils shim) warns "Setuptools is
    replacing distutils" on import: the check passes and nothing is printed. Warnings are
    errors in this suite, so a leaked warning would fail the import."""
    (tmp_path / "noisy.py").write_text(
        "import warnings\nwarnings.warn('Setuptools is replacing distutils.', stacklevel=1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "noisy", raising=False)
    from verl_bundle.airgap.manifest import Checks, Manifest, ProfileInfo, Target, Toolchain

    m = Manifest(
        name="t",
        created_by="",
        created="",
        profile=ProfileInfo("p"),
        target=Target("3.10", "cp310", "manylinux_2_17_x86_64", "x86_64", None, "11.8"),
        toolchain=Toolchain(),
        checks=Checks(imports=("noisy",)),
        phases=(),
    )
    results = {r.id: r for r in run_checks(m)}
    assert results["import:noisy"].status == "ok", results["import:noisy"]
    captured = capsys.readouterr()
    assert "distutils" not in captured.out + captured.err
    # Outside run_checks the same import is a warning (so the test above can fail).
    monkeypatch.delitem(sys.modules, "noisy", raising=False)
    assert check_imports(["noisy"])[0].status == "fail"
