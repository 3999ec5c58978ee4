"""What a bundle needs to cross the gap, beyond its files: the SBOM and licence report made from
its manifest, and, for a delta (build --base OLD), the base it extends and the files it leaves
to it. The plan (bundle/plan.py) calls these before it lists SHA256SUMS."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify import delta
from verl_bundle.bundle.entries import BundlePlan, Entry, made_here

if TYPE_CHECKING:
    from verl_bundle.airgap.verify.signature import Signer


@dataclass(frozen=True)
class Base:
    """The bundle a delta is built against (build --base OLD): its manifest, and the sha256 of
    its manifest.json (recorded in the delta, so an approver sees which bundle it extends)."""

    manifest: mf.Manifest
    manifest_sha256: str
    where: str  # what the user gave: a tarball, a directory or a manifest.json


def with_sbom(manifest: mf.Manifest, generated: list[Entry]) -> tuple[mf.Manifest, list[Entry]]:
    """sbom.cdx.json and LICENSES.txt, made from the manifest's values, and the manifest that
    lists them among its generated files."""
    from verl_bundle.bundle.crossing import sbom

    lock_sha256 = next(e.sha256 for e in generated if e.arcname == mf.LOCK)
    made = [
        made_here(mf.SBOM, sbom.document(manifest, lock_sha256)),
        made_here(mf.LICENSES, sbom.report(manifest).encode()),
    ]
    listed = (*manifest.generated, *(mf.Generated(e.arcname, e.sha256, e.size) for e in made))
    return dataclasses.replace(manifest, generated=listed), made


def delta_of(
    manifest: mf.Manifest, base: Base, payload: list[Entry]
) -> tuple[mf.Manifest, str, list[Entry]]:
    """The delta's manifest, its name (its own top directory, so that it never unpacks over
    the base's) and the payload files it leaves to its base (airgap/verify/delta.py's rule:
    the ones the server will find there and check)."""
    left = set(
        delta.left_to_base(base.manifest.files, [(e.arcname, e.sha256, e.size) for e in payload])
    )
    omitted = [e for e in payload if e.arcname in left]
    record = mf.Delta(base.manifest.name, base.manifest_sha256, tuple(e.arcname for e in omitted))
    return dataclasses.replace(manifest, delta=record), f"{manifest.name}-delta", omitted


def finish(
    name: str,
    manifest: mf.Manifest,
    generated: list[Entry],
    payload: list[Entry],
    carried: list[Entry],
    base: Base | None,
    signer: Signer | None,
) -> BundlePlan:
    """The plan's last step: the SBOM and licences, a delta's omissions, manifest.json and its
    signature, and SHA256SUMS, which lists every file of the full bundle (a delta completed
    from its base is that)."""
    manifest, approval = with_sbom(manifest, generated)
    generated = [*generated, *approval]
    omitted: list[Entry] = []
    if base is not None:
        manifest, name, omitted = delta_of(manifest, base, payload)
    manifest_entry = made_here(mf.MANIFEST, mf.dumps(manifest).encode())
    signed = (
        []
        if signer is None
        else [made_here(*signer.manifest_signature(manifest_entry.data or b""))]
    )
    everything = [*payload, *carried, manifest_entry, *signed, *generated]
    sums = made_here(
        mf.SUMS,
        "".join(
            f"{e.sha256}  {e.arcname}\n" for e in sorted(everything, key=lambda e: e.arcname)
        ).encode(),
    )
    left_out = {e.arcname for e in omitted}
    # Tar order: the payload first (its files as locked lead: their place is known before the
    # fetch), then the interpreter, the two lists, and what was made here.
    entries = (
        *(e for e in [*payload, *carried] if e.arcname not in left_out),
        sums,
        manifest_entry,
        *signed,
        *generated,
    )
    return BundlePlan(name, entries, manifest, tuple(omitted))
