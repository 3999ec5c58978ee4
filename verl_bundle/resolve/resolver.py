"""Resolution: a profile and a target in, a Lock out (one file per package, hash and size).

uv resolves for the target (uvcompile.py), with the upload-date cut-off where the index can
honour it; direct artifacts replace what it picked where they fit (artifacts.py). Then the
sizes and hashes an index did not give are filled in, and every package is classified by kind,
role and phase: the lock (lock.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from packaging.requirements import Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename

from verl_bundle.credentials import split_credentials
from verl_bundle.errors import ResolutionError
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.index import read_project
from verl_bundle.profile.model import DEFAULT_INDEX, Profile, SourceBuild
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter
from verl_bundle.resolve.artifacts import apply_artifacts
from verl_bundle.resolve.lock import BOOTSTRAP_PHASE, Kind, Lock, LockedPackage, Role, now
from verl_bundle.resolve.uvcompile import Candidate, resolve


def lock_profile(
    profile: Profile, target: Target, downloader: Downloader, reporter: Reporter
) -> Lock:
    """Resolve `profile` for `target` and return the lock; raises on any conflict or failure."""
    cutoff = _cutoff(profile, downloader, reporter)
    reporter.status(f"resolving {profile.name} for {target.describe()} ...")
    chosen = resolve(profile, target, cutoff, (), downloader)
    chosen = apply_artifacts(profile, target, chosen, downloader, reporter)
    builds = server_builds(profile, chosen)
    if builds:
        # The server will build these sdists: their build requirements join the stack, resolved
        # together with it so that one version of each lands in the venv (--no-build-isolation).
        extra = tuple(r for b in builds for r in b.build_requires)
        chosen = resolve(profile, target, cutoff, extra, downloader)
        chosen = apply_artifacts(profile, target, chosen, downloader, reporter)
        builds = server_builds(profile, chosen)
    overrides = tuple(o for o in profile.overrides if not Requirement(o).url)
    return lock_of(profile, target, chosen, builds, downloader, cutoff, overrides)


def lock_of(
    profile: Profile,
    target: Target,
    chosen: dict[str, Candidate],
    builds: list[SourceBuild],
    downloader: Downloader,
    cutoff: str | None,
    overrides: tuple[str, ...],
) -> Lock:
    """The lock of the chosen files: the sizes and hashes an index did not give filled in,
    each package classified, and the locations it uses named without their credentials."""
    chosen = _complete(chosen, downloader)
    packages = tuple(_classify(profile, c, builds) for c in chosen.values())
    locations = {
        name: split_credentials(loc.url)[0] if loc.url else ""
        for name, loc in sorted(profile.locations.items())
        if name in {p.location for p in packages} or name == DEFAULT_INDEX
    }
    return Lock(
        profile=profile.name,
        profile_sha256=profile.sha256,
        target=target,
        cuda=profile.cuda,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        locations=locations,
        exclude_newer=cutoff,
        created=now(),
        overrides=overrides,
    )


# -- the upload-date cut-off ---------------------------------------------------------------


def _cutoff(profile: Profile, downloader: Downloader, reporter: Reporter) -> str | None:
    """The cut-off, if the default index can honour it (it must give upload times)."""
    if not profile.exclude_newer:
        return None
    index = profile.location(DEFAULT_INDEX)
    if index.url is None:
        return profile.exclude_newer  # the resolver's default index gives upload times
    probe_pkg = next(
        (
            canonicalize_name(Requirement(r).name)
            for r in profile.requirements
            if canonicalize_name(Requirement(r).name) not in profile.bindings
        ),
        None,
    )
    if probe_pkg is None:
        return None
    # Transport failures (TLS, DNS, credentials, refused) are raised as what they are; only
    # a page that is there but has no upload times makes the note below.
    page = read_project(downloader.http, index.url, probe_pkg, f"location {DEFAULT_INDEX}")
    if page is not None and page.is_json and any(f.upload_time for f in page.files):
        return profile.exclude_newer
    reporter.note(
        f"note: {index.describe()} gives no upload times, so the profile's cut-off "
        f"{profile.exclude_newer} is not applied (it would exclude every file); the resolution "
        "follows the mirror's contents: prefer building from a lock made where the cut-off works"
    )
    return None


# -- the lock's packages ----------------------------------------------------------------------


def server_builds(profile: Profile, chosen: Mapping[str, Candidate]) -> list[SourceBuild]:
    """Declared source builds whose chosen file is an sdist: the server compiles these."""
    return [
        b
        for b in profile.source_builds
        if (c := chosen.get(canonicalize_name(b.package))) is not None and not c.file.is_wheel
    ]


def _complete(chosen: dict[str, Candidate], downloader: Downloader) -> dict[str, Candidate]:
    """Fill in sizes (HEAD) and hashes (download) an index did not give."""
    missing = [c for c in chosen.values() if c.file.size is None or not c.file.sha256]

    def fill(c: Candidate) -> Candidate:
        if not c.file.sha256:
            got = downloader.fetch(Want(c.name, c.file.filename, c.file.url, c.location))
            return replace(c, file=replace(c.file, sha256=got.sha256, size=got.size))
        probe = downloader.probe(c.file.url)
        return replace(c, file=replace(c.file, size=probe.size)) if probe.size else c

    for done in downloader.parallel(fill, missing):
        chosen[done.name] = done
    return chosen


def _classify(profile: Profile, c: Candidate, builds: list[SourceBuild]) -> LockedPackage:
    bootstrap = {canonicalize_name(Requirement(r).name) for r in profile.bootstrap}
    built_here = {canonicalize_name(b.package) for b in builds}
    build_deps = {canonicalize_name(Requirement(r).name) for b in builds for r in b.build_requires}
    role: Role = (
        "bootstrap"
        if c.name in bootstrap
        else "build-dep"
        if c.name in build_deps
        else "requirement"
    )
    kind: Kind
    if c.file.is_wheel:
        kind = "wheel"
    elif c.name in built_here:
        kind = "sdist"
    else:
        _check_sdist_name(c)
        kind = "host-build"
    phase = BOOTSTRAP_PHASE if role == "bootstrap" else profile.phase_of(c.name)
    return LockedPackage(c.name, c.version, c.file, c.location, kind, role, phase)


def _check_sdist_name(c: Candidate) -> None:
    try:
        parse_sdist_filename(c.file.filename)
    except InvalidSdistFilename:
        raise ResolutionError(
            f"{c.name} {c.version}: {c.file.filename} is neither a wheel nor an sdist"
        ) from None
