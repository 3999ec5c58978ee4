"""After the GPU boundary: verl's own worker classes, constructed in the entry process the way
verl's Ray workers construct them, and their init_model run as far as a CPU allows.

dryrun_entry.py calls `run_workers` when verl's trainer stopped at its own GPU refusal. There
dryrun_hooks.at_boundary saved what the trainer had decided: each role's class, the flags the
recipe names (use_critic, use_reference_policy) and the config as verl held it. This module
builds the roles the release's recipe lists (dryrun.json `workers`) from exactly that, in verl's
order, as the one process of a one-GPU job would (RANK 0 of WORLD_SIZE 1, gloo):
  worker-init   each class's __init__: verl's own config checks (the role, batch sizes and
                micro-batches normalised and asserted) run here
  worker-model  each worker's init_model (0.9's critic: reset) up to the first recorded
                GPU-only call (`stops`: CUDA initialisation, FSDP1 wrapping, the vLLM engine);
                there it is stopped, and the point (site, verl's calling line) recorded
  worker-imports  every module init_model imports on its way (`imports`, measured at the
                release's call sites), past the stop too: a broken rollout or sharding
                manager is found here, not on the GPU node
A few questions verl asks the GPU on the way have recorded answers (`answers`), each said in
the events when it is used. Every error is told apart by where it was raised: in verl or what
it calls (a finding about this environment), or in this harness (the recipe does not fit this
release: never a finding, always "not proven"). Standard library only at import; verl, torch
and omegaconf are the environment's own, imported when the steps run.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import linecache
import os
import socket
import sys
import time
from typing import Any, Callable

from dryrun_hooks import emit, error_fields, watch

HERE = os.path.dirname(os.path.abspath(__file__))
INIT, MODEL, IMPORTS = "worker-init", "worker-model", "worker-imports"
# transformers' own words when flash-attn is installed but no GPU is visible (4.49: "Flash
# Attention 2 is not available on CPU"; 5.x: "FlashAttention2 is not available on CPU").
NOT_ON_CPU = "is not available on CPU"


class GPUStop(BaseException):
    """Raised at a recorded GPU-only call (dryrun.json `stops`): verl got this far on the CPU.
    A BaseException, so verl's own `except Exception` handlers let it through."""

    def __init__(self, stop: dict[str, Any], caller: str, line: str) -> None:
        super().__init__(f"{stop['what']} needs a GPU ({stop['site']}, called from {caller})")
        self.stop, self.caller, self.line = stop, caller, line


class HarnessError(Exception):
    """The recipe does not fit what verl's trainer decided (a role it does not know, a flag
    the capture lacks): raised here, so it is the harness's."""


class Run:
    """The events file, the step in progress, and verl's package directory (for callers)."""

    def __init__(self, events: str) -> None:
        self.events, self.step = events, INIT
        verl = sys.modules.get("verl")
        root = os.path.dirname(os.path.abspath(getattr(verl, "__file__", None) or HERE))
        self.verl_root = root + os.sep
        self.said: set[tuple[str, str]] = set()

    def emit(self, event: str, **fields: Any) -> None:
        emit(self.events, self.step, event, **fields)

    def answered(self, answer: str, frame: Any) -> None:
        """Say (once per step) that a recorded answer was used, and where verl asked."""
        if (self.step, answer) in self.said:
            return
        self.said.add((self.step, answer))
        caller, line = self.caller(frame)
        self.emit("answered", answer=answer, caller=caller, line=line)

    def caller(self, frame: Any) -> tuple[str, str]:
        """verl's innermost frame at or above `frame`: `verl/...py:LINE in function` and the
        line's text."""
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.verl_root):
                where = "verl/" + name[len(self.verl_root) :]
                text = linecache.getline(name, frame.f_lineno).strip()
                return f"{where}:{frame.f_lineno} in {frame.f_code.co_name}", text[:200]
            frame = frame.f_back
        return "", ""

    def raised_in(self, exc: BaseException) -> tuple[bool, str]:
        """(raised in this harness, verl's innermost frame in the traceback)."""
        tb, frames = exc.__traceback__, []
        while tb is not None:
            frames.append(tb)
            tb = tb.tb_next
        real = [t for t in frames if not t.tb_frame.f_code.co_filename.startswith("<")]
        ours = not real or os.path.dirname(real[-1].tb_frame.f_code.co_filename) == HERE
        in_verl = [t for t in frames if t.tb_frame.f_code.co_filename.startswith(self.verl_root)]
        where = ""
        if in_verl:
            t = in_verl[-1]
            rel = t.tb_frame.f_code.co_filename[len(self.verl_root) :]
            where = f"verl/{rel}:{t.tb_lineno} in {t.tb_frame.f_code.co_name}"
        return ours, where


# -- recorded answers (dryrun.json `answers`): what verl asks a GPU, answered on a CPU ----------


def _answer_cuda_device_name(run: Run) -> None:
    """verl 0.3's Worker.__init__ asks torch.cuda.get_device_name() only to test for "AMD"
    (single_controller/base/worker.py:129): answered "" (not AMD), which changes nothing else."""
    import torch

    def get_device_name(device: Any = None) -> str:
        run.answered("cuda-device-name", sys._getframe(1))
        return ""

    torch.cuda.get_device_name = get_device_name


