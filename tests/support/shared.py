"""Results built once per test run and shared by every pytest-xdist worker: the test stack's
wheels, the built bundles, the bundled CPython. The first worker to need one builds it under a
file lock in a directory all workers of the run see; the others wait on the lock and reuse it.
A shared result is read-only: a test that changes one works on a copy."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# The value a builder returns, kept beside its directory as JSON (what the fixture hands on).
Value = dict[str, object] | list[object] | str | None


def run_root(factory: pytest.TempPathFactory) -> Path:
    """The directory every worker of this run shares: under xdist, the parent of a worker's
    base directory (pytest's base directory of the run, removed whole after a green run); in a
    run without workers, the base directory itself (its parent holds other runs)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Value]) -> Value:
    """`build(directory)`'s value, built by the first worker of this run that asks and read from
    disk by the others (`once_in` the run's `shared/`)."""
    return once_in(run_root(factory) / "shared", name, build)


def once_in(root: Path, name: str, build: Callable[[Path], Value]) -> Value:
    """`build(root/name)`'s value, built by the first process that asks; the others block on
    the lock while it builds, then read it. The value is recorded only when the build returns,
    so a directory without it (a worker killed while building, a build that raised) is removed
    and built again by the next process that asks."""
    root.mkdir(exist_ok=True)
    where, value = root / name, root / f"{name}.json"
    with (root / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if value.exists():
            done: Value = json.loads(value.read_text())
            return done
        if where.exists():
            shutil.rmtree(where)
        where.mkdir()
        built = build(where)
        partial = value.with_name(value.name + ".part")
        partial.write_text(json.dumps(built))
        os.replace(partial, value)
        # The builder gets what the others get: the value as read back from its JSON.
        same: Value = json.loads(value.read_text())
        return same
