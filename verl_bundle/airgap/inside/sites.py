"""Which of verl's entry points are where a dry-run recipe expects them, without importing verl:
run by the installed environment's python as `python -E -s -B sites.py` with a JSON list of
"module:Name" or "module:Class.method" on stdin; prints {"missing": [...]} (the sites not
found). A module is found by its file on sys.path, its names in its source (a def, a class, an
assignment, or an import, followed into the module it comes from); what cannot be read (a
compiled module, a namespace package, a name bound dynamically) counts as present: only what
is surely absent is reported. Imports nothing of verl-bundle; standard library only, 3.8+.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from typing import Iterable, Iterator

_DEPTH = 4  # imports followed: verl re-exports through a few __init__ modules at most


def locate(module: str) -> str | None:
    """The module's source file; "" when it exists but has no readable source; None when it
    is not on sys.path at all."""
    parts = module.split(".")
    for base in sys.path:
        if not base or not os.path.isdir(base):
            continue
        where = os.path.join(base, *parts)
        for candidate in (where + ".py", os.path.join(where, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
        folder = os.path.dirname(where)
        if os.path.isdir(where) or (
            os.path.isdir(folder) and any(n.startswith(parts[-1] + ".") for n in os.listdir(folder))
        ):
            return ""
    return None


def _tree(path: str) -> ast.Module | None:
    try:
        with open(path, "rb") as fh:
            return ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _source_of(module: str, path: str, imported: ast.ImportFrom) -> str:
    """The absolute module a `from X import` in `module` (at `path`) names."""
    if not imported.level:
        return imported.module or ""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for _ in range(imported.level - 1):
        package = package.rpartition(".")[0]
    return ".".join(p for p in (package, imported.module) if p)


def _statements(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, those under if/try/with included (not inside defs)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for inner in getattr(node, block, []):
                    inner_body = inner.body if isinstance(inner, ast.ExceptHandler) else [inner]
                    yield from _statements(inner_body)


def has(module: str, chain: list[str], depth: int = 0) -> bool:
    """True unless `module` surely lacks the dotted `chain` (["PPOTrainer", "fit"])."""
    path = locate(module)
    if path is None:
        return False
    chain = [c for c in chain if c != "__wrapped__"]  # a decorator's attribute
    if not chain or path == "" or depth > _DEPTH:
        return True
    tree = _tree(path)
    if tree is None:
        return True
    first, rest = chain[0], chain[1:]
    for node in _statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == first:
            return not rest
        if isinstance(node, ast.ClassDef) and node.name == first:
            return not rest or _in_class(node, rest[0])
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == first for t in targets):
                return True  # bound to a value: what it holds is not read here
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return True
                if (alias.asname or alias.name) != first:
                    continue
                source = _source_of(module, path, node)
                submodule = f"{source}.{alias.name}"
                if locate(submodule) is not None:  # `from pkg import module`
                    return has(submodule, rest, depth + 1)
                return has(source, [alias.name, *rest], depth + 1)
        if isinstance(node, ast.Import) and any(
            (a.asname or a.name.split(".")[0]) == first for a in node.names
        ):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
            return True  # a module that makes its names on demand
    return False


def _in_class(node: ast.ClassDef, name: str) -> bool:
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
            return True
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in item.targets
        ):
            return True
    # Inherited: only a class with no bases but object surely lacks it.
    return any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases)


def missing(sites: list[str]) -> list[str]:
    out: list[str] = []
    for site in sites:
        module, _, qual = site.partition(":")
        if not has(module, qual.split(".") if qual else []):
            out.append(site)
    return out


if __name__ == "__main__":
    print(json.dumps({"missing": missing(json.loads(sys.stdin.read()))}))