def _answer_cpu_memory(run: Run) -> None:
    """verl 0.4's GPU-memory logging asks the device module for its counters
    (utils/debug/performance.py: get_torch_device() is torch.cpu here, which has none):
    answered 0, for logging only."""
    import torch

    cpu = getattr(torch, "cpu", None)
    if cpu is None:  # no device module to ask: nothing to answer
        return
    values: dict[str, Any] = {
        "memory_allocated": 0,
        "memory_reserved": 0,
        "max_memory_allocated": 0,
        "max_memory_reserved": 0,
        "mem_get_info": (0, 0),
        "reset_peak_memory_stats": None,
        "empty_cache": None,
    }
    for name, value in values.items():
        if not hasattr(cpu, name):
            setattr(cpu, name, _constant(run, value))


def _constant(run: Run, value: Any) -> Callable[..., Any]:
    def answer(*args: Any, **kwargs: Any) -> Any:
        run.answered("cpu-memory-counters", sys._getframe(1))
        return value

    return answer


def _answer_eager_attention(run: Run) -> None:
    """transformers refuses flash_attention_2 where no GPU is visible (flash-attn installed):
    the model is then loaded with eager attention, the rest of verl's call unchanged, and the
    event says so (flash-attn's kernels stay unproven). A missing flash-attn is not answered:
    that ImportError is verl's finding."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(cls, *args, **kwargs)
            except (ImportError, ValueError) as exc:
                if NOT_ON_CPU not in str(exc):
                    raise
            run.answered("eager-attention", sys._getframe(1))
            kwargs["attn_implementation"] = "eager"
            config: Any = kwargs.get("config")
            if getattr(config, "_attn_implementation", None) == "flash_attention_2":
                config._attn_implementation = "eager"
            return fn(cls, *args, **kwargs)

        return from_pretrained

    watch("transformers.modeling_utils", "PreTrainedModel.from_pretrained", wrap)


ANSWERS: dict[str, Callable[[Run], None]] = {
    "cuda-device-name": _answer_cuda_device_name,
    "cpu-memory-counters": _answer_cpu_memory,
    "eager-attention": _answer_eager_attention,
}


def _stop_at(run: Run, stop: dict[str, Any]) -> None:
    """Make a recorded GPU-only call raise GPUStop naming verl's calling line."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def stopped(*args: Any, **kwargs: Any) -> Any:
            caller, line = run.caller(sys._getframe(1))
            raise GPUStop(stop, caller, line)

        return stopped

    module, _, target = str(stop["site"]).partition(":")
    watch(module, target, wrap)


# -- the config each role is given -------------------------------------------------------------


def _value_model(node: Any) -> Any:
    """verl 0.9's critic: the TrainingWorkerConfig its trainer builds from `critic`
    (trainer/ppo/v1/trainer_base.py:261-284 in 0.9.1)."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import TrainingWorkerConfig

    c = omega_conf_to_dataclass(node)
    c.engine.infer_max_token_len_per_gpu = c.ppo_infer_max_token_len_per_gpu
    c.engine.max_token_len_per_gpu = c.ppo_infer_max_token_len_per_gpu
    profiler = node.get("profiler", {})
    return TrainingWorkerConfig(
        model_type="value_model",
        model_config=c.model,
        engine_config=c.engine,
        optimizer_config=c.optim,
        checkpoint_config=c.checkpoint,
        profiler_config=omega_conf_to_dataclass(profiler) if profiler else None,
    )


BUILDERS: dict[str, Callable[[Any], Any]] = {"value-model": _value_model}


def _arguments(role: dict[str, Any], config: Any) -> dict[str, Any]:
    """A role's constructor arguments: "@key" is a deep copy of that part of verl's config
    ("@key?" None when absent; each worker gets its own copy, as each Ray worker its own
    pickle: workers normalise their config in place), other values as written."""
    from omegaconf import OmegaConf

    out: dict[str, Any] = {}
    for name, value in role.get("args", {}).items():
        if not (isinstance(value, str) and value.startswith("@")):
            out[name] = value
            continue
        key, optional = value[1:].rstrip("?"), value.endswith("?")
        node = OmegaConf.select(config, key)
        if node is None and not optional:
            raise HarnessError(f"verl's config at the boundary has no {key}")
        node = copy.deepcopy(node)
        build = (role.get("build") or {}).get(name)
        out[name] = BUILDERS[build](node) if build and node is not None else node
    return out


# -- the two steps ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_process_job() -> None:
    """RANK 0 of WORLD_SIZE 1 on 127.0.0.1, and torch.distributed's gloo group, before any
    verl worker: what torchrun or Ray's worker would set (verl 0.4 asks nccl otherwise)."""
    os.environ.update(
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "RAY_LOCAL_RANK": "0",
            "RAY_LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
        }
    )
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", rank=0, world_size=1)


def _load_class(path: str) -> Any:
    module, _, name = path.partition(":")
    owner: Any = importlib.import_module(module)
    for part in name.split("."):
        owner = getattr(owner, part)
    return owner


