"""The files a bundle is made of (`Entry`: bytes made here, or a file streamed from the cache)
and a plan's outcome (`BundlePlan`); the plan, the tar writers, the crossing's extras and the
asset bundle all build on these values."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.resources import airgap_dir


@dataclass(frozen=True)
class Entry:
    """One file of the bundle: bytes made here, or a file streamed from the cache (whose bytes
    must hash to `sha256`, the lock's hash, while they are copied)."""

    arcname: str
    sha256: str
    size: int
    data: bytes | None = None
    source: str | None = None
    # Downloaded and hashed against the lock in this run: the tar writer trusts that digest.
    verified: bool = False


@dataclass(frozen=True)
class BundlePlan:
    """What `plan` decided: the bundle's name (its top directory), its files in tar order
    (the payload, its files as locked first, then SHA256SUMS, manifest.json and what was made
    here), and the manifest written into it. A delta bundle (`base` given) leaves `omitted`
    out of the tarball: files its base already has."""

    name: str
    entries: tuple[Entry, ...]
    manifest: mf.Manifest
    omitted: tuple[Entry, ...] = ()


def made_here(arcname: str, data: bytes) -> Entry:
    """A file whose bytes this build made (the manifest, SHA256SUMS, install.sh...)."""
    return Entry(arcname, hashlib.sha256(data).hexdigest(), len(data), data=data)


def airgap_entries() -> list[Entry]:
    """The standard-library server code (modules, subpackages and their data files), as
    lib/verl_bundle/airgap/..."""
    entries = [made_here(f"{mf.LIB}/verl_bundle/__init__.py", b'"""verl-bundle server side."""\n')]
    root = airgap_dir()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and path.suffix in (".py", ".json") and "__pycache__" not in rel:
            entries.append(made_here(f"{mf.LIB}/verl_bundle/airgap/{rel}", path.read_bytes()))
    return entries
