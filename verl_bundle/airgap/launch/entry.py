"""Which `python -m MODULE` starts verl's trainer, so that the Ray sbatch preflights it and
gives it the job's trainer.nnodes and trainer.n_gpus_per_node: verl's own (`verl.trainer.*`),
and every module whose Hydra config composes verl's trainer config, as verl's recipes do
(`recipe.dapo.main_dapo`: `@hydra.main(config_path="config", config_name="dapo_trainer")`, and
dapo_trainer.yaml's `defaults:` list `ppo_trainer`).

Found without importing anything: the module is looked up on the interpreter's sys.path (the
current directory first, as `python -m` has it), its source is parsed for the `hydra.main`
decorator, and its YAML is read for one of verl's trainer configs among its defaults (the names
of the YAML files under the installed verl/trainer/config, or verl's known ones), or for a
`trainer:` map holding `nnodes:`, following defaults that name files of its own directory.
Standard library only, Python 3.8+."""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass
from typing import Sequence

# verl's trainer configs (verl/trainer/config at 0.3-0.9); those found installed are added.
TRAINER_CONFIGS = ("ppo_trainer", "ppo_megatron_trainer", "_generated_ppo_trainer")
MAX_SOURCE = 4 << 20
MAX_DEPTH = 8  # defaults followed within a recipe's own config directory
_DEFAULT_ITEM = re.compile(r"^\s*-\s*(?:override\s+)?([A-Za-z0-9_./-]+)")
_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


@dataclass(frozen=True)
class Entry:
    """A module and whether it starts verl's trainer, with the file and line that say so."""

    module: str
    trainer: bool
    why: str


def find_module(name: str, path: Sequence[str]) -> str | None:
    """The file `python -m name` would run (a module, or a package's __main__.py), looked up
    on `path` without importing its packages; None when it is not there."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    for entry in path:
        base = os.path.join(entry or os.curdir, *parts)
        for candidate in (base + ".py", os.path.join(base, "__main__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def hydra_config(source: str) -> tuple[str, str] | None:
    """(config_path, config_name) of the `@hydra.main(...)` decorator in `source`, or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if not isinstance(deco, ast.Call):
                continue
            func = deco.func
            named = (isinstance(func, ast.Attribute) and func.attr == "main") or (
                isinstance(func, ast.Name) and func.id == "main"
            )
            if not named:
                continue
            words = {k.arg: _literal(k.value) for k in deco.keywords if k.arg}
            if words.get("config_name"):
                return words.get("config_path") or ".", str(words["config_name"])
    return None


def installed_trainer_configs(path: Sequence[str]) -> set[str]:
    """The names of verl's trainer configs where verl is installed on `path`."""
    names = set(TRAINER_CONFIGS)
    for entry in path:
        where = os.path.join(entry or os.curdir, "verl", "trainer", "config")
        try:
            names.update(f[: -len(".yaml")] for f in os.listdir(where) if f.endswith(".yaml"))
        except OSError:
            continue
        break
    return names


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(MAX_SOURCE)
    except OSError:
        return None


def _defaults_and_trainer(text: str) -> tuple[list[str], bool]:
    """(the names a config's top-level `defaults:` list, whether a top-level `trainer:` map
    holds `nnodes:`)."""
    defaults: list[str] = []
    section = ""
    nnodes = False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        top = _TOP_KEY.match(line)
        if top:
            section = top.group(1)
            continue
        if section == "defaults":
            m = _DEFAULT_ITEM.match(line)
            if m:
                defaults.append(m.group(1).split("@")[0].split(":")[0])
        elif section == "trainer" and re.match(r"^\s+nnodes\s*:", line):
            nnodes = True
    return defaults, nnodes


def composes(config: str, trainer_names: set[str], depth: int = 0) -> str | None:
    """Why the config file `config` composes verl's trainer config, or None."""
    text = _read(config)
    if text is None or depth > MAX_DEPTH:
        return None
    defaults, nnodes = _defaults_and_trainer(text)
    if nnodes:
        return f"{config}: its trainer: holds nnodes"
    for name in defaults:
        if os.path.basename(name) in trainer_names:
            return f"{config}: its defaults list {name}, verl's trainer config"
        own = os.path.join(os.path.dirname(config), name + ".yaml")
        if os.path.isfile(own):
            found = composes(own, trainer_names, depth + 1)
            if found:
                return found
    return None


def examine(module: str, path: Sequence[str] | None = None) -> Entry:
    """Whether `python -m module` (on `path`, default this interpreter's) starts verl's
    trainer."""
    if module.startswith("verl.trainer."):
        return Entry(module, True, f"{module}: verl's own trainer")
    search = list(sys.path if path is None else path)
    found = find_module(module, search)
    if found is None:
        return Entry(module, False, f"{module}: not found on this python's path")
    source = _read(found) or ""
    config = hydra_config(source)
    if config is None:
        return Entry(module, False, f"{found}: no @hydra.main(config_name=...): not verl's trainer")
    where = os.path.join(os.path.dirname(found), config[0], config[1] + ".yaml")
    why = composes(os.path.normpath(where), installed_trainer_configs(search))
    if why is None:
        return Entry(module, False, f"{where}: does not compose verl's trainer config")
    return Entry(module, True, why)
