"""The readiness probe: run as a script by the installed environment's python.

`python -I -B readiness_probe.py SPEC.json RESULT.json`. One interpreter imports every module
the trainer needs, in order, recording each one's error (a failed import leaves nothing behind
in sys.modules, so the next one starts clean), then composes verl's Hydra config offline and,
when asked, runs a tiny CUDA op and a flash-attn call. The result is written to RESULT.json, not
stdout, because imported libraries (vllm, ray) print to stdout. Standard library only; it
imports nothing of verl_bundle, so it sees the environment exactly as the trainer would.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

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


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _gpu_visible() -> bool | None:
    """torch's view of the GPU; None when torch itself does not import."""
    try:
        import torch
    except BaseException:
        return None
    try:
        return bool(torch.cuda.is_available())
    except BaseException:
        return False


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


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "versions": {d: _version(d) for d in ("verl", "vllm", "torch", "flash-attn")},
        "imports": [_import(m) for m in spec.get("modules", [])],
    }
    result["gpu_visible"] = _gpu_visible()
    if spec.get("config"):
        result["config"] = _compose(spec["config"], spec.get("config_dir", "trainer/config"))
    if spec.get("gpu"):
        result["gpu"] = _gpu_smoke(bool(spec.get("flash_attn")))
    return result


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    result = probe(spec)
    with open(argv[1], "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
