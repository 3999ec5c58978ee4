"""What is installed, read from the environment's own metadata (run by its python): every
bundled distribution at its version, every file as its RECORD says, every declared
requirement met. Standard library only, Python 3.8+ (importlib.metadata).
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Iterable

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.contract import records
from verl_bundle.airgap.contract.manifest import Manifest, canonical

# A plain rerun trusts the phases it finished; --repair checks every file and reinstalls,
# offline, exactly the distributions that differ (install/phases.py `differing`).
RERUN = (
    "run ./install.sh --repair with the same options: it reinstalls, offline, exactly the "
    "distributions whose files or versions differ from the bundle"
)


def _named() -> list[metadata.Distribution]:
    return [d for d in metadata.distributions() if d.metadata["Name"]]


def check_versions(manifest: Manifest) -> list[Check]:
    """Every distribution the bundle installs (less the phases left out) is present at the
    bundled version."""
    installed = {canonical(d.metadata["Name"]): d.version for d in _named()}
    missing, wrong = [], []
    for entry in manifest.installed:
        name = canonical(entry.name)
        got = installed.get(name)
        if got is None:
            missing.append(name)
        elif got.lower() != entry.version.lower():
            wrong.append(f"{name} {got} (bundle: {entry.version})")
    if missing or wrong:
        found = ["missing " + m for m in missing] + ["wrong " + w for w in wrong]
        return [Check("versions", "fail", "not as bundled: " + "; ".join(found), fix=RERUN)]
    count = len(manifest.installed)
    return [Check("versions", "ok", f"{count} distributions installed at the bundled versions")]


def _record_files(dist: metadata.Distribution) -> Iterable[tuple[str, str]]:
    for entry in dist.files or []:
        if entry.hash is not None and entry.hash.mode == "sha256":
            yield str(entry.locate()), entry.hash.value


def check_files(manifest: Manifest) -> list[Check]:
    """Every installed file of the bundled distributions matches its RECORD hash, or the hash
    of another distribution that wrote the same path (contract/records.py): nothing was left
    half-written by an interrupted install."""
    wanted = {canonical(e.name) for e in manifest.installed}
    dists = _named()
    index: records.Owners = {}
    for dist in dists:
        for path, value in _record_files(dist):
            index.setdefault(os.path.normpath(path), set()).add(value)
    bad: list[str] = []
    checked = 0
    for dist in dists:
        name = dist.metadata["Name"]
        if canonical(name) not in wanted:
            continue
        for path, value in _record_files(dist):
            checked += 1
            try:
                if not records.as_recorded(path, value, index):
                    bad.append(f"{name}: {path} differs from its RECORD")
            except OSError:
                bad.append(f"{name}: {path} missing")
    if bad:
        return [
            Check(
                "files",
                "fail",
                f"{len(bad)} installed files are not as their wheels recorded: "
                + "; ".join(bad[:5]),
                fix=RERUN,
            )
        ]
    return [Check("files", "ok", f"{checked} installed files match their RECORD hashes")]


REPLACED = (
    "the bundle installs exactly its lock with --no-deps; a requirement the profile "
    "replaced on purpose (e.g. cupy for CUDA 11) shows up here"
)


def requirements_of(pip_check: Check) -> Check:
    """The requirements check from a `uv pip check` run (probing.pip_check): the same finding
    as check_requirements, from the tool that installed the environment."""
    if pip_check.status == "ok":
        return Check("requirements", "ok", "every requirement is met", subject=pip_check.subject)
    if pip_check.status == "fail":
        return Check("requirements", "warn", pip_check.summary, fix=REPLACED)
    return Check("requirements", "skip", pip_check.summary, subject=pip_check.subject)


def check_requirements() -> list[Check]:
    """What `pip check` does, without starting pip: every installed distribution's declared
    requirements are installed at versions they accept. Uses the packaging copy inside the
    environment's pip (the bundle brings pip); skipped where there is none."""
    try:
        from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
        from pip._vendor.packaging.utils import canonicalize_name
    except ImportError:
        return [Check("requirements", "skip", "pip is not installed here: not checked")]
    dists = _named()
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in dists}
    problems: list[str] = []
    for dist in dists:
        for text in dist.requires or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            have = installed.get(canonicalize_name(req.name))
            if have is None:
                problems.append(f"{dist.metadata['Name']} requires {req.name}, not installed")
            elif not req.specifier.contains(have, prereleases=True):
                problems.append(f"{dist.metadata['Name']} requires {req}, {have} is installed")
    if not problems:
        return [Check("requirements", "ok", f"{len(dists)} distributions' requirements are met")]
    return [
        Check(
            "requirements",
            "warn",
            "; ".join(sorted(problems)[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""),
            fix=REPLACED,
        )
    ]
