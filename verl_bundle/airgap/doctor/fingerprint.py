"""The environment fingerprint, recomputed live from what is installed: every distribution's
name, version and RECORD, and whether its files are there as recorded. Nodes of one Ray
cluster must show the same one, so a package removed on one node or a file deleted from its
venv changes that node's fingerprint, and the fleet report names the distribution.

Fast (the default): each file a RECORD lists must exist at its recorded size (a stat per file,
under a second for the real stack). Given what the install recorded (`since`: per distribution,
a digest of each file's path, inode, size, mtime and ctime), a distribution whose digest changed
is also hashed against its RECORD: an edit that keeps a file's size is seen (a write changes
the ctime, which no user can set back), and an untouched environment costs no read. `deep`:
each file is hashed against its RECORD (or another owner's hash of the same path,
contract/records.py). What an installer writes itself and so
differs by node or installer is left out of the digest: the dist-info's INSTALLER, REQUESTED,
direct_url.json, RECORD and uv's uv_cache.json (a time), bytecode, and the contents of files
outside the site directory (console scripts carry the venv's absolute path in their first
line; only their presence counts). The install writes the fingerprint it ended with into <prefix>/.verl-bundle/
(`fingerprint`: the hash, the Ansible play's installed marker; `fingerprint.json`: per
distribution; `fingerprint-stat.json`: the stat digests), so the doctor also says what changed
on this node since it was installed.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import records
from verl_bundle.airgap.contract.manifest import canonical

FINGERPRINT = Path(".verl-bundle") / "fingerprint"
RECORDED = Path(".verl-bundle") / "fingerprint.json"
STATS = Path(".verl-bundle") / "fingerprint-stat.json"
# Written by the installer, so they differ by node or run: uv's uv_cache.json holds a time.
OWN = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json", "uv_build.json")
SHOWN = 3  # files named per distribution in an entry


@dataclass(frozen=True)
class Installed:
    """One installed distribution: its RECORD's digest and the files not as recorded."""

    name: str  # canonical
    version: str
    digest: str  # sha256 over the RECORD rows every node shares
    problems: tuple[str, ...] = ()  # "pkg/x.py missing", "pkg/y.so is 10 bytes, not 12"
    where: str = ""  # its dist-info directory, relative to the prefix
    stats: str = ""  # sha256 over each file's (path, inode, size, mtime, ctime): this node's own

    def entry(self) -> str:
        """What the doctor reports and the fleet report compares, in one line."""
        text = f"{self.version} {self.digest[:12]}"
        if self.problems:
            more = len(self.problems) - SHOWN
            shown = "; ".join(self.problems[:SHOWN]) + (f"; and {more} more" if more > 0 else "")
            text += f" ({len(self.problems)} file(s) not as recorded: {shown})"
        return text

    def line(self) -> str:
        return f"{self.name}=={self.version} {self.digest} {';'.join(self.problems)}"


@dataclass(frozen=True)
class Environment:
    """Every distribution of an environment, as found now."""

    distributions: tuple[Installed, ...]
    deep: bool = False
    hashed: tuple[str, ...] = ()  # distributions hashed because their files changed since install

    @property
    def fingerprint(self) -> str:
        lines = sorted(d.line() for d in self.distributions)
        return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()

    def entries(self) -> dict[str, str]:
        """name -> entry (two dist-infos of one name, a half-replaced install: both, joined)."""
        out: dict[str, str] = {}
        for d in sorted(self.distributions, key=lambda d: (d.name, d.version)):
            out[d.name] = f"{out[d.name]} + {d.entry()}" if d.name in out else d.entry()
        return out

    def damaged(self) -> list[str]:
        return [f"{d.name}: {d.problems[0]}" for d in self.distributions if d.problems]

    def stats(self) -> dict[str, str]:
        """dist-info directory -> its stat digest, as `write` records them."""
        return {d.where: d.stats for d in self.distributions if d.where}


def site_dirs(prefix: str) -> list[str]:
    """The site directories of the environment at `prefix` (a venv or conda env), found on
    disk without starting its interpreter; lib64 -> lib links counted once."""
    found: dict[str, str] = {}
    for lib in ("lib", "lib64"):
        for site in sorted(
            glob.glob(os.path.join(glob.escape(prefix), lib, "python3*", "site-packages"))
        ):
            if os.path.isdir(site):
                found.setdefault(os.path.realpath(site), site)
    return list(found.values())


def _dist_infos(sites: Iterable[str]) -> list[tuple[str, str, str, str]]:
    """(site, dist-info directory name, name, version) of each distribution."""
    return [(d.site, d.entry, canonical(d.name), d.version) for d in records.distributions(sites)]


Sizes = Dict[str, List[str]]  # normalised path -> every owner's recorded size


def _shared(rows: list[tuple[str, str, str]], own: str) -> list[tuple[str, str, str]]:
    """The rows every node's install of one wheel records alike."""
    skip = {f"{own}/{name}" for name in OWN}
    return [r for r in rows if r[0] not in skip and not r[0].endswith(".pyc")]


