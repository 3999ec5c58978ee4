"""Completing a delta bundle from its base (install.sh --base OLD_DIR).

A delta (build --base OLD) carries the new manifest, SHA256SUMS, lib/, install.sh and only the
files its base lacked; its manifest lists the others under `delta.omitted`. Before anything is
installed, each omitted file is found in OLD_DIR (the extracted old bundle, or a directory of
its wheels) and checked against the sha256 the new manifest names (verify/delta.py: the one
rule, by which the host's plan left them out), then linked (or copied, across file systems)
into the delta's directory under a hidden name, renamed when complete. The directory is then
the full bundle, and installs exactly as one. A file in neither place, or damaged in OLD_DIR,
stops it in one line before anything is linked.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.errors import DamagedError
from verl_bundle.airgap.verify import delta


class BaseError(DamagedError):
    """The delta cannot be completed from OLD_DIR (exit 3, as a file of the bundle that is
    missing or does not match); the message is one line."""


@dataclass(frozen=True)
class Taken:
    """A file of the delta taken from OLD_DIR: its bundle path and where it was found."""

    path: str
    source: str
    size: int


@dataclass(frozen=True)
class Completed:
    taken: tuple[Taken, ...]
    linked: int  # hard links; the rest were copied
    already: int  # present from an earlier run


def plan(m: mf.Manifest, bundle_dir: str, base_dir: str) -> tuple[list[Taken], int]:
    """Where each omitted file comes from; BaseError naming every file missing from both (or
    damaged in OLD_DIR). Also (taken, how many are in the delta's directory already)."""
    root = mf.find_root(bundle_dir)
    if m.delta is None:
        return [], 0
    if not os.path.isdir(base_dir):
        raise BaseError(f"--base {base_dir}: no such directory (give the extracted old bundle)")
    needed = [f for f in m.omitted_files() if not _present(root, f)]
    already = len(m.omitted_files()) - len(needed)
    found, problems = delta.find(needed, base_dir)
    if problems:
        raise BaseError(
            f"{len(problems)} file(s) of this delta are in neither the delta nor {base_dir}: "
            f"{', '.join(problems)}; nothing was installed. Give --base the extracted "
            f"{m.delta.base} (or copy the full bundle)"
        )
    return [Taken(f.path, source, f.size) for f, source in found], already


def _present(root: str, f: mf.File) -> bool:
    """Linked or copied by an earlier run (only complete files get the final name); the
    installer still checks its hash with every other file."""
    path = os.path.join(root, *f.path.split("/"))
    return os.path.isfile(path) and os.path.getsize(path) == f.size


def complete(m: mf.Manifest, bundle_dir: str, base_dir: str) -> Completed:
    """Take every file the delta omits from OLD_DIR into its directory (see the module's
    docstring); BaseError before anything is placed when one cannot be found."""
    taken, already = plan(m, bundle_dir, base_dir)
    return place(bundle_dir, taken, already)


def place(bundle_dir: str, taken: list[Taken], already: int) -> Completed:
    """Link (or copy, across file systems) each planned file into the delta's directory under
    a hidden name, renamed when complete (confined.Confined.link_in: no link there followed)."""
    root = mf.find_root(bundle_dir)
    linked = 0
    try:
        bundle = Confined(root)
    except OSError as exc:
        raise BaseError(f"cannot write into {root}: {exc.strerror or exc}") from None
    with bundle:
        for t in taken:
            try:
                linked += bundle.link_in(t.source, t.path)
            except OSError as exc:
                raise BaseError(
                    f"cannot place {t.path} from {t.source} into {root}: {exc.strerror or exc}"
                ) from None
    return Completed(tuple(taken), linked, already)
