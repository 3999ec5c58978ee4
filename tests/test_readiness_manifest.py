"""The manifest's optional `readiness` value: written, read back, and absent in older bundles."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from verl_bundle.airgap.contract import manifest as mf

# A schema-2 manifest as written before `readiness` existed (no such key).
OLD: dict[str, Any] = {
    "schema": 2,
    "name": "verl-bundle-cu121-cp310-manylinux_2_17_x86_64",
    "profile": {"name": "cu121"},
    "target": {
        "python": "3.10",
        "python_tag": "cp310",
        "platform": "manylinux_2_17_x86_64",
        "cuda": "12.1",
    },
    "toolchain": {},
    "phases": [{"name": "wheels", "requirements": "requirements/01-wheels.txt"}],
}


def test_a_manifest_without_readiness_reads_as_the_defaults() -> None:
    m = mf.from_dict(OLD)
    assert m.readiness == mf.Readiness()
    assert m.readiness.purpose == "PPO with FSDP and vLLM rollout"
    assert m.readiness.modules == ()
    assert m.readiness.config == "ppo_trainer"


def test_readiness_round_trips() -> None:
    ready = mf.Readiness(
        purpose="PPO with FSDP and vLLM rollout",
        modules=("verl.trainer.main_ppo", "verl.workers.fsdp_workers"),
        config="ppo_trainer",
        limit="torch 2.1.2 lacks torch.distributed.device_mesh: verl's FSDP trainer cannot start",
    )
    m = dataclasses.replace(mf.from_dict(OLD), readiness=ready)
    back = mf.loads(mf.dumps(m))
    assert back.readiness == ready
    assert json.loads(mf.dumps(m))["readiness"]["modules"] == list(ready.modules)


def test_a_mistyped_readiness_field_is_named() -> None:
    doc = dict(OLD, readiness={"modules": "verl.trainer.main_ppo"})
    with pytest.raises(mf.ManifestError, match=r"manifest\.readiness\.modules must be a list"):
        mf.from_dict(doc)
