"""The readiness probe: run as a script by the installed environment's python.

`python -I -B readiness_probe.py SPEC.json RESULT.json`. One interpreter imports every module
the trainer needs, in order, recording each one's error (a failed import leaves nothing behind
in sys.modules, so the next one starts clean), then the post-install checks' own imports (most
already loaded by then: each heavy module is imported once, here), reads torch's build, composes
verl's Hydra config offline and, when asked, runs a tiny CUDA op and a flash-attn call.

The result is written to RESULT.json, not stdout, because imported libraries (vllm, ray) print
to stdout; it is written once before the GPU smoke test and again after it, so a crash in a CUDA
kernel still leaves every import finding behind. Standard library only; it imports nothing of
verl_bundle, so it sees the environment exactly as the trainer would.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import queue
import sys
import threading
import time
import traceback
import warnings
from typing import Any

# Printed by setuptools' distutils shim when something imports distutils after setuptools
# (torch does): noise for a user, not a finding.
DISTUTILS_NOISE = "Setuptools is replacing distutils"

# `python script.py` puts the script's directory first on sys.path: drop it, so our sibling
# modules (render, manifest, ...) can never shadow what the environment holds.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]


def _error(exc: BaseException) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    text = str(exc).strip() or type(exc).__name__
    return {"type": type(exc).__name__, "error": text.splitlines()[0], "at": where}


def _import(module: str) -> dict[str, Any]:
    import importlib

    start = time.monotonic()
    try:
        importlib.import_module(module)
    except BaseException as exc:  # SystemExit from a module is an error too
        if isinstance(exc, KeyboardInterrupt):
            raise
        out = _error(exc)
        out.update(module=module, ok=False)
    else:
        out = {"module": module, "ok": True}
    out["seconds"] = round(time.monotonic() - start, 2)
    return out


def _check_import(module: str) -> dict[str, Any]:
    """A post-install import check: like _import, with the module's __version__."""
    out = _import(module)
    if out["ok"]:
        out["version"] = str(getattr(sys.modules.get(module), "__version__", "") or "")
    return out


def _torch_build() -> dict[str, Any]:
    """torch's version, CUDA and C++ ABI, as the post-install checks compare them."""
    try:
        import torch
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        out = _error(exc)
        out["ok"] = False
        return out
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    return {
        "ok": True,
        "version": str(getattr(torch, "__version__", "")),
        "cuda": str(getattr(getattr(torch, "version", None), "cuda", None)),
        "abi": None if abi is None else bool(abi),
    }


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _gpu_state() -> dict[str, Any]:
    """torch's view of the GPU: visible (None when torch itself does not import), how many,
    and the error when torch could not be asked."""
    try:
        import torch
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"gpu_visible": None, "gpu_count": 0, "gpu_error": _error(exc)["error"]}
    try:
        visible = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count()) if visible else 0
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"gpu_visible": False, "gpu_count": 0, "gpu_error": _error(exc)["error"]}
    return {"gpu_visible": visible, "gpu_count": count, "gpu_error": ""}


def _compose(config: str, package: str) -> dict[str, Any]:
    """verl's Hydra config, composed and resolved as main_ppo would, without starting a run."""
    try:
        import importlib

        from hydra import compose, initialize_config_dir
        from omegaconf import OmegaConf

        root = os.path.dirname(os.path.abspath(importlib.import_module("verl").__file__ or ""))
        config_dir = os.path.join(root, *package.split("/"))
        try:
            ctx = initialize_config_dir(config_dir=config_dir, version_base=None)
        except TypeError:  # hydra < 1.2 has no version_base
            ctx = initialize_config_dir(config_dir=config_dir)
        with ctx:
            cfg = compose(config_name=config)
        OmegaConf.resolve(cfg)
        keys = sorted(str(k) for k in cfg)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        out = _error(exc)
        out.update(ok=False, config=config)
        return out
    return {"ok": True, "config": config, "dir": config_dir, "keys": keys}


