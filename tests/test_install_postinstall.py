"""Post-install checks over the typed manifest, without noise a user cannot act on, and with
every heavy import made once, in the readiness probe's isolated interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from verl_bundle.airgap.contract.manifest import Checks, Manifest, ProfileInfo, Target, Toolchain
from verl_bundle.airgap.inside import probe as readiness_probe
from verl_bundle.airgap.postinstall.run import run_checks


def test_setuptools_distutils_warning_does_not_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module that (like torch, through setuptools' distutils shim) warns "Setuptools is
    replacing distutils" on import: the probe's check passes and nothing is printed. Warnings
    are errors in this suite, so a leaked warning would fail the import."""
    (tmp_path / "noisy.py").write_text(
        "import warnings\nwarnings.warn('Setuptools is replacing distutils.', stacklevel=1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "noisy", raising=False)
    found = readiness_probe.probe({"checks": ["noisy"]})
    assert found["checks"] == [
        {"module": "noisy", "ok": True, "seconds": found["checks"][0]["seconds"], "version": ""}
    ]
    captured = capsys.readouterr()
    assert "distutils" not in captured.out + captured.err
    # Outside the probe's filter the same import is a warning (so the test above can fail).
    monkeypatch.delitem(sys.modules, "noisy", raising=False)
    assert readiness_probe._check_import("noisy")["ok"] is False


def manifest(imports: tuple[str, ...], torch_version: str = "") -> Manifest:
    return Manifest(
        name="t",
        created_by="",
        created="",
        profile=ProfileInfo("p"),
        target=Target("3.10", "cp310", "manylinux_2_17_x86_64", "x86_64", None, "11.8"),
        toolchain=Toolchain(),
        checks=Checks(imports=imports, torch_version=torch_version),
        phases=(),
    )


def test_imports_run_in_the_isolated_probe_not_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module only this process can see (on its sys.path, not the interpreter's) fails the
    check: the probe runs `python -I`, as the trainer would see the environment. Modules the
    interpreter has import there, each reported with its version; torch's build is asked of
    the probe too (no torch here: a failure, named)."""
    (tmp_path / "only_here.py").write_text("__version__ = '9'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = run_checks(manifest(("pytest", "only_here"), torch_version="2.6.0"))
    results = {r.id: r for r in found.installed + found.readiness}
    assert results["import:pytest"].status == "ok"
    assert results["import:pytest"].summary == f"import pytest {pytest.__version__}"
    assert results["import:only_here"].status == "fail"
    assert "ModuleNotFoundError: No module named 'only_here'" in results["import:only_here"].summary
    assert results["torch"].status == "fail" and "torch does not import" in results["torch"].summary
    assert results["gpu"].status == "skip"
    assert found.purpose == ""  # no verl in this bundle: nothing to train with
    ids = [r.id for r in found.installed + found.readiness]
    assert ids[:1] == ["versions"] and ids.index("import:pytest") < ids.index("requirements")


def test_a_probe_that_cannot_start_fails_the_import_checks(tmp_path: Path) -> None:
    found = run_checks(manifest(("json",)), python=str(tmp_path / "no-python"))
    results = {r.id: r for r in found.installed + found.readiness}
    assert results["imports"].status == "fail"
    assert "the import checks could not run: cannot run" in results["imports"].summary
