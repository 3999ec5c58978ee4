"""rehearse --skip-phase: a phase left out on request (flash-attn, whose server build takes hours
where this host's nvcc would fit) is reported as not rehearsed, and post-install says what that
means; an unknown phase is one usage line naming the bundle's phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airgap import netns_prefix, python310

pytestmark = pytest.mark.slow


def test_rehearse_leaves_out_a_phase_on_request(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import run

    python310()
    netns_prefix()
    args = ["rehearse", str(built_bundle[0]), "--skip-phase", "flash-attn", "--json"]
    result = run(args, capsys)
    assert result.code == 0, result.out + result.err
    doc = json.loads(result.out)["result"]
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["phase flash-attn"]["status"] == "not rehearsed", doc
    assert steps["phase flash-attn"]["detail"] == "left out by --skip-phase"
    for name in ("verify", "phase torch", "phase wheels", "phase verl", "post-install checks"):
        assert steps[name]["status"] == "pass", (name, doc)
    assert steps["done"]["detail"] == "skipped: flash-attn"
    # install.sh's own last lines say what leaving it out means (airgap/postinstall/left_out.py)
    assert any("flash-attn" in line for line in doc["log_tail"]), doc["log_tail"]


def test_rehearse_refuses_an_unknown_phase_in_one_line(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import run

    netns_prefix()
    result = run(["rehearse", str(built_bundle[0]), "--skip-phase", "flash_attn"], capsys)
    assert result.code == 2, result.out + result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "--skip-phase flash_attn: the bundle has no such phase" in lines[0]
    assert "torch, wheels, flash-attn, verl" in lines[0]
