"""What a server must provide, for the doctor: from a bundle's manifest, or from a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl_bundle.airgap.layout import find_root, read_manifest
from verl_bundle.catalog import select_profile
from verl_bundle.errors import UsageError
from verl_bundle.profile import Profile
from verl_bundle.target import Target


def profile_needs(profile: Profile, target: Target) -> dict[str, Any]:
    """The manifest's needs for a bundle of this profile (see assemble.manifest_for_profile)."""
    from verl_bundle.airgap.manifest import to_dict
    from verl_bundle.assemble import manifest_for_profile

    return to_dict(manifest_for_profile(profile, target))


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