def _check(
    site: str,
    row: tuple[str, str, str],
    deep: bool,
    index: records.Owners,
    sizes: Sizes,
    seen: list[str] | None = None,
) -> str | None:
    """Why the file a row lists is not as recorded, or None; its stat line goes to `seen`."""
    rel, recorded, size = row
    path = os.path.normpath(os.path.join(site, rel))
    try:
        st = os.stat(path)
    except OSError:
        if seen is not None:
            seen.append(f"{rel}\0missing\n")
        return f"{rel} missing"
    if seen is not None:
        seen.append(f"{rel}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n")
    if rel.startswith(".."):
        return None  # a script or data file outside site-packages: its presence counts
    if size.isdigit() and str(st.st_size) not in sizes.get(path, [size]):
        return f"{rel} is {st.st_size} bytes, not {size}"
    if deep and recorded.startswith("sha256="):
        try:
            if not records.as_recorded(path, recorded[len("sha256=") :], index):
                return f"{rel} differs from its RECORD"
        except OSError:
            return f"{rel} cannot be read"
    return None


def examine(prefix: str, deep: bool = False, since: dict[str, str] | None = None) -> Environment:
    """The environment at `prefix` as it is now: every file stat'ed; hashed with `deep`, and
    with `since` (the stat digests its install recorded) each distribution's files whose
    digest is not the recorded one."""
    infos = _dist_infos(site_dirs(prefix))
    table: list[tuple[str, str, str, str, list[tuple[str, str, str]]]] = []
    index: records.Owners = {}
    sizes: Sizes = {}
    for site, info, name, version in infos:
        rows = [
            (r[0], r[1] if len(r) > 1 else "", r[2] if len(r) > 2 else "")
            for r in records.rows(os.path.join(site, info, "RECORD"))
        ]
        rows = _shared(rows, info)
        for rel, recorded, size in rows:
            path = os.path.normpath(os.path.join(site, rel))
            if recorded.startswith("sha256="):
                index.setdefault(path, set()).add(recorded[len("sha256=") :])
            if size.isdigit():
                sizes.setdefault(path, []).append(size)
        table.append((site, info, name, version, rows))
    found = []
    hashed = []
    for site, info, name, version, rows in table:
        digest = hashlib.sha256()
        for rel, recorded, size in sorted(rows):
            outside = rel.startswith("..")
            digest.update(
                f"{rel}\0{'' if outside else recorded}\0{'' if outside else size}\n".encode()
            )
        where = os.path.relpath(os.path.join(site, info), prefix)
        seen: list[str] = []
        if not rows:
            problems: tuple[str, ...] = ("no RECORD",)
        else:
            checked = [_check(site, row, deep, index, sizes, seen) for row in sorted(rows)]
            problems = tuple(p for p in checked if p)
        stats = hashlib.sha256("".join(seen).encode("utf-8", "surrogateescape")).hexdigest()
        if since is not None and not deep and rows and since.get(where) != stats:
            # Changed since install (or new): its files hashed, a same-size edit named.
            hashed.append(name)
            checked = [_check(site, row, True, index, sizes) for row in sorted(rows)]
            problems = tuple(p for p in checked if p)
        found.append(Installed(name, version, digest.hexdigest(), problems, where, stats))
    return Environment(tuple(found), deep, tuple(hashed))


# -- what the install left ----------------------------------------------------------------------


def write(prefix: str, env: Environment | None = None, into: Confined | None = None) -> str:
    """Record the environment at `prefix` as the install leaves it (`env`: examined already,
    while post-install ran); return its fingerprint. Written through `into` (the install's
    descriptor of the prefix, airgap/confined.py), or one opened here."""
    env = examine(prefix) if env is None else env
    confined = into or Confined(prefix)
    try:
        for path, text in (
            (RECORDED, json.dumps(env.entries(), indent=1, sort_keys=True)),
            (STATS, json.dumps(env.stats(), indent=0, sort_keys=True)),
            (FINGERPRINT, env.fingerprint),
        ):  # the hash last: a marker is never ahead of its entries
            confined.write_atomic(path.as_posix(), text + "\n")
    finally:
        if into is None:
            confined.close()
    return env.fingerprint


def record(prefix: str, env: Environment | None = None, into: Confined | None = None) -> str | None:
    """`write`, for the installer's last step: None when the prefix is not writable."""
    try:
        return write(prefix, env, into)
    except OSError:
        return None


def read(prefix: str | None) -> str | None:
    """The fingerprint the install wrote under `prefix`, or None."""
    if not prefix:
        return None
    try:
        text = (Path(prefix) / FINGERPRINT).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None


def read_entries(prefix: str) -> dict[str, str] | None:
    """The per-distribution entries the install wrote, or None (none, or not readable)."""
    try:
        doc = json.loads((Path(prefix) / RECORDED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    return {str(k): str(v) for k, v in doc.items()}


def read_stats(prefix: str) -> dict[str, str] | None:
    """The stat digests the install recorded, or None (none: an install before they were, or
    not readable; the doctor then compares sizes only)."""
    try:
        doc = json.loads((Path(prefix) / STATS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    return {str(k): str(v) for k, v in doc.items()}


def changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two entry maps, one line per distribution."""
    out = []
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name), now.get(name)
        if old == new:
            continue
        if new is None:
            out.append(f"{name} {str(old).split()[0]} removed")
        elif old is None:
            out.append(f"{name} {new.split()[0]} added")
        else:
            out.append(f"{name}: {new}")
    return out
