"""Launch preflight, per node, right before `ray start` or torchrun: will this node's GPUs,
variables and verl settings start training? Checks are a registry like the doctor's (one
function per id over one `Launch` value gathered once); every warn or fail carries a fix.

verl's own start-up rules are checked before anything is launched, as verl checks them:
- data.train_batch_size * rollout.n divisible by n_gpus_per_node * nnodes
  (RayPPOTrainer._validate_config, verl/trainer/ppo/ray_trainer.py);
- train_batch_size >= ppo_mini_batch_size, and ppo_mini_batch_size * rollout.n at least one
  sample per GPU, divisible by ppo_micro_batch_size_per_gpu (ActorConfig.validate,
  verl/workers/config/actor.py);
- rollout.tensor_model_parallel_size divides the GPUs ("rollout world_size ... is not divisible
  by infer_tp", verl/workers/fsdp_workers.py); preflight asks it to divide n_gpus_per_node, so
  that a tensor-parallel group never spans nodes.
The launcher (ranks.py) decides what the rank variables must be: none under Ray (verl's
main_ppo), all four and a matching --nproc_per_node under torchrun. A fix that proposes other
GPUs and a GPU count is checked against every rule before it is printed (proposals.py): leaving two
busy GPUs of eight out must not propose n_gpus_per_node=6 where the batch needs 4.
Standard library only, Python 3.8+."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import Mapping

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import Check, Registered, Verdict, check, collect, of_preflight
from verl_bundle.airgap.doctor.devices import Gpu
from verl_bundle.airgap.doctor.gpus import BUSY_MIB
from verl_bundle.airgap.doctor.node import ray_token_finding
from verl_bundle.airgap.doctor.registry import found, ok
from verl_bundle.airgap.launch import proposals, ranks
from verl_bundle.airgap.launch import verlconfig as vc
from verl_bundle.airgap.launch.facts import MIN_OPEN_FILES, NGPUS, NNODES, Launch, gather

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
ACTOR, ROLLOUT = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."


def registered() -> tuple[Registered, ...]:
    """Preflight's checks: those this module marks with `@check`, in definition order."""
    return collect((sys.modules[__name__],))


def _offer(launch: Launch, own: str, gpus: list[Gpu]) -> tuple[str | None, str]:
    """proposals.offer over every check of preflight."""
    return proposals.offer(launch, own, gpus, registered())


@check("devices")
def check_devices(launch: Launch) -> Check:
    per_node, nnodes = launch.number(NGPUS) or 0, launch.number(NNODES) or 1
    value = launch.env.get("CUDA_VISIBLE_DEVICES")
    if launch.gpus.problem:
        return found(
            "fail",
            f"no GPU listed: {launch.gpus.problem}",
            "",
            "install the NVIDIA driver, or run preflight on the GPU node",
        )
    visible, problems = launch.visible()
    physical = launch.gpus.gpus
    summary = (
        f"CUDA_VISIBLE_DEVICES={value if value is not None else '(unset)'}: {len(visible)} of "
        f"{len(physical)} GPUs visible; verl wants {NGPUS}={per_node} x {NNODES}={nnodes}"
    )
    if len(visible) < per_node:
        problems.append(
            f"{per_node} GPUs per node wanted, {len(visible)} visible: Ray reports 'Total "
            f"available GPUs {len(visible) * nnodes} is less than total desired GPUs "
            f"{per_node * nnodes}'"
        )
    if not problems:
        return ok(summary)
    usable = [g for g in physical][: per_node or len(physical)]
    if len(physical) >= per_node:
        fix = f"export CUDA_VISIBLE_DEVICES={proposals.ids(usable)} (indices nvidia-smi lists)"
    else:
        offer, why = _offer(launch, "devices", list(physical))
        has = f"this node has {len(physical)} GPUs"
        fix = f"{offer} ({has}{'; ' + why if why else ''})" if offer else f"{has}: {why}"
    return found("fail", problems[0], "\n".join([*problems, summary]), fix)


@check("busy")
def check_busy(launch: Launch) -> Check:
    visible, _ = launch.visible()
    if not visible:
        return ok("no visible GPU to check")
    busy: list[str] = []
    for g in visible:
        held = [a for a in launch.gpus.apps if a.gpu_uuid.lower() == g.uuid.lower()]
        if held or (g.memory_used or 0) > BUSY_MIB:
            who = ", ".join(f"pid {a.pid} {a.name}" for a in held) or "processes not visible here"
            busy.append(f"GPU {g.index}: {g.memory_used} MiB held by {who}")
    if not busy:
        return ok(f"{len(visible)} visible GPU(s), none busy")
    free = [g for g in visible if not any(s.startswith(f"GPU {g.index}:") for s in busy)]
    offer, why = _offer(launch, "busy", free) if free else (None, "")
    fix = "stop those processes" + (
        f", or leave their GPUs out: {offer}" + (f" ({why})" if why else "")
        if offer
        else (f" (leaving their GPUs out: {why})" if why else "")
    )
    return found(
        "fail", f"{len(busy)} of {len(visible)} visible GPUs are busy", "\n".join(busy), fix
    )


