"""Results as text for people or as JSON for machines; the JSON shapes are pinned by tests."""

from __future__ import annotations

import json
from typing import Any

from verl_bundle.airgap.verify import Report
from verl_bundle.lock import Lock
from verl_bundle.pipeline import BuildResult, LockResult
from verl_bundle.profile import Profile


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=False)


def _target(lock: Lock) -> dict[str, str]:
    return {
        "python": lock.target.python_version,
        "python_tag": lock.target.python_tag,
        "platform": lock.target.platform,
        "cuda": lock.cuda,
    }


def lock_json(result: LockResult) -> dict[str, Any]:
    lock = result.lock
    return {
        "lock": str(result.path),
        "profile": lock.profile,
        "target": _target(lock),
        "packages": [
            {
                "name": p.name,
                "version": p.version,
                "file": p.file.filename,
                "location": p.location,
                "url": p.file.url,
                "sha256": p.file.sha256,
                "size": p.file.size,
                "kind": p.kind,
                "role": p.role,
                "phase": p.phase,
            }
            for p in lock.packages
        ],
        "notes": list(result.notes),
    }


def lock_text(result: LockResult) -> str:
    lock = result.lock
    kinds = {k: sum(1 for p in lock.packages if p.kind == k) for k in ("wheel", "host-build", "sdist")}
    lines = [
        f"locked {len(lock.packages)} packages for {lock.target.describe()} (CUDA {lock.cuda}), "
        f"{human_size(lock.total_size)}: {kinds['wheel']} wheels, {kinds['host-build']} pure sdists "
        f"to build here, {kinds['sdist']} to build on the server",
        str(result.path),
    ]
    return "\n".join(lines)


def build_json(result: BuildResult) -> dict[str, Any]:
    b, w = result.bundle, result.wheelhouse
    return {
        "bundle": str(b.path),
        "sha256": b.sha256,
        "size": b.size,
        "files": b.files,
        "profile": result.lock.profile,
        "target": _target(result.lock),
        "lock": result.lock_source,
        "packages": len(result.lock.packages),
        "downloaded": {"files": w.downloaded_files, "bytes": w.downloaded_bytes},
        "cached_files": w.cached_files,
        "host_built": w.host_built,
        "notes": list(result.notes),
    }


def build_text(result: BuildResult) -> str:
    b, w = result.bundle, result.wheelhouse
    return "\n".join(
        [
            f"{len(result.lock.packages)} packages for {result.lock.target.describe()} "
            f"(CUDA {result.lock.cuda}); downloaded {w.downloaded_files} files "
            f"({human_size(w.downloaded_bytes)}), {w.cached_files} from the cache, "
            f"{w.host_built} built into wheels here",
            f"bundle: {human_size(b.size)}, sha256 {b.sha256}",
            str(b.path),
        ]
    )


def verify_json(report: Report) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "subject": report.subject,
        "checked": report.checked,
        "problems": [{"path": p.path, "problem": p.what} for p in report.problems],
        "extra": report.extra,
    }


def verify_text(report: Report) -> str:
    if report.ok:
        extra = f"; {len(report.extra)} extra files not in the bundle" if report.extra else ""
        return f"OK: {report.checked} files match SHA256SUMS and the manifest{extra}"
    lines = [f"FAILED: {p.line()}" for p in report.problems]
    lines.append(f"{len(report.problems)} problem(s) in {report.subject}")
    return "\n".join(lines)


def profile_summary(p: Profile) -> dict[str, Any]:
    return {
        "name": p.name,
        "cuda": p.cuda,
        "python": p.python,
        "platform": p.platform,
        "description": p.description,
        "path": str(p.path),
    }


def profiles_text(profiles: list[Profile]) -> str:
    width = max((len(p.name) for p in profiles), default=4)
    lines = [f"{'NAME':<{width}}  CUDA   PYTHON  DESCRIPTION"]
    lines += [f"{p.name:<{width}}  {p.cuda:<5}  {p.python:<6}  {p.description}" for p in profiles]
    return "\n".join(lines)


def profile_show(p: Profile) -> str:
    return p.path.read_text(encoding="utf-8").rstrip("\n")