def _call(run: Run, role: str, what: str, fn: Callable[[], Any]) -> tuple[str, Any]:
    """Call `fn` (verl's constructor or init): ("done", result), ("stopped", None) at a GPU
    stop, or ("error", None); one event for the role either way."""
    started = time.monotonic()
    try:
        result = fn()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        seconds = time.monotonic() - started
        stop = _stop_in(exc)
        if stop is not None:
            via = {} if stop is exc else {"via": type(exc).__name__}
            run.emit(
                "stopped",
                role=role,
                cls=what,
                seconds=seconds,
                site=stop.stop["site"],
                what=stop.stop["what"],
                caller=stop.caller,
                line=stop.line,
                **via,
            )
            return "stopped", None
        ours, in_verl = run.raised_in(exc)
        fields = error_fields(exc)
        run.emit(
            "error", role=role, cls=what, seconds=seconds, harness=ours, verl_at=in_verl, **fields
        )
        return "error", None
    run.emit("done", role=role, cls=what, seconds=time.monotonic() - started)
    return "done", result


def _stop_in(exc: BaseException) -> GPUStop | None:
    """The GPUStop this exception is, or that verl re-raised as it (0.4's load_valuehead_model
    turns any exception into "... please install trl")."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, GPUStop):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def run_workers(spec: dict[str, Any], events: str) -> None:
    """The three steps, in order; nothing after a step that failed or the harness could not do."""
    recipe = spec.get("workers") or {}
    run = Run(events)
    if not recipe.get("roles"):
        run.emit("norecipe")  # dryrun.json has no worker recipe measured for this release
        return
    run.emit("start")
    try:
        with open(str(spec["capture"]), encoding="utf-8") as fh:
            captured = json.load(fh)
        from omegaconf import OmegaConf

        config = OmegaConf.load(captured["config"])
        roles = _roles(recipe, captured)
        _one_process_job()
        for name in recipe.get("answers", ()):
            ANSWERS[name](run)
        for stop in recipe.get("stops", ()):
            _stop_at(run, stop)
    except Exception as exc:  # the capture or the set-up: the harness's, whoever raised
        run.emit("error", harness=True, setup=True, **error_fields(exc))
        return
    built = []
    for role, cls_path in roles:
        name = str(role.get("name", role["role"]))
        try:
            cls = _load_class(cls_path)
            args = _arguments(role, config)
        except Exception as exc:
            ours, in_verl = run.raised_in(exc)
            fields = error_fields(exc)
            run.emit("error", role=name, cls=cls_path, harness=ours, verl_at=in_verl, **fields)
            return
        status, worker = _call(run, name, cls_path, functools.partial(cls, **args))
        if status == "error":
            return
        if status == "done":
            built.append((name, role, cls_path, worker))
    run.emit("end")
    run.step = MODEL
    run.emit("start")
    for name, role, cls_path, worker in built:
        status, _ = _call(run, name, cls_path, getattr(worker, role.get("init", "init_model")))
        if status == "error":
            return
    run.emit("end")
    run.step = IMPORTS
    run.emit("start")
    for module in recipe.get("imports", ()):
        if not _import(run, str(module)):
            return
    run.emit("end")


def _import(run: Run, module: str) -> bool:
    """One module init_model imports on its way (also past where a CPU stops it): imported,
    absent from this release (the module itself is not there: the recipe covers several),
    stopped at a GPU-only call its import makes, or an error (False: a finding)."""
    started = time.monotonic()
    try:
        importlib.import_module(module)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
        if missing and (module == missing or module.startswith(missing + ".")):
            run.emit("absent", module=module)
            return True
        stop = _stop_in(exc)
        if stop is not None:
            run.emit(
                "stopped",
                module=module,
                site=stop.stop["site"],
                what=stop.stop["what"],
                caller=stop.caller,
                line=stop.line,
            )
            return True
        ours, in_verl = run.raised_in(exc)
        run.emit("error", module=module, harness=ours, verl_at=in_verl, **error_fields(exc))
        return False
    run.emit("done", module=module, seconds=time.monotonic() - started)
    return True


def _roles(recipe: dict[str, Any], captured: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """The recipe's roles verl's trainer has, in the recipe's (verl's init) order, with the
    class verl mapped each to; a role verl maps that the recipe does not know is the
    harness's gap, said as such."""
    mapped: dict[str, str] = dict(captured.get("roles") or {})
    flags: dict[str, bool] = dict(captured.get("flags") or {})
    known = {r["role"] for r in recipe.get("roles", ())}
    unknown = sorted(set(mapped) - known - set(recipe.get("ignore", ())))
    if unknown:
        raise HarnessError(f"verl's trainer maps role {unknown[0]}, which the recipe does not know")
    out = []
    for role in recipe.get("roles", ()):
        if role["role"] not in mapped:
            continue
        when = role.get("when")
        if when and when not in flags:
            raise HarnessError(f"the trainer at the boundary has no {when}")
        if when and not flags[when]:
            continue
        out.append((role, mapped[role["role"]]))
    return out
