"""Before the install writes into an environment: nothing there may lead it outside the prefix.

pip and uv write by path, so a package directory replaced by a symbolic link to elsewhere makes
them write there. Before any phase installs, each link under the site directories, the scripts
directory (but the interpreter's own links, which a venv makes) and the data directories whose
target leaves the prefix is named and removed, the link itself and never its target (into an
environment this installer did not make, --into-env, it is refused instead unless --repair
asks); the distribution it stood for is then missing and installed again as a real directory.
Under --repair, what the site directories hold that no RECORD lists and came after the install
made the environment (doctor/unlisted.py: a planted .pth, sitecustomize.py, a stray package) is
named and removed too. The baseline that tells what came after is recorded here, once, when the
install makes the venv (or first installs into an existing environment).
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import re
from typing import Callable

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.doctor import unlisted
from verl_bundle.airgap.errors import UsageError
from verl_bundle.airgap.install.dists import SitePaths

_INTERPRETER = re.compile(r"^python(\d+(\.\d+)?)?$")  # bin/python -> the base interpreter
DATA_DIRS = ("include", "share", "etc")


def leaving(prefix: Confined, paths: SitePaths) -> list[tuple[str, str]]:
    """(path relative to the prefix, where it leads) of each link pip or uv could write
    through that leads outside the prefix."""
    found: dict[str, str] = {}
    for site in paths.sites:
        rel = prefix.rel(site)
        if rel is not None:
            found.update(prefix.links_leaving(rel))
    scripts = prefix.rel(paths.scripts)
    if scripts is not None:
        for rel, leads in prefix.links_leaving(scripts, depth=1):
            if not _INTERPRETER.match(os.path.basename(rel)):
                found[rel] = leads
    for name in DATA_DIRS:
        if prefix.exists(name):
            found.update(prefix.links_leaving(name))
    return sorted(found.items())


def clear_links(
    prefix: Confined, paths: SitePaths, say: Callable[[str], None], ours: bool, dry: bool = False
) -> list[str]:
    """Remove (say, and return) each link `leaving` finds; refused in one line, nothing
    changed, into an environment this installer did not make (`ours` False)."""
    links = leaving(prefix, paths)
    if links and not ours:
        shown = "; ".join(f"{rel} -> {leads}" for rel, leads in links[:5])
        raise UsageError(
            f"--into-env {prefix.root}: {len(links)} symbolic link(s) there lead outside it "
            f"({shown}); pip would write through them. Remove them, or pass --repair to let "
            "the installer remove them (never their targets) and install real directories"
        )
    done = []
    for rel, leads in links:
        verb = "would be removed" if dry else "removed (its target is left as it is)"
        if not dry:
            prefix.remove(rel)
        line = f"{rel}: a symbolic link to {leads}, outside the prefix: {verb}"
        say(f"    {line}")
        done.append(line)
    return done


def record_baseline(prefix: Confined) -> None:
    """What the environment holds that no RECORD lists, now, as the baseline (once: an
    existing one is never replaced, or a later plant would become part of it)."""
    if prefix.exists(unlisted.BASELINE):
        return
    found = unlisted.scan(prefix.root, deep=True)
    prefix.write_atomic(unlisted.BASELINE, unlisted.baseline_text(found))


def remove_unlisted(prefix: Confined, say: Callable[[str], None], dry: bool = False) -> list[str]:
    """--repair: each entry the site directories hold that no RECORD lists and that came after
    the install, said and removed: a stray package's whole directory, then what no RECORD lists
    inside the packages (a link leaving the prefix is clear_links')."""
    done = []
    gone: list[str] = []
    for deep in (False, True):
        for stray in unlisted.since_install(prefix.root, deep):
            if stray.leads or any(stray.path.startswith(g) for g in gone):
                continue
            if not dry:
                prefix.remove(stray.path.rstrip("/"))
            gone.append(stray.path)
            line = f"{'would remove' if dry else 'removed'} {stray.line()}"
            say(f"    --repair: {line}")
            done.append(line)
    return done
