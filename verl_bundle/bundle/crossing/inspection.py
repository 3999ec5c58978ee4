"""The approval step (`verl-bundle inspect TARBALL [--base OLD]`): what a security office asks
of a bundle before it crosses, read without extracting it: profile, target, counts and sizes,
the licences, the signer, the lock's hash, and what changed since the bundle approved before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.signature import check_copy, signature_in, ssh_key_of
from verl_bundle.bundle.crossing.sbom import LicenceGroup, licences
from verl_bundle.bundle.read import Opened, open_bundle


@dataclass(frozen=True)
class Change:
    """A package added (old None), removed (new None) or at another version."""

    name: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class Signer:
    """`state`: "verified" (an allowed signer, unaltered), "refused", "unchecked" (signed,
    no --allowed-signers given) or "unsigned"; `line` says it in words."""

    state: str
    line: str


@dataclass(frozen=True)
class Inspection:
    opened: Opened
    lock_sha256: str | None
    licences: tuple[LicenceGroup, ...]
    signer: Signer
    base: str | None = None  # the bundle compared with (--base)
    changes: tuple[Change, ...] = ()
    base_release: int | None = None  # the release of the bundle compared with
    # When the bundle was written here (UTC): its file's time. Not in the manifest, so that
    # one lock builds the same tarball byte for byte; the manifest's `created` is the lock's.
    written: str = ""

    @property
    def manifest(self) -> mf.Manifest:
        return self.opened.manifest

    @property
    def ok(self) -> bool:
        return self.signer.state != "refused"


def changes(old: mf.Manifest, new: mf.Manifest) -> tuple[Change, ...]:
    """Packages added, removed and changed between two bundles, by name."""
    before = {f.name: f.version for f in old.files}
    after = {f.name: f.version for f in new.files}
    out = [
        Change(n, before.get(n), after.get(n))
        for n in sorted(set(before) | set(after))
        if before.get(n) != after.get(n)
    ]
    return tuple(out)


def _signer(opened: Opened, allowed: Path | None) -> Signer:
    found = signature_in(opened.texts, mf.MANIFEST)
    if found is None:
        return Signer("unsigned", "not signed (build --sign KEY signs a bundle)")
    suffix, sig = found
    key = ssh_key_of(sig) or "a GPG key"
    if allowed is None:
        return Signer(
            "unchecked", f"signed with {key}; not checked: pass --allowed-signers FILE to check"
        )
    verdict = check_copy(mf.MANIFEST, opened.texts[mf.MANIFEST], sig, suffix, str(allowed))
    return Signer("verified" if verdict.ok else "refused", verdict.line)


def inspect(path: Path, base: Path | None = None, allowed: Path | None = None) -> Inspection:
    """Everything an approver reads, from `path` (and `base`) without extracting either."""
    opened = open_bundle(path)
    m = opened.manifest
    lock = next((g.sha256 for g in m.generated if g.path == mf.LOCK), None)
    old = open_bundle(base) if base is not None else None
    return Inspection(
        opened=opened,
        lock_sha256=lock,
        licences=licences(m),
        signer=_signer(opened, allowed),
        base=old.manifest.name if old else None,
        changes=changes(old.manifest, m) if old else (),
        base_release=old.manifest.release if old else None,
        written=written(path, opened),
    )


def written(path: Path, opened: Opened) -> str:
    """The time the bundle's file was written (the tarball, its first volume, or a directory's
    manifest.json), as YYYY-MM-DDThh:mm:ssZ; "" when it cannot be read."""
    where = opened.volumes[0] if opened.volumes else opened.tarball or path
    if where.is_dir():
        where = next(where.rglob(mf.MANIFEST), where)
    try:
        when = where.stat().st_mtime
    except OSError:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
