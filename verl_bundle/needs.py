"""What a server must provide, for the doctor: from a bundle's manifest, or from a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl_bundle.airgap.layout import find_root, read_manifest
from verl_bundle.errors import UsageError
from verl_bundle.profile import Profile, select_profile
from verl_bundle.target import Target


def profile_needs(profile: Profile, target: Target) -> dict[str, Any]:
    """The manifest's needs for a bundle of this profile, assuming its declared source builds
    happen (the worst case: without a bundle we cannot know a prebuilt wheel will be found)."""
    builds = [
        {
            "package": b.package,
            "env": dict(b.env),
            "max_jobs": {"gib_per_job": b.max_jobs.gib_per_job, "limit": b.max_jobs.limit},
            "needs_cuda": b.needs_cuda,
        }
        for b in profile.source_builds
    ]
    return {
        "target": {
            "python": target.python_version,
            "python_tag": target.python_tag,
            "platform": target.platform,
            "arch": target.arch,
            "glibc": ".".join(map(str, target.glibc)) if target.glibc else None,
            "cuda": profile.cuda,
        },
        "toolchain": {
            "nvcc": profile.toolchain.nvcc,
            "gcc": profile.toolchain.gcc,
            "driver": profile.toolchain.driver,
            "driver_compat": profile.toolchain.driver_compat,
        },
        "phases": [{"name": "source-builds", "source_builds": builds}] if builds else [],
        "installed_size": 0,
    }


def needs_for(bundle: Path | None, cuda: str | None, profile: str | None) -> dict[str, Any]:
    if bundle is not None:
        if cuda or profile:
            raise UsageError("give --bundle, or --cuda/--profile, not both")
        root = find_root(str(bundle))
        try:
            return dict(read_manifest(root))
        except FileNotFoundError:
            raise UsageError(
                f"--bundle {bundle}: no manifest.json there; is it an extracted bundle?"
            ) from None
        except ValueError as exc:
            raise UsageError(f"--bundle {bundle}: {exc}") from None
    chosen = select_profile(cuda, profile)
    return profile_needs(chosen, chosen.target())
