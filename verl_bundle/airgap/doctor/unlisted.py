"""What sits in an environment's site directories that no RECORD lists, and the links there
that leave the environment.

Every file pip or uv installs is listed in its distribution's RECORD; a file none lists was put
there by something else. Some run whenever the environment's python starts: a `*.pth` file
(its `import` lines are executed by `site`), `sitecustomize` and `usercustomize`. A link that
leaves the prefix (a package directory replaced by a link to elsewhere) makes the installer
write outside it. The install records what is unlisted when it makes the venv (the baseline,
`<prefix>/.verl-bundle/unlisted.json`: uv's `_virtualenv.pth` and `_virtualenv.py`, or what an
existing environment held before its first install), so only what came later is named: by
readiness (a startup hook fails it, the rest is a warning), by the doctor, and by
`install.sh --repair`, which says so and removes it.

Fast (the default): the entries at the top of each site directory (a stray package shows as its
directory). `deep`: every file below them, `__pycache__` left out. Standard library only,
Python 3.8+.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.contract import records
from verl_bundle.airgap.doctor.fingerprint import site_dirs

BASELINE = ".verl-bundle/unlisted.json"
# What a venv maker writes into a new venv's site directory (uv, virtualenv): the baseline
# where an environment has none recorded.
VENV_MADE = ("_virtualenv.pth", "_virtualenv.py")
STARTUP = ("sitecustomize", "usercustomize")
SHOWN = 5
REPAIR = (
    "run ./install.sh --repair with the same options: it names and removes what no RECORD "
    "lists and reinstalls a package a link replaced (or remove it yourself)"
)


@dataclass(frozen=True)
class Stray:
    """One entry no RECORD lists, or a link leaving the prefix (`leads`: where it leads)."""

    path: str  # relative to the prefix; a directory ends with "/"
    leads: str = ""

    @property
    def startup(self) -> bool:
        """Code the environment's python runs at every start (a .pth, *customize)."""
        name = os.path.basename(self.path.rstrip("/"))
        return name.endswith(".pth") or name.split(".")[0] in STARTUP

    def line(self) -> str:
        if self.leads:
            return f"{self.path.rstrip('/')}: a symbolic link to {self.leads}, outside the prefix"
        what = "runs at every start of python; " if self.startup else ""
        return f"{self.path} ({what}no RECORD lists it)"


def _listed(site: str) -> set[str]:
    """Every path (relative to `site`, normalised) a RECORD in `site` lists, and each of
    their parent directories (as 'dir/')."""
    out: set[str] = set()
    for dist in records.distributions([site]):
        for row in records.rows(os.path.join(dist.path, "RECORD")):
            rel = os.path.normpath(row[0]).replace(os.sep, "/")
            if rel.startswith(".."):
                continue  # a script or data file outside the site directory
            out.add(rel)
            parts = rel.split("/")
            out.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    return out


def _leaves(path: str, prefix_real: str) -> str:
    """Where the link `path` leads when that is outside the prefix, else ""."""
    real = os.path.realpath(path)
    inside = real == prefix_real or real.startswith(prefix_real.rstrip(os.sep) + os.sep)
    return "" if inside else real


def scan(prefix: str, deep: bool = False) -> list[Stray]:
    """The environment at `prefix` as it is now: what no RECORD lists and the links leaving
    it, in its site directories (sorted). A directory no RECORD lists anything in is one entry
    ("stray/"); `deep` also looks inside the others, file by file."""
    real = os.path.realpath(prefix)
    out: list[Stray] = []
    for site in site_dirs(prefix):
        listed = _listed(site)
        base = os.path.relpath(site, prefix).replace(os.sep, "/")
        for rel, is_dir, is_link in _entries(site, listed if deep else None):
            full = os.path.join(site, rel)
            leads = _leaves(full, real) if is_link else ""
            if leads:
                out.append(Stray(f"{base}/{rel}", leads))
            elif (rel + "/" if is_dir else rel) not in listed:
                out.append(Stray(f"{base}/{rel}" + ("/" if is_dir else "")))
    return sorted(out, key=lambda s: s.path)