@check("gpu-memory")
def check_memory(launch: Launch) -> Check:
    visible, _ = launch.visible()
    sizes: dict[int | None, list[Gpu]] = {}
    for g in visible:
        sizes.setdefault(g.memory_total, []).append(g)
    kinds = ", ".join(f"{len(gs)} x {gs[0].name} ({size} MiB)" for size, gs in sizes.items())
    if len(sizes) <= 1:
        return ok(kinds or "no visible GPU")
    largest = max(sizes.items(), key=lambda kv: (len(kv[1]), kv[0] or 0))[1]
    offer, why = _offer(launch, "gpu-memory", largest)
    return found(
        "warn",
        f"mixed GPU memory: {kinds}",
        "verl gives every worker the same share: the smallest GPU runs out of memory first",
        f"use one kind: {offer}" + (f" ({why})" if why else "")
        if offer
        else f"use one kind of GPU ({why})",
    )


def nvlink_pairs(topo: str, indices: list[int]) -> tuple[int, int]:
    """(pairs joined by NVLink, pairs) among GPUs `indices` in `nvidia-smi topo -m` output."""
    rows: dict[int, list[str]] = {}
    for line in topo.splitlines():
        m = re.match(r"\s*GPU(\d+)\s+(.*)", line)
        if m:
            rows[int(m.group(1))] = m.group(2).split()
    linked = total = 0
    for i in indices:
        for j in indices:
            if i < j and i in rows and j < len(rows[i]):
                total += 1
                linked += rows[i][j].startswith("NV")
    return linked, total


@check("nvlink")
def check_nvlink(launch: Launch) -> Check:
    visible, _ = launch.visible()
    if launch.topo is None or not launch.topo.ok:
        why = launch.topo.why() if launch.topo else "nvidia-smi not found"
        return found("warn", f"no topology: nvidia-smi topo -m {why}", "", "check the driver")
    linked, total = nvlink_pairs(launch.topo.out, [g.index for g in visible])
    summary = f"NVLink joins {linked} of {total} pairs of visible GPUs"
    tp = launch.number(ROLLOUT + "tensor_model_parallel_size") or 1
    if total and 0 < linked < total and tp > 1:
        return found(
            "warn",
            summary + f"; tensor-parallel groups of {tp} may land on PCIe-only pairs",
            launch.topo.out.strip(),
            "choose GPUs that NVLink joins (CUDA_VISIBLE_DEVICES), or expect slower all-reduce",
        )
    return ok(summary if total else "fewer than two visible GPUs: nothing to link")


@check("ranks")
def check_ranks(launch: Launch) -> Check:
    env = launch.env
    visible, _ = launch.visible()
    count = len(visible) if launch.gpus.gpus else None
    if launch.launcher == "ray":
        inherited = ranks.ray_problems(env, count)
        if not inherited:
            return ok(ranks.ray_summary(env))
        set_here = [k for k in ranks.SHOWN if k in env]
        return found(
            "fail",
            f"{ranks.shown(env)} set where Ray starts: every worker that does not set its own "
            f"inherits them ({inherited[0]})",
            "\n".join(inherited),
            f"unset {' '.join(set_here)} before ray start (verl's workers are ranked by Ray, "
            "not by these variables)",
        )
    nnodes, per_node = launch.number(NNODES) or 1, launch.number(NGPUS) or 0
    rdzv = launch.rendezvous.with_env(env)
    problems = ranks.torchrun_launch_problems(
        env, count, nnodes, per_node, launch.nproc_per_node, NNODES, NGPUS, rdzv
    )
    if not problems:
        if rdzv.given:
            return ok(f"torchrun: {rdzv.shown()}: torchrun sets each process's ranks itself")
        return ok("torchrun: " + (ranks.shown(env) or "single node, no rank variables set"))
    texts = [text for text, _ in problems]
    fixes = list(dict.fromkeys(fix for _, fix in problems))
    return found("fail", texts[0], "\n".join(texts), "; ".join(fixes))


@check("ray-token")
def check_ray_token(launch: Launch) -> Check:
    if launch.launcher != "ray":
        return ok("not a Ray launch")
    nnodes = launch.number(NNODES) or 1
    status, summary, fix = ray_token_finding(launch.ray_token, launch.env, nnodes)
    return found(status, summary, "", fix) if status != "ok" else ok(summary)


@check("open-files")
def check_open_files(launch: Launch) -> Check:
    n = launch.open_files
    if n is None or n >= launch.min_open_files:
        return ok(f"ulimit -n {n if n is not None else 'unlimited'}")
    return found(
        "fail",
        f"ulimit -n {n} is below {launch.min_open_files}: Ray and NCCL run out ('Too many open files')",
        "",
        f"ulimit -n {launch.min_open_files} in the launch script (nofile in /etc/security/limits.conf "
        "if the hard limit is lower)",
    )