def _gpu_smoke(flash_attn: bool) -> dict[str, Any]:
    """A CUDA tensor op, then a tiny causal flash-attn call, each checked for its value."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {"ok": False, "type": "NoGPU", "error": "torch sees no CUDA device"}
        x = torch.arange(1024, device="cuda", dtype=torch.float32)
        total = float((x * 2).sum().item())
        if total != 1023.0 * 1024.0:
            return {"ok": False, "type": "WrongResult", "error": f"sum was {total}"}
        out: dict[str, Any] = {"ok": True, "device": torch.cuda.get_device_name(0)}
        if flash_attn:
            from flash_attn import flash_attn_func

            q = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.float16)
            o = flash_attn_func(q, q, q, causal=True)
            torch.cuda.synchronize()
            if tuple(o.shape) != tuple(q.shape) or not bool(torch.isfinite(o).all()):
                return {
                    "ok": False,
                    "type": "WrongResult",
                    "error": "flash_attn_func gave a wrong shape or non-finite values",
                }
            out["flash_attn"] = True
        return out
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = _error(exc)
        err["ok"] = False
        return err


def probe(spec: dict[str, Any], save: Any = None) -> dict[str, Any]:
    """Spec: modules (readiness's, in order), checks (post-install's imports), torch (report
    its build), config, gpu (readiness's smoke test, even without a visible GPU), smoke (the
    post-install smoke test where a GPU is visible), flash_attn. `save(result)` is called
    before the smoke test, which is the one step that can crash the interpreter."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DISTUTILS_NOISE)
        result: dict[str, Any] = {
            "python": sys.version.split()[0],
            "prefix": sys.prefix,  # the environment readiness examines for unlisted files
            "versions": {d: _version(d) for d in ("verl", "vllm", "torch", "flash-attn")},
            "imports": [_import(m) for m in spec.get("modules", [])],
            "checks": [_check_import(m) for m in spec.get("checks", [])],
        }
        if spec.get("torch"):
            result["torch"] = _torch_build()
        result.update(_gpu_state())
        if spec.get("config"):
            result["config"] = _compose(spec["config"], spec.get("config_dir", "trainer/config"))
        smoke = spec.get("gpu") or (spec.get("smoke") and result["gpu_visible"])
        if smoke:
            if save is not None:
                save(result)
            ran = _gpu_smoke(bool(spec.get("flash_attn")))
            if spec.get("gpu"):
                result["gpu"] = ran
            if spec.get("smoke"):
                result["smoke"] = ran
    return result


class BytecodeWriter:
    """The bytecode of every module the probe compiles, written on a thread.

    The probe imports the whole stack from source once (uv writes no bytecode) and keeps what it
    compiles, so every later import (each Ray worker's, the dry run's) loads bytecode instead of
    compiling again. Written inline, as the import system writes them, those ~5,800 small files
    made the real cu130 stack's probe 47.8 s against 39-43 s with -B (medians, this project's
    2-core host); queued to a thread, their system calls run beside the next imports (44.4 s).
    The loader's own `_cache_bytecode` does each write, so a file that cannot be written is
    skipped as Python skips it. Where that hook is missing, the import system writes inline."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._drain, name="bytecode", daemon=True)
        self.loader: Any = None
        self.original: Any = None

    def __enter__(self) -> BytecodeWriter:
        try:
            from importlib import _bootstrap_external as external

            loader: Any = external.SourceFileLoader  # its private hook: typed loosely
            original = loader._cache_bytecode
        except (ImportError, AttributeError):
            return self
        if sys.dont_write_bytecode:
            return self
        self.loader, self.original = loader, original
        writes = self.queue

        def later(loader: Any, source_path: str, bytecode_path: str, data: bytes) -> None:
            writes.put((loader, source_path, bytecode_path, data))

        loader._cache_bytecode = later
        self.thread.start()
        return self

    def _drain(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            # Bytecode is a cache: a write that fails is no finding (the loader's own writer
            # already skips what it cannot write).
            with contextlib.suppress(Exception):
                self.original(*item)

    def __exit__(self, *exc: object) -> None:
        """Every queued file written before the probe ends."""
        if self.original is None:
            return
        self.loader._cache_bytecode = self.original
        self.queue.put(None)
        self.thread.join()


def _save(path: str, result: dict[str, Any]) -> None:
    """Write the result whole or not at all (a crash mid-write leaves the earlier one)."""
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    os.replace(path + ".tmp", path)


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    # The imports allocate millions of objects that live on, and every pass of the cyclic
    # collector walks them again: the real cu130 stack's imports took 33 s with it off against
    # 39-43 s with it on (medians, this project's 2-core host; peak memory the same within 2%).
    # Off for the probe: its garbage is freed by reference counts, or with the interpreter.
    gc.disable()
    try:
        with BytecodeWriter():
            _save(argv[1], probe(spec, lambda partial: _save(argv[1], partial)))
    finally:
        gc.enable()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
