"""Installed distributions' RECORD files: which file each one wrote, with which sha256.

Two distributions may own one path (fastapi and fastapi-cli both list bin/fastapi): whichever
was installed last wrote it, so the other's RECORD hash for that path is stale, not damage. The
`Owners` index knows every owner's hash of each path, and a file is as recorded when it matches
one of them. The installer's resume (install/dists.py) and post-install's file check
(postinstall/installed.py) both judge files through it; the installer and the doctor's
fingerprint both find distributions with the one scanner here (`distributions`). Standard
library only, Python 3.8+.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, Set

_DIST_INFO = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info$")


@dataclass(frozen=True)
class Distribution:
    """One `NAME-VERSION.dist-info` directory found in a site directory."""

    name: str  # as the directory spells it (canonicalise it to compare)
    version: str
    site: str
    entry: str  # the directory's name

    @property
    def path(self) -> str:
        return os.path.join(self.site, self.entry)


def distributions(sites: Iterable[str]) -> list[Distribution]:
    """Every distribution of `sites`, each site's in name order; an unreadable site has none."""
    out = []
    for site in sites:
        try:
            names = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in names:
            m = _DIST_INFO.match(entry)
            if m and os.path.isdir(os.path.join(site, entry)):
                out.append(Distribution(m.group("name"), m.group("version"), site, entry))
    return out


def rows(record: str) -> list[list[str]]:
    """A RECORD's rows (path, hash, size); none when it is missing or unreadable."""
    try:
        with open(record, encoding="utf-8", newline="") as fh:
            return [row for row in csv.reader(fh) if row]
    except (OSError, csv.Error, UnicodeDecodeError):
        return []


def digest(path: str) -> str:
    """A file's sha256 as RECORD writes it (urlsafe base64, no padding)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


Owners = Dict[str, Set[str]]  # normalised absolute path -> the sha256 values its owners recorded


def owners(records: Iterable[tuple[str, str]]) -> Owners:
    """The index over (site directory, RECORD path) pairs of every installed distribution."""
    index: Owners = {}
    for site, record in records:
        for row in rows(record):
            if len(row) >= 2 and row[1].startswith("sha256="):
                path = os.path.normpath(os.path.join(site, row[0]))
                index.setdefault(path, set()).add(row[1][len("sha256=") :])
    return index


def as_recorded(path: str, recorded: str, index: Owners) -> bool:
    """Whether the file at `path` matches `recorded`, or another owner's hash of that path."""
    got = digest(path)
    return got == recorded or got in index.get(os.path.normpath(path), ())
