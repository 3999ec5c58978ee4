"""What leaving a phase out means for readiness (airgap/postinstall/left_out.py): read from the manifest
(what the phase holds) and readiness.json (what each trainer module needs), never per package."""

from __future__ import annotations

from typing import Any

import pytest
from support.doctor import SAMPLE, with_wheel

from verl_bundle.airgap.contract.manifest import Manifest, from_dict
from verl_bundle.airgap.postinstall import readiness
from verl_bundle.airgap.postinstall.left_out import left_out


def stack(verl: str) -> Manifest:
    """The sample's phases holding vllm (wheels), flash-attn (its own phase) and `verl`."""
    data: dict[str, Any] = SAMPLE
    for name, phase in (("vllm", "wheels"), ("einops", "wheels"), ("flash-attn", "flash-attn")):
        data = with_wheel(data, name, phase)
    data = with_wheel(data, "verl", "verl")
    files = [dict(f, version=verl) if f["name"] == "verl" else f for f in data["files"]]
    return from_dict({**data, "files": files})


def test_skipped_flash_attn_names_the_actor_that_needs_it() -> None:
    (item,) = left_out(stack("0.3.0.post1"), ["flash-attn"])
    assert item.packages == ("flash-attn",)
    assert [(n.module, n.what) for n in item.needs] == [
        ("verl.workers.actor.dp_actor", "verl's FSDP actor"),
        ("flash_attn", ""),
    ]
    assert item.line() == (
        "skipped flash-attn: flash-attn not installed. verl.workers.actor.dp_actor (verl's FSDP "
        "actor) and flash_attn need flash-attn, so the trainer is not ready (PPO with FSDP and "
        "vLLM rollout) until it is installed: run ./install.sh again with the same options but "
        "without --skip-phase flash-attn (it installs only what is missing)"
    )


def test_what_is_claimed_follows_the_verl_release() -> None:
    """The table says dp_actor needs flash_attn for verl 0.2-0.3 only: for 0.4.1 only the
    flash_attn import itself is named."""
    (item,) = left_out(stack("0.4.1"), ["flash-attn"])
    assert [n.module for n in item.needs] == ["flash_attn"]


def test_skipped_verl_is_needed_by_every_trainer_module() -> None:
    m = stack("0.3.0.post1")
    (item,) = left_out(m, ["verl"])
    plan = readiness.plan_for(m)
    verl_modules = [mod for mod in plan.modules if mod.startswith("verl.")]
    assert verl_modules and [n.module for n in item.needs] == verl_modules
    assert {n.distribution for n in item.needs} == {"verl"}
    assert "need verl, so the trainer is not ready" in item.line()


def test_a_phase_no_module_needs_is_said_to_be_harmless() -> None:
    vllm, _ = left_out(stack("0.3.0.post1"), ["wheels", "flash-attn"])
    assert vllm.packages == ("vllm", "einops")
    assert "verl.third_party.vllm (verl's vLLM version gate)" in vllm.line()
    data = with_wheel(SAMPLE, "einops", "torch")
    (item,) = left_out(from_dict(data), ["torch"])
    assert item.needs == ()
    assert item.line() == (
        "skipped torch: einops not installed; none of the modules readiness checks (PPO with FSDP "
        "and vLLM rollout) needs it"
    )
    assert left_out(from_dict(data), []) == []


@pytest.mark.parametrize("entry", readiness.load_table()["needs"]["modules"])
def test_every_needs_entry_is_a_checked_module_with_evidence(entry: dict[str, Any]) -> None:
    table = readiness.load_table()
    checked = {m for row in table["verl"] for mods in row["modules"].values() for m in mods}
    assert entry["module"] in checked
    assert entry["evidence"] and entry["what"] and entry["needs"]
