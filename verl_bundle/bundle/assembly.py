"""The assemble stage: plan the bundle (files, hashes, manifest), then write it as one tarball.

A cached file found damaged while it is copied is evicted and fetched again (through
`refetch`), and the tarball written once more; a second failure is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from verl_bundle.bundle.crossing.extras import Base
from verl_bundle.bundle.early import EarlyTar
from verl_bundle.bundle.entries import BundlePlan, Entry
from verl_bundle.bundle.plan import bundle_name, locked_entries, plan
from verl_bundle.bundle.tarball import (
    SUFFIX,
    Bundle,
    Compression,
    Damaged,
    DamagedCacheError,
    DigestMemo,
    prepare_output,
    write_bundle,
)
from verl_bundle.fetch.wheelhouse import Wheelhouse
from verl_bundle.profile.model import Profile
from verl_bundle.progress import Reporter
from verl_bundle.resolve.lock import Lock

if TYPE_CHECKING:
    from verl_bundle.airgap.verify.signature import Signer

__all__ = [
    "Base",
    "Bundle",
    "BundlePlan",
    "Compression",
    "Crossing",
    "Damaged",
    "DamagedCacheError",
    "DeltaFigures",
    "DigestMemo",
    "EarlyTar",
    "Entry",
    "Refetch",
    "assemble",
    "bundle_name",
    "early_tar",
    "plan",
]

# Removes the damaged files from the cache and fetches them again: the fetch stage's result.
Refetch = Callable[[Sequence[Damaged]], Wheelhouse]


@dataclass(frozen=True)
class Crossing:
    """How the bundle crosses the air gap: a delta against `base`, volumes of at most `split`
    bytes, signed by `signer`, numbered `release` (None: the lock's time). The default: one
    whole, unsigned tarball."""

    base: Base | None = None
    split: int | None = None
    signer: Signer | None = None
    release: int | None = None


@dataclass(frozen=True)
class DeltaFigures:
    """What a delta carries against its full bundle (`delta: 2 of 268 files, ...`)."""

    base: str
    carried_files: int
    payload_files: int
    # The full bundle's tarball, uncompressed (to a few KB: its manifest lists no omitted files).
    full_size: int


def _figures(planned: BundlePlan, base: Base) -> DeltaFigures:
    from verl_bundle.bundle.tarstream import layout

    payload = [e for e in planned.entries if e.source is not None]
    full = layout(planned.manifest.name, [*planned.entries, *planned.omitted])
    return DeltaFigures(
        base=base.manifest.name,
        carried_files=len(payload),
        payload_files=len(payload) + len(planned.omitted),
        full_size=sum(len(p) if isinstance(p, bytes) else p.size for p in full),
    )


def early_tar(
    lock: Lock,
    output: Path,
    compress: Compression,
    crossing: Crossing,
    reporter: Reporter,
    cached: Callable[[str], bool],
) -> EarlyTar | None:
    """The tarball's front, to be written while the downloads run: for a whole, uncompressed
    tarball that is not a delta (a delta's files are known only against its base), from a
    lock that sizes every file, when some file is not `cached` yet (with every one cached there
    is no download to overlap: the rebuild is written after the plan, its digest remembered).
    None otherwise: the tarball is written after the fetch."""
    entries = locked_entries(lock)
    if compress != "none" or crossing.split is not None or crossing.base is not None:
        return None
    if not entries or all(cached(e.sha256) for e in entries):
        return None
    prepare_output(output, reporter)
    name = bundle_name(lock)
    return EarlyTar(name, output / f"{name}{SUFFIX[compress]}", entries)


def assemble(
    profile: Profile,
    lock: Lock,
    wheelhouse: Wheelhouse,
    output: Path,
    compress: Compression,
    reporter: Reporter,
    refetch: Refetch | None = None,
    memo: DigestMemo | None = None,
    crossing: Crossing = Crossing(),
    early: EarlyTar | None = None,
) -> tuple[Bundle, DeltaFigures | None]:
    """The bundle written, and what a delta carries (None for a full bundle). `early`: the
    tarball's front written while the downloads ran (bundle/early.py), used by the first
    write only."""
    c = crossing

    def write(planned: BundlePlan, front: EarlyTar | None = None) -> Bundle:
        return write_bundle(
            planned.name,
            planned.entries,
            output,
            compress,
            reporter,
            memo,
            c.split,
            c.signer,
            front,
        )

    planned = plan(profile, lock, wheelhouse, c.base, c.signer, c.release)
    try:
        bundle = write(planned, early)
    except DamagedCacheError as exc:
        if refetch is None:
            raise
        for d in exc.damaged:
            reporter.note(f"{d.line()}: removed it from the cache and fetching it again")
        planned = plan(profile, lock, refetch(exc.damaged), c.base, c.signer, c.release)
        bundle = write(planned)
    figures = _figures(planned, c.base) if c.base is not None else None
    return bundle, figures
