"""The trainer dry run's step markers: installed in every process of the run as sitecustomize.

dryrun.py copies this file as `sitecustomize.py` into the run's private directory and puts that
directory on PYTHONPATH, so the entry wrapper and every Ray worker it starts (they inherit the
environment) import it at start-up. When VERL_BUNDLE_DRYRUN_EVENTS names a file, it wraps the
call sites VERL_BUNDLE_DRYRUN_SITES lists ({step: ["module:Class.method" | "module:function"]},
from dryrun.json) right after their module is loaded, before anything imports the name from
it, and appends one JSON line per start, end and error of each call: how far the trainer got
comes from these events, never from verl's log text. VERL_BUNDLE_DRYRUN_BOUNDARY names verl's
own GPU-count check: the GPU boundary is recognised where that function refuses the GPUs
(at_boundary), never by the words of an error. The entry uses `watch` for its own wrappers
after the boundary (dryrun_workers.py). Standard library only; it imports nothing of
verl_bundle, and nothing at all when the variables are unset.
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
BOUNDARY = "VERL_BUNDLE_DRYRUN_BOUNDARY"
TAG = "verl_bundle_boundary"  # set on verl's GPU refusal, survives Ray's pickling


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


def boundary_of(exc: BaseException | None) -> dict[str, Any] | None:
    """The boundary tag `at_boundary` put on verl's own GPU refusal: on the exception itself,
    or on the one a Ray error carries across processes as `cause` (the task's own exception,
    unpickled with its attributes). Never on an exception verl raised in response to it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tag = getattr(exc, TAG, None)
        if isinstance(tag, dict):
            return tag
        inner = getattr(exc, "cause", None)
        exc = inner if isinstance(inner, BaseException) else None
    return None