def _entries(site: str, listed: set[str] | None) -> Iterable[tuple[str, bool, bool]]:
    """(path relative to `site`, a directory, a link) of what is judged: the top entries, and
    with `listed` (deep) every file and link inside the directories a RECORD lists anything in
    (a link is not followed); dist-info directories (install/dists.py judges their contents)
    and bytecode left out."""
    try:
        top = sorted(os.scandir(site), key=lambda e: e.name)
    except OSError:
        return
    for entry in top:
        name = entry.name
        if name == "__pycache__" or name.endswith(".dist-info"):
            continue
        link = entry.is_symlink()
        is_dir = entry.is_dir(follow_symlinks=False)
        yield name, is_dir and not link, link
        if listed is None or not is_dir or name + "/" not in listed:
            continue
        for dirpath, dirnames, filenames in os.walk(entry.path):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            here = os.path.relpath(dirpath, site).replace(os.sep, "/")
            for d in list(dirnames):
                if os.path.islink(os.path.join(dirpath, d)):
                    yield f"{here}/{d}", False, True
            for f in sorted(filenames):
                if not f.endswith(".pyc"):
                    yield f"{here}/{f}", False, os.path.islink(os.path.join(dirpath, f))


# -- the baseline ---------------------------------------------------------------------------------


def baseline(prefix: str) -> set[str] | None:
    """The paths the install recorded as unlisted when it made the environment, or None."""
    try:
        with open(os.path.join(prefix, BASELINE), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    paths = doc.get("unlisted") if isinstance(doc, dict) else None
    if not isinstance(paths, list):
        return None
    return {str(p) for p in paths}


def baseline_text(found: Iterable[Stray]) -> str:
    """The baseline file's text for what `scan(prefix, deep=True)` found (links left out: one
    leaving the prefix is never accepted)."""
    paths = sorted(s.path for s in found if not s.leads)
    return json.dumps({"schema": 1, "unlisted": paths}, indent=1) + "\n"


def _known(stray: Stray, accepted: set[str]) -> bool:
    if stray.leads:
        return False
    if stray.path in accepted:
        return True
    # A top entry (fast) is known when the deep baseline holds it or anything below it.
    return stray.path.endswith("/") and any(p.startswith(stray.path) for p in accepted)


def since_install(prefix: str, deep: bool = False) -> list[Stray]:
    """What is unlisted at `prefix` and was not when the install made the environment (without
    a recorded baseline: anything but what a venv maker writes), and every link leaving it."""
    accepted = baseline(prefix)
    if accepted is None:
        accepted = {
            f"{os.path.relpath(s, prefix)}/{n}" for s in site_dirs(prefix) for n in VENV_MADE
        }
    return [s for s in scan(prefix, deep) if not _known(s, accepted)]


def shown(found: list[Stray]) -> str:
    lines = [s.line() for s in found[:SHOWN]]
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return "; ".join(lines) + more


def check(prefix: str | None, deep: bool = False) -> Check:
    """Readiness's `unlisted` check: a startup hook no RECORD lists fails it (the trainer would
    run code nobody installed); other unlisted files and links leaving the prefix are a
    warning (a link a user made on purpose runs the same code; --repair removes it)."""
    if not prefix or not site_dirs(prefix):
        return Check("unlisted", "skip", "no environment to examine")
    found = since_install(prefix, deep)
    if not found:
        return Check("unlisted", "ok", "every entry of the site directories is listed in a RECORD")
    bad = [s for s in found if s.startup]
    status = "fail" if bad else "warn"
    detail = (
        "code no installed distribution brought runs whenever this environment's python starts"
        if bad
        else "files no installed distribution brought sit in the environment, or a path of "
        "it leads outside it (a reinstall would write there)"
    )
    return Check(
        "unlisted",
        status,
        f"{len(found)} not installed by the bundle: {shown(bad or found)}",
        detail,
        REPAIR,
        "site-packages",
    )
