"""A fix that proposes other GPUs and a GPU count (leaving busy GPUs out, one kind of GPU,
fewer GPUs than the config wants) is checked against every rule before it is printed: two busy
GPUs of eight under verl's default batch must not propose n_gpus_per_node=6, which the batch of
1024 does not divide. Standard library only, Python 3.8+."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from verl_bundle.airgap.checks import Registered
from verl_bundle.airgap.doctor.devices import Gpu
from verl_bundle.airgap.doctor.registry import found
from verl_bundle.airgap.launch import verlconfig as vc
from verl_bundle.airgap.launch.facts import NGPUS, Launch

Checks = Sequence[Registered]  # preflight's checks


def ids(gpus: list[Gpu]) -> str:
    return ",".join(str(g.index) for g in gpus)


def failing(launch: Launch, checks: Checks) -> dict[str, str]:
    """check id -> summary of each rule `launch` breaks (fixes not proposed)."""
    out = {}
    for reg in checks:
        try:
            c = reg.fn(launch)
        except vc.ConfigError as exc:
            c = found("fail", str(exc), "", "")
        if c.status == "fail":
            out[reg.id] = c.summary
    return out


def offer(launch: Launch, own: str, gpus: list[Gpu], checks: Checks) -> tuple[str | None, str]:
    """The most of `gpus` (in order) this node can run on without breaking a rule that holds
    now: ("export CUDA_VISIBLE_DEVICES=... and trainer.n_gpus_per_node=k", why not all, or "")
    or (None, why none). Every rule is checked with the proposed settings, so a proposal never
    trades one failure for another."""
    if launch.proposal:
        return None, ""  # a proposal being checked proposes nothing itself
    before = failing(replace(launch, proposal=True), checks)
    before.pop(own, None)
    broken = ""
    for k in range(len(gpus), 0, -1):
        chosen = gpus[:k]
        proposed = replace(
            launch,
            values={**launch.values, NGPUS: str(k)},
            env={**launch.env, "CUDA_VISIBLE_DEVICES": ids(chosen)},
            proposal=True,
        )
        new = {i: s for i, s in failing(proposed, checks).items() if i not in before}
        if not new:
            why = f"{NGPUS}={len(gpus)} would break: {broken}" if broken else ""
            return f"export CUDA_VISIBLE_DEVICES={ids(chosen)} and {NGPUS}={k}", why
        if not broken:
            broken = next(iter(new.values()))
    return None, f"no GPU count of these {len(gpus)} keeps every rule: {broken}"