def marked(path: str, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, writing a start event, then done (with its size where it has one) or error. An
    error that is verl's GPU refusal passing through (tagged at its site) says so."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        emit(path, step, "start", site=getattr(fn, "__qualname__", str(fn)))
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            extra = {"boundary": True} if boundary_of(exc) is not None else {}
            seconds = time.monotonic() - started
            emit(path, step, "error", seconds=seconds, **error_fields(exc), **extra)
            raise
        extra = _size(result, args) if step == "dataset" else {}
        emit(path, step, "done", seconds=time.monotonic() - started, **extra)
        return result

    call.__verl_bundle_marked__ = True  # type: ignore[attr-defined]
    return call


def _unwrapped(fn: Any) -> Any:
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _innermost(exc: BaseException) -> Any:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _is_a(exc: BaseException, name: str) -> bool:
    return any(c.__name__ == name for c in type(exc).__mro__)


def _count(value: Any) -> bool:
    """A GPU count as verl sums it (Ray reports resources as numbers, 0 or 0.0)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def callers(frame: Any, limit: int = 12) -> list[str]:
    """The call chain above `frame`, innermost first, as `file:function:line`."""
    out: list[str] = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        out.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return out


def at_boundary(path: str, spec: dict[str, Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, verl's own GPU-count check (dryrun.json's `boundary.site` for the release): when
    an exception of the recorded type leaves it, raised by this very function (its innermost
    frame is `fn`'s own, not a callee's) and verl's own locals say fewer GPUs are available
    than required, that is the GPU boundary. Then one `boundary` event (where, the call chain,
    the counts, what verl's trainer had decided: `capture`), and the exception is tagged, so
    every wrapper it passes through, and the entry where Ray raises it again, know it by
    structure. Any other exception, whatever its text, passes through untouched."""
    own = _unwrapped(fn).__code__
    names = dict(spec.get("locals") or {})

    @functools.wraps(fn)
    def check(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            tb = _innermost(exc)
            if tb is None or tb.tb_frame.f_code is not own:
                raise
            if not _is_a(exc, str(spec.get("exception") or "ValueError")):
                raise
            found = {k: tb.tb_frame.f_locals.get(v) for k, v in names.items()}
            have: Any = found.get("available")
            need: Any = found.get("required")
            if not (_count(have) and _count(need) and have < need):
                raise
            tag = {"site": spec["site"], "at": f"{own.co_filename}:{tb.tb_lineno}"}
            with contextlib.suppress(Exception):
                setattr(exc, TAG, tag)
            here = sys._getframe(1)
            took = capture(here, spec)
            emit(
                path,
                spec.get("step", "workers"),
                "boundary",
                **tag,
                **found,
                **took,
                callers=callers(here),
            )
            raise

    check.__verl_bundle_marked__ = True  # type: ignore[attr-defined]
    return check


def capture(frame: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """What verl's trainer had decided when it was refused the GPUs, read from the trainer
    object on the call chain (the first `self` with a `role_worker_mapping`): the class of each
    role, the flags the recipe names (use_critic, use_reference_policy) and its config (saved
    with OmegaConf as verl holds it), written to `spec['capture']` for the entry, which
    constructs the same workers after the boundary. The event says whether it was found."""
    where = spec.get("capture")
    if not where:
        return {}
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            if hasattr(owner, "role_worker_mapping") and hasattr(owner, "config"):
                break
            frame = frame.f_back
        else:
            return {"captured": False, "capture_error": "no trainer on the call chain"}
        from omegaconf import OmegaConf

        config = f"{where}.yaml"
        OmegaConf.save(owner.config, config)
        roles = {
            str(getattr(role, "name", role)): _class_path(cls)
            for role, cls in owner.role_worker_mapping.items()
        }
        flags = {n: bool(getattr(owner, n)) for n in spec.get("flags", ()) if hasattr(owner, n)}
        doc = {"roles": roles, "flags": flags, "config": config, "trainer": _class_path(owner)}
        with open(where + ".part", "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(where + ".part", where)
    except Exception as exc:  # a marker must never change what verl raises
        return {"captured": False, "capture_error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"captured": True, "roles": sorted(roles)}


def _class_path(thing: Any) -> str:
    """`module:Qualname` of a class, of the class Ray wraps (ray.remote(cls) keeps the
    original as `__ray_actor_class__`), or of an object's class."""
    cls = getattr(thing, "__ray_actor_class__", thing)
    if not isinstance(cls, type):
        cls = type(cls)
    return f"{cls.__module__}:{cls.__qualname__}"


Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def patch(module: Any, target: str, wrap: Wrap) -> bool:
    """Replace `target` ("func" or "Class.method") in `module` by `wrap(it)`; a classmethod or
    staticmethod stays one. False when it is not there (True when it was wrapped already)."""
    owner: Any = module
    *parents, name = target.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return False
    raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    fn = raw.__func__ if kind is not None else raw  # type: ignore[union-attr]
    if fn is None or not callable(fn):
        return False
    if getattr(fn, "__verl_bundle_marked__", False):
        return True  # wrapped already
    wrapped = wrap(fn)
    setattr(owner, name, kind(wrapped) if kind is not None else wrapped)
    return True


def _after_exec(loader: Any, module_name: str) -> None:
    """Make `loader` (this module's own instance) wrap the module's sites right after it runs.
    The loader itself stays the real one: importlib.resources, get_filename and the like keep
    working (transfer_queue reads its config.yaml through importlib.resources.files)."""
    real = loader.exec_module

    def exec_module(module: Any) -> None:
        real(module)
        for target, wrap in _WATCHED.get(module_name, ()):
            _apply(module, target, wrap)

    loader.exec_module = exec_module


class _Finder(importlib.abc.MetaPathFinder):
    """One finder for every watched module (two finders for one module shadow each other)."""

    def find_spec(self, name: str, import_path: Any, target: Any = None) -> Any:
        if name not in _WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, import_path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        _after_exec(spec.loader, name)
        return spec


# module -> [(target, wrap)]: what the one finder wraps as each module loads.
_WATCHED: dict[str, list[tuple[str, Wrap]]] = {}


def _apply(module: Any, target: str, wrap: Wrap) -> None:
    """patch(), and where the module has no such site, the wrapper's `missing` said (the
    boundary's: this verl release does not have the function dryrun.json names)."""
    if not patch(module, target, wrap):
        missing = getattr(wrap, "missing", None)
        if callable(missing):
            missing()


def watch(module: str, target: str, wrap: Wrap) -> None:
    """Wrap `target` of `module` now if it is loaded, else right after it loads."""
    _WATCHED.setdefault(module, []).append((target, wrap))
    if module in sys.modules:
        _apply(sys.modules[module], target, wrap)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def install(environ: Any = os.environ) -> bool:
    """Wrap the listed sites in this process; False (and nothing changed) when not a dry run.
    The step sites are marked; the boundary site (VERL_BUNDLE_DRYRUN_BOUNDARY) is watched
    for verl's own GPU refusal."""
    path, raw = environ.get(EVENTS), environ.get(SITES)
    if not path or not raw:
        return False
    for step, places in json.loads(raw).items():
        for place in places:
            module, _, target = place.partition(":")
            watch(module, target, functools.partial(marked, path, step))
    bound = environ.get(BOUNDARY)
    if bound:
        spec = json.loads(bound)
        module, _, target = str(spec["site"]).partition(":")
        wrap: Any = functools.partial(at_boundary, path, spec)
        step = str(spec.get("step", "workers"))
        wrap.missing = functools.partial(emit, path, step, "unwatched", site=spec["site"])
        watch(module, target, wrap)
    return True


with contextlib.suppress(Exception):  # a marker must never stop the trainer it watches
    install()
