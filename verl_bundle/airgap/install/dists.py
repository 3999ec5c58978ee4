"""Installed distributions, read and removed by their files, never through pip or uv.

An install killed while pip or uv unpacks a wheel leaves a distribution half written: files
without a RECORD, or a RECORD whose files are missing or differ. Asking the installer to
reinstall it then fails (`uninstall-no-record-file`) and every rerun fails the same way. So
before a phase is installed again, each of its distributions that is not complete is removed
here by its files: those its RECORD lists, and those its wheel in the bundle would write.
"""

from __future__ import annotations

import contextlib
import os
import stat
import zipfile
from dataclasses import dataclass
from typing import Iterable

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import records
from verl_bundle.airgap.contract.manifest import canonical


@dataclass(frozen=True)
class SitePaths:
    """Where the target environment keeps what a wheel installs (sysconfig of its python)."""

    prefix: str
    purelib: str
    platlib: str
    scripts: str
    data: str

    @property
    def sites(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.purelib, self.platlib)))


@dataclass(frozen=True)
class Dist:
    name: str  # canonical
    version: str
    path: str  # the .dist-info directory
    site: str  # the directory it sits in

    @property
    def record(self) -> str:
        return os.path.join(self.path, "RECORD")


def installed(paths: SitePaths) -> list[Dist]:
    """Every distribution found in the environment's site directories."""
    return [
        Dist(canonical(d.name), d.version, d.path, d.site)
        for d in records.distributions(paths.sites)
    ]


def _record_rows(dist: Dist) -> list[list[str]]:
    return records.rows(dist.record)


def owners(found: Iterable[Dist]) -> records.Owners:
    """Every recorded hash of every path the distributions in `found` wrote."""
    return records.owners((d.site, d.record) for d in found)


def problem(dist: Dist, check_hashes: bool, index: records.Owners | None = None) -> str | None:
    """Why the distribution is not completely installed, or None. Without `check_hashes` only
    the RECORD's presence is checked (cheap); with it, every recorded file and its hash. A
    path another installed distribution also wrote (`index`, see contract/records.py) may hold
    that one's version of the file."""
    rows = _record_rows(dist)
    if not rows:
        return "no RECORD (it was being unpacked)"
    own = os.path.basename(dist.path) + "/"
    if not any(row[0] == own + "INSTALLER" for row in rows):
        # pip and uv both end by writing INSTALLER and listing it in RECORD: a RECORD without
        # it is the wheel's own, copied before the installer was stopped.
        return "its RECORD does not list INSTALLER (the installer stopped before its last step)"
    if not check_hashes:
        # Cheap, and catches an installer stopped between RECORD and its last metadata files
        # (INSTALLER, REQUESTED): the dist-info's own listed files must all be there.
        for row in rows:
            if row[0].startswith(own) and not os.path.isfile(os.path.join(dist.site, row[0])):
                return f"{row[0]} is missing"
        return None
    listed = set()
    for row in rows:
        path = os.path.normpath(os.path.join(dist.site, row[0]))
        listed.add(path)
        if not os.path.isfile(path):
            return f"{row[0]} is missing"
        if len(row) < 2 or not row[1].startswith("sha256="):
            continue
        if not records.as_recorded(path, row[1][len("sha256=") :], index or {}):
            return f"{row[0]} differs from its RECORD"
    # A file the installer was writing when it stopped (a temporary name) is not in RECORD.
    for name in os.listdir(dist.path):
        if os.path.normpath(os.path.join(dist.path, name)) not in listed:
            return f"{os.path.basename(dist.path)}/{name} is not in its RECORD"
    return None


def wheel_targets(wheel: str, site: str, paths: SitePaths) -> list[str]:
    """Where the files of `wheel` go when installed into `site` (a wheel's .data/ directories
    map to the scripts and data directories)."""
    out: list[str] = []
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return out
    for name in names:
        if name.endswith("/"):
            continue
        parts = name.split("/")
        if parts[0].endswith(".data") and len(parts) > 2:
            base = {
                "purelib": site,
                "platlib": site,
                "scripts": paths.scripts,
                "data": paths.data,
            }.get(parts[1])
            if base is not None:
                out.append(os.path.join(base, *parts[2:]))
            continue
        out.append(os.path.join(site, *parts))
    return out


def _inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def remove(dist: Dist, paths: SitePaths, wheel: str | None = None) -> int:
    """Delete the distribution's files (RECORD's and, when given, those its wheel would write)
    and its .dist-info directory; only paths inside the environment are touched, each through
    one descriptor of the prefix (airgap/confined.py: a link on the way is never followed, a
    link itself is removed, not its target). Returns the number of files removed."""
    files = [os.path.normpath(os.path.join(dist.site, row[0])) for row in _record_rows(dist)]
    if wheel is not None:
        files += wheel_targets(wheel, dist.site, paths)
    removed = 0
    dirs = set()
    with Confined(paths.prefix) as prefix:
        for path in dict.fromkeys(files):
            rel = prefix.rel(path)
            if rel is None or _inside(path, dist.path):
                continue
            st = prefix.lstat(rel)
            if st is None or stat.S_ISDIR(st.st_mode):
                continue
            with contextlib.suppress(OSError):
                prefix.remove(rel)
                removed += 1
                dirs.add(os.path.dirname(rel))
        info = prefix.rel(dist.path)
        if info is not None:
            with contextlib.suppress(OSError):
                prefix.remove(info)
        _prune(prefix, dirs, paths)
    return removed


def _prune(prefix: Confined, dirs: Iterable[str], paths: SitePaths) -> None:
    """Remove directories left empty (and their __pycache__), up to the site directories."""
    stop = {prefix.rel(p) for p in (*paths.sites, paths.scripts, paths.data)} | {""}
    for start in sorted(dirs, key=len, reverse=True):
        d = start
        while d and d not in stop:
            entries = prefix.listdir(d)
            if entries == ["__pycache__"]:
                with contextlib.suppress(OSError):
                    prefix.remove(f"{d}/__pycache__")
                entries = []
            if entries or not prefix.rmdir(d):
                break
            d = os.path.dirname(d)
