"""CUDA_VISIBLE_DEVICES and the torchrun/verl variables, read against the GPUs nvidia-smi lists
(pure logic: no probe here)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

TORCHRUN_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
# torch.distributed's env:// start reads these four together: a rank or world size without the
# others is a launch that hangs or fails at init_process_group. (MASTER_ADDR and MASTER_PORT
# alone are defaults for a later torchrun, which sets the rest itself.)
ENV_INIT = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    memory_total: int | None  # MiB
    memory_used: int | None
    driver: str
    name: str


def _pick(token: str, gpus: Sequence[Gpu], problems: list[str]) -> tuple[str, list[Gpu]] | None:
    """The key and GPUs one CUDA_VISIBLE_DEVICES entry names; None stops the list there."""
    if re.fullmatch(r"\d+", token):
        index = int(token)
        match = [g for g in gpus if g.index == index]
        if gpus and not match:
            problems.append(
                f"GPU {index} does not exist: this server has {len(gpus)} (0-{len(gpus) - 1})"
            )
        return f"#{index}", match
    if re.fullmatch(r"GPU-[0-9A-Fa-f-]+", token):
        match = [g for g in gpus if g.uuid.lower().startswith(token.lower())]
        if gpus and not match:
            problems.append(f"no GPU has UUID {token}")
        elif len(match) > 1:
            problems.append(f"{token} names several GPUs: give more of the UUID")
            match = []
        return token.lower(), match
    if token.startswith("MIG-"):
        return token, []
    problems.append(
        f"{token!r} is neither a GPU index nor a GPU UUID (GPU-...); CUDA ignores it "
        "and every entry after it"
    )
    return None


def visible_devices(value: str | None, gpus: Sequence[Gpu]) -> tuple[list[Gpu], list[str]]:
    """The GPUs CUDA_VISIBLE_DEVICES=`value` selects, in CUDA's order, and what is wrong with it.
    With no GPU list (`gpus` empty) only its form is checked."""
    if value is None:
        return list(gpus), []
    if not value.strip():
        return [], ["CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible"]
    chosen: list[Gpu] = []
    problems: list[str] = []
    seen: set[str] = set()
    for token in (t.strip() for t in value.split(",")):
        picked = _pick(token, gpus, problems)
        if picked is None:
            break
        key, match = picked
        if match:
            key = match[0].uuid.lower()
        if key in seen:
            label = f"GPU {token}" if token.isdigit() else token
            problems.append(f"{label} is listed twice")
            continue
        seen.add(key)
        chosen += match
    return chosen, problems


def torchrun_findings(env: Mapping[str, str], visible: int | None) -> list[tuple[str, str]]:
    """Inconsistencies among the torchrun/verl variables that are set, each with its kind (what
    a fix answers: "partial", "number", "zero", "rank", "local-rank", "local-world", "visible",
    "local-visible", "port", "addr"); `visible` is the number of GPUs this process would see
    (None when unknown)."""
    problems: list[tuple[str, str]] = []
    given = [k for k in ENV_INIT if k in env]
    if ("RANK" in env or "WORLD_SIZE" in env) and len(given) < len(ENV_INIT):
        unset = [k for k in ENV_INIT if k not in env]
        problems.append(
            (
                f"{', '.join(given)} set but {', '.join(unset)} not: torch.distributed reads "
                f"{', '.join(ENV_INIT)} together",
                "partial",
            )
        )
    nums: dict[str, int] = {}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        if name in env:
            text = env[name].strip()
            if not re.fullmatch(r"\d+", text):
                problems.append((f"{name}={env[name]!r} is not a whole number", "number"))
            else:
                nums[name] = int(text)
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        if nums.get(name) == 0:
            problems.append((f"{name}=0: there must be at least one process", "zero"))
    rank, world = nums.get("RANK"), nums.get("WORLD_SIZE")
    local, local_world = nums.get("LOCAL_RANK"), nums.get("LOCAL_WORLD_SIZE")
    if rank is not None and world and rank >= world:
        problems.append((f"RANK={rank} is not below WORLD_SIZE={world}", "rank"))
    if local is not None and local_world and local >= local_world:
        problems.append(
            (f"LOCAL_RANK={local} is not below LOCAL_WORLD_SIZE={local_world}", "local-rank")
        )
    if local_world and world and local_world > world:
        problems.append(
            (f"LOCAL_WORLD_SIZE={local_world} is above WORLD_SIZE={world}", "local-world")
        )
    if visible is not None:
        if local is not None and local >= visible:
            problems.append(
                (
                    f"LOCAL_RANK={local}, but only {visible} GPU(s) are visible: cuda:{local} "
                    "does not exist",
                    "visible",
                )
            )
        if local_world and local_world > visible:
            problems.append(
                (
                    f"LOCAL_WORLD_SIZE={local_world} processes, but only {visible} GPU(s) are "
                    "visible",
                    "local-visible",
                )
            )
    if "MASTER_PORT" in env:
        port = env["MASTER_PORT"].strip()
        if not (port.isdigit() and 1 <= int(port) <= 65535):
            problems.append((f"MASTER_PORT={env['MASTER_PORT']!r} is not a port (1-65535)", "port"))
    if "MASTER_ADDR" in env and not env["MASTER_ADDR"].strip():
        problems.append(("MASTER_ADDR is set but empty", "addr"))
    return problems


def torchrun_problems(env: Mapping[str, str], visible: int | None) -> list[str]:
    """Inconsistencies among the torchrun/verl variables that are set, as lines."""
    return [text for text, _ in torchrun_findings(env, visible)]
