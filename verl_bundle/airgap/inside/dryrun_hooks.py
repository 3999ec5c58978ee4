"""The trainer dry run's step markers: installed in every process of the run as sitecustomize.

dryrun.py copies this file as `sitecustomize.py` into the run's private directory and puts that
directory on PYTHONPATH, so the entry wrapper and every Ray worker it starts (they inherit the
environment) import it at start-up. When VERL_BUNDLE_DRYRUN_EVENTS names a file, it wraps the
call sites VERL_BUNDLE_DRYRUN_SITES lists ({step: ["module:Class.method" | "module:function"]},
from dryrun.json) right after their module is loaded, before anything imports the name from
it, and appends one JSON line per start, end and error of each call: how far the trainer got
comes from these events, never from verl's log text. Standard library only; it imports nothing
of verl_bundle, and nothing at all when the variables are unset.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import time
import traceback
from typing import Any, Callable, Sequence

EVENTS = "VERL_BUNDLE_DRYRUN_EVENTS"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SITES = "VERL_BUNDLE_DRYRUN_SITES"


def emit(path: str, step: str, event: str, **fields: Any) -> None:
    """Append one event (one short write on an O_APPEND file: lines from many processes never
    interleave)."""
    doc = {"step": step, "event": event, "pid": os.getpid(), "t": time.time(), **fields}
    line = (json.dumps(doc, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The exception's type, first line and where it was raised (file:line); for an error
    that wraps another one (Ray's RayTaskError carries the task's own as `cause`), the inner
    one's, with the wrapper's type beside it."""
    inner = getattr(exc, "cause", None)
    if isinstance(inner, BaseException) and inner is not exc:
        return {**error_fields(inner), "via": type(exc).__name__}
    frames = traceback.extract_tb(exc.__traceback__)
    text = ANSI.sub("", str(exc)).strip() or type(exc).__name__  # Ray colours its errors
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:  # "Error in call to target 'X':" then the why
        line = f"{line} {lines[1]}"
    cause = exc.__cause__ or exc.__context__
    out = {
        "type": type(exc).__name__,
        "error": line[:2000],
        "at": f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "",
    }
    if cause is not None and str(cause).strip():
        out["cause"] = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0]}"[:2000]
    return out


def _size(result: Any, args: Sequence[Any]) -> dict[str, Any]:
    """Rows of a dataset: the constructed object (`self` of an __init__) or the result."""
    for thing in (*args[:1], result):
        try:
            return {"rows": len(thing)}
        except Exception:  # noqa: S112 - not sized: try the next candidate
            continue
    return {}


def marked(path: str, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, writing a start event, then done (with its size where it has one) or error."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        emit(path, step, "start", site=getattr(fn, "__qualname__", str(fn)))
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            emit(path, step, "error", seconds=time.monotonic() - started, **error_fields(exc))
            raise
        extra = _size(result, args) if step == "dataset" else {}
        emit(path, step, "done", seconds=time.monotonic() - started, **extra)
        return result

    call.__verl_bundle_marked__ = True  # type: ignore[attr-defined]
    return call


def patch(module: Any, target: str, path: str, step: str) -> bool:
    """Wrap `target` ("func" or "Class.method") in `module`; False when it is not there."""
    owner: Any = module
    *parents, name = target.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return False
    fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if fn is None or getattr(fn, "__verl_bundle_marked__", False) or not callable(fn):
        return False
    setattr(owner, name, marked(path, step, fn))
    return True


def _after_exec(loader: Any, targets: list[tuple[str, str]], path: str) -> None:
    """Make `loader` (this module's own instance) wrap the module's sites right after it runs.
    The loader itself stays the real one: importlib.resources, get_filename and the like keep
    working (transfer_queue reads its config.yaml through importlib.resources.files)."""
    real = loader.exec_module

    def exec_module(module: Any) -> None:
        real(module)
        for target, step in targets:
            patch(module, target, path, step)

    loader.exec_module = exec_module


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, sites: dict[str, list[tuple[str, str]]], path: str) -> None:
        self.sites, self.path = sites, path

    def find_spec(self, name: str, import_path: Any, target: Any = None) -> Any:
        if name not in self.sites:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, import_path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        _after_exec(spec.loader, self.sites[name], self.path)
        return spec


def install(environ: Any = os.environ) -> bool:
    """Wrap the listed sites in this process; False (and nothing changed) when not a dry run."""
    path, raw = environ.get(EVENTS), environ.get(SITES)
    if not path or not raw:
        return False
    sites: dict[str, list[tuple[str, str]]] = {}
    for step, places in json.loads(raw).items():
        for place in places:
            module, _, target = place.partition(":")
            sites.setdefault(module, []).append((target, step))
    for module, targets in sites.items():  # already loaded (unlikely at start-up): now
        if module in sys.modules:
            for target, step in targets:
                patch(sys.modules[module], target, path, step)
    sys.meta_path.insert(0, _Finder(sites, path))
    return True


with contextlib.suppress(Exception):  # a marker must never stop the trainer it watches
    install()
