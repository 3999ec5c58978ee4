"""The assemble stage: plan the bundle (files, hashes, manifest), then write it as one tarball.

A cached file found damaged while it is copied is evicted and fetched again (through
`refetch`), and the tarball written once more; a second failure is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from verl_bundle.bundle.plan import BundlePlan, Entry, bundle_name, plan
from verl_bundle.bundle.tarball import (
    Bundle,
    Compression,
    Damaged,
    DamagedCacheError,
    DigestMemo,
    write_bundle,
)
from verl_bundle.fetch import Wheelhouse
from verl_bundle.lock import Lock
from verl_bundle.profile import Profile
from verl_bundle.progress import Reporter

__all__ = [
    "Bundle",
    "BundlePlan",
    "Compression",
    "Damaged",
    "DamagedCacheError",
    "DigestMemo",
    "Entry",
    "Refetch",
    "assemble",
    "bundle_name",
    "plan",
]

# Removes the damaged files from the cache and fetches them again: the fetch stage's result.
Refetch = Callable[[Sequence[Damaged]], Wheelhouse]


def assemble(
    profile: Profile,
    lock: Lock,
    wheelhouse: Wheelhouse,
    output: Path,
    compress: Compression,
    reporter: Reporter,
    refetch: Refetch | None = None,
    memo: DigestMemo | None = None,
) -> Bundle:
    planned = plan(profile, lock, wheelhouse)
    try:
        return write_bundle(planned.name, planned.entries, output, compress, reporter, memo)
    except DamagedCacheError as exc:
        if refetch is None:
            raise
        for d in exc.damaged:
            reporter.note(f"{d.line()}: removed it from the cache and fetching it again")
        planned = plan(profile, lock, refetch(exc.damaged))
    return write_bundle(planned.name, planned.entries, output, compress, reporter, memo)
