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
    # Installed offline, but the trainer needs what the phase left out: exit 5, not 0.
    assert result.code == 5, result.out + result.err
    envelope = json.loads(result.out)
    assert envelope["ok"] is False and envelope["verdict"]["state"] == "not-ready"
    assert (
        "flash_attn is not installed (phase flash-attn was left out)" in envelope["verdict"]["line"]
    )
    doc = envelope["result"]
    assert doc["installed"] is True
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["phase flash-attn"]["status"] == "not rehearsed", doc
    assert steps["phase flash-attn"]["detail"] == "left out by --skip-phase"
    for name in ("verify", "phase torch", "phase wheels", "phase verl"):
        assert steps[name]["status"] == "pass", (name, doc)
    # The checks' row says what the verdict says: never "pass" beside "not ready to train".
    assert steps["post-install checks"]["status"] == "not ready", doc
    assert steps["done"]["detail"] == "skipped: flash-attn"
    # The text's last line: the rehearsal's verdict is install.sh's, with why it is so.
    text = run(args[:-1], capsys)
    assert text.code == 5
    last = text.out.rstrip().splitlines()[-1]
    assert last.startswith("rehearsal: installs offline; not ready to train: ")
    assert "flash_attn is not installed (phase flash-attn was left out)" in last
    assert last.endswith("(phase flash-attn not rehearsed: left out by --skip-phase)")
    assert "rehearsal passed" not in text.out
    assert any(
        line.split()[:2] == ["not", "ready"] and "post-install checks" in line
        for line in text.out.splitlines()
    ), text.out


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
