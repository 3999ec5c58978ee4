"""verl's trainer settings as a user gives them, without Hydra: command-line overrides exactly as
verl takes them (`trainer.n_gpus_per_node=8`, `+key=v`, `++key=v`, `~key`, `key='[1,2]'`) over
an optional YAML file, over verl's defaults for the few keys preflight reads.

The YAML reader is a deliberately tiny subset (stdlib has none): nested maps of scalars by
indentation, `#` comments, quoted or plain scalars. Lists and flow maps are kept as their text;
anchors, multi-line strings and `defaults:` composition are not understood (a Hydra config that
needs them: pass the values that matter as overrides). Standard library only, Python 3.8+."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from verl_bundle.airgap.errors import UsageError

# verl's defaults for the keys preflight checks, as verl/trainer/config/ppo_trainer.yaml has them
# at tag v0.3.0.post1 (the cu118/cu121 profiles' verl); unchanged at v0.4.1, v0.5.0, v0.6.1,
# v0.7.0 and main of 2026-01-29 (0.8.0.dev, _generated_ppo_trainer.yaml). v0.9.1 (cu130) was not
# in the mirror checked; nothing in these keys moved between 0.3 and 0.8.
DEFAULTS = {
    "trainer.n_gpus_per_node": "8",
    "trainer.nnodes": "1",
    "data.train_batch_size": "1024",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "1",
    "actor_rollout_ref.rollout.n": "1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
}
_KEY = re.compile(r"[A-Za-z_][\w.\-]*")


class ConfigError(UsageError, ValueError):
    """An override or YAML line that cannot be read: one line, naming it."""


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _uncomment(line: str) -> str:
    """`line` without a trailing `# comment` (a # inside quotes stays)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def read_yaml(path: str) -> dict[str, str]:
    """A YAML file of nested maps, flattened to {"trainer.nnodes": "2"}."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the open maps
    for number, raw in enumerate(text.splitlines(), 1):
        line = _uncomment(raw).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if body.startswith("- "):
            continue  # an item of a list: kept as the list's text is not possible here, skipped
        key, sep, value = body.partition(":")
        if not sep or not _KEY.fullmatch(key.strip()):
            raise ConfigError(
                f"--config {path} line {number}: {body!r} is not `key: value` (this reader takes "
                "nested maps of scalars; pass other settings as overrides)"
            )
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key.strip()])
        if value.strip():
            out[dotted] = _scalar(value)
        else:
            stack.append((indent, key.strip()))
    return out


def apply_overrides(config: dict[str, str], overrides: Iterable[str]) -> dict[str, str]:
    """`config` with verl's command-line overrides applied (a new dict)."""
    out = dict(config)
    for item in overrides:
        if item.startswith("~"):
            out.pop(item[1:].split("=", 1)[0], None)
            continue
        key, sep, value = item.lstrip("+").partition("=")
        if not sep or not _KEY.fullmatch(key):
            raise ConfigError(f"{item!r} is not a verl override (key=value, +key=value or ~key)")
        out[key] = _scalar(value)
    return out


def settings(overrides: Iterable[str], config: str | None = None) -> dict[str, str]:
    """verl's defaults, then the YAML file, then the overrides."""
    base = {**DEFAULTS, **(read_yaml(config) if config else {})}
    return apply_overrides(base, overrides)


def integer(values: dict[str, str], key: str) -> int | None:
    """The setting as a whole number; None when unset or null. ConfigError when not a number."""
    text = values.get(key, "").strip()
    if text in ("", "null", "None", "~"):
        return None
    if not re.fullmatch(r"-?\d+", text):
        raise ConfigError(f"{key}={text!r} is not a whole number")
    return int(text)