@check("offline")
def check_offline(launch: Launch) -> Check:
    unset = [k for k, v in OFFLINE.items() if launch.env.get(k) != v]
    if launch.env.get("WANDB_MODE") not in ("offline", "disabled"):
        unset.append("WANDB_MODE")
    if not unset:
        return ok("offline variables set")
    exports = " ".join(f"{k}={OFFLINE.get(k, 'offline')}" for k in unset)
    return found(
        "fail",
        f"not set for an air-gapped run: {', '.join(unset)}",
        "without them transformers, datasets and wandb try the network and wait for it",
        f"export {exports}",
    )


@check("batch")
def check_batch(launch: Launch) -> Check:
    n = launch.number
    per_node, nnodes = n(NGPUS) or 0, n(NNODES) or 1
    gpus = per_node * nnodes
    batch, rollout_n = n("data.train_batch_size") or 0, n(ROLLOUT + "n") or 1
    mini, micro = n(ACTOR + "ppo_mini_batch_size"), n(ACTOR + "ppo_micro_batch_size_per_gpu")
    tp, sp = (
        n(ROLLOUT + "tensor_model_parallel_size") or 1,
        n(ACTOR + "ulysses_sequence_parallel_size") or 1,
    )
    problems: list[tuple[str, str]] = []
    if gpus and (batch * rollout_n) % gpus:
        problems.append(
            (
                f"data.train_batch_size * rollout.n = {batch} * {rollout_n} = {batch * rollout_n} is "
                f"not divisible by the {gpus} GPUs ({NGPUS} x {NNODES})",
                f"choose data.train_batch_size a multiple of {gpus // (math.gcd(gpus, rollout_n) or 1)}",
            )
        )
    if mini is not None and batch < mini:
        problems.append(
            (
                f"data.train_batch_size {batch} is below {ACTOR}ppo_mini_batch_size {mini}",
                f"set {ACTOR}ppo_mini_batch_size={batch} or lower",
            )
        )
    if mini is not None and gpus:
        per_gpu = mini * rollout_n // max(1, gpus // sp)
        if per_gpu == 0:
            problems.append(
                (
                    f"ppo_mini_batch_size * rollout.n = {mini * rollout_n} gives no sample to each of "
                    f"{gpus // sp} data-parallel ranks",
                    f"raise {ACTOR}ppo_mini_batch_size to at least {max(1, gpus // sp // rollout_n)}",
                )
            )
        elif micro and per_gpu % micro:
            problems.append(
                (
                    f"ppo_mini_batch_size per GPU ({per_gpu}) is not divisible by "
                    f"ppo_micro_batch_size_per_gpu {micro}",
                    f"set {ACTOR}ppo_micro_batch_size_per_gpu to a divisor of {per_gpu}",
                )
            )
    if per_node and per_node % tp:
        problems.append(
            (
                f"{ROLLOUT}tensor_model_parallel_size {tp} does not divide {NGPUS}={per_node}",
                f"set {ROLLOUT}tensor_model_parallel_size to a divisor of {per_node}",
            )
        )
    summary = (
        f"train_batch_size {batch} x rollout.n {rollout_n} over {gpus} GPUs, mini batch {mini}, "
        f"tensor parallel {tp}"
    )
    if not problems:
        return ok(summary)
    return found(
        "fail",
        problems[0][0],
        "\n".join([p[0] for p in problems] + [summary]),
        "; ".join(p[1] for p in problems),
    )


@dataclass(frozen=True)
class Preflight:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def verdict(self) -> Verdict:
        return of_preflight(self.checks)


def examine(launch: Launch) -> Preflight:
    out = []
    for reg in registered():
        check_id = reg.id
        try:
            c = reg.fn(launch)
        except vc.ConfigError as exc:
            c = found("fail", str(exc), "", "give a whole number (or null) for that setting")
        out.append(Check(check_id, c.status, c.summary, c.detail, c.fix))
    return Preflight(out)


def run_preflight(
    overrides: list[str],
    config: str | None,
    env: Mapping[str, str],
    launcher: str = "ray",
    nproc_per_node: int | None = None,
    min_open_files: int = MIN_OPEN_FILES,
    rendezvous: ranks.Rendezvous = ranks.NO_RENDEZVOUS,
) -> Preflight:
    """Read verl's settings (ConfigError on a bad override or YAML), gather, check for this
    `launcher` ("ray" or "torchrun") and, under torchrun, its rendezvous flags."""
    values = vc.settings(overrides, config)
    return examine(gather(values, env, launcher, nproc_per_node, min_open_files, rendezvous))


def render_text(result: Preflight) -> str:
    return render.checks_text(result.checks, result.verdict.line)


def render_json(result: Preflight) -> dict[str, object]:
    return {"ok": result.ok, "checks": render.checks_json(result.checks)}
