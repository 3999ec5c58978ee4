"""Writing manifest.json from `manifest`'s values (the host's bundle stage calls `dumps`).

Import through `verl_bundle.airgap.contract.manifest` (`manifest.dumps`). Standard library only,
Python 3.8+ (the bundle carries it).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from verl_bundle.airgap.contract.manifest_values import File, Manifest, Source


def to_dict(m: Manifest) -> dict[str, Any]:
    """The JSON document; keys are stable (tests and rehearse rely on them)."""
    return _with_interpreter(
        m,
        {
            "schema": m.schema,
            "name": m.name,
            "created_by": m.created_by,
            "created": m.created,
            "release": m.release,
            "profile": {
                "name": m.profile.name,
                "description": m.profile.description,
                "sha256": m.profile.sha256,
                "notes": list(m.profile.notes),
            },
            "target": {
                "python": m.target.python,
                "python_tag": m.target.python_tag,
                "platform": m.target.platform,
                "arch": m.target.arch,
                "glibc": m.target.glibc,
                "cuda": m.target.cuda,
            },
            "toolchain": {
                "nvcc": m.toolchain.nvcc,
                "gcc": m.toolchain.gcc,
                "driver": m.toolchain.driver,
                "driver_compat": m.toolchain.driver_compat,
            },
            "checks": {
                "imports": list(m.checks.imports),
                "torch_version": m.checks.torch_version,
                "torch_cuda": m.checks.torch_cuda,
                "flash_attn_wheel": m.checks.flash_attn_wheel,
                **({"overrides": list(m.checks.overrides)} if m.checks.overrides else {}),
            },
            "phases": [
                {
                    "name": p.name,
                    "requirements": p.requirements,
                    "packages": list(p.packages),
                    "source_builds": [
                        {
                            "package": b.package,
                            "env": dict(b.env),
                            "max_jobs": {
                                "gib_per_job": b.max_jobs.gib_per_job,
                                "limit": b.max_jobs.limit,
                            },
                            "needs_cuda": b.needs_cuda,
                            "build_time": {
                                "core_minutes_per_arch": b.build_time.core_minutes_per_arch,
                                "archs": list(b.build_time.archs),
                            }
                            if b.build_time
                            else None,
                        }
                        for b in p.source_builds
                    ],
                }
                for p in m.phases
            ],
            "readiness": {
                "purpose": m.readiness.purpose,
                "modules": list(m.readiness.modules),
                "config": m.readiness.config,
                "limit": m.readiness.limit,
            },
            "installed_size": m.installed_size,
            "files": [_file_dict(f) for f in m.files],
            "generated": [
                {"path": g.path, "sha256": g.sha256, "size": g.size} for g in m.generated
            ],
        },
    )


def _with_interpreter(m: Manifest, doc: dict[str, Any]) -> dict[str, Any]:
    """The bundled CPython's entry and a delta's base, written only when the bundle has them
    (so a bundle without them has the same manifest.json as before the fields existed)."""
    if m.interpreter is not None:
        doc["interpreter"] = dataclasses.asdict(m.interpreter)
    if m.delta is not None:
        doc["delta"] = {
            "base": m.delta.base,
            "base_manifest": m.delta.base_manifest,
            "omitted": list(m.delta.omitted),
        }
    return doc


def _file_dict(f: File) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "path": f.path,
        "name": f.name,
        "version": f.version,
        "sha256": f.sha256,
        "size": f.size,
        "location": f.location,
        "url": f.url,
        "phase": f.phase,
        "kind": f.kind,
    }
    if f.built_from is not None:
        doc["built_from"] = {"file": f.built_from.file, "sha256": f.built_from.sha256}
    if f.compiled is not None:
        c = f.compiled
        doc["compiled"] = {
            "toolkit": c.toolkit,
            "compiler": c.compiler,
            "archs": c.archs,
            "seconds": c.seconds,
            "key": c.key,
            "made": c.made,
            "reused_from_cache": c.reused_from_cache,
        }
    if f.license:
        doc["license"] = f.license
    if f.source is not None:
        doc["source"] = source_dict(f.source)
    return doc


def source_dict(s: Source) -> dict[str, Any]:
    """A source as manifest.json and the lock write it: the kind and origin, then only the
    facts that are set."""
    doc: dict[str, Any] = {"kind": s.kind, "origin": s.origin}
    for key, value in (
        ("commit", s.commit),
        ("rev", s.rev),
        ("dirty", s.dirty),
        ("tree_sha256", s.tree_sha256),
        ("note", s.note),
    ):
        if value:
            doc[key] = value
    return doc


def dumps(m: Manifest) -> str:
    return json.dumps(to_dict(m), indent=2) + "\n"
