"""Sources resolved with the stack: verl from `--verl SPEC` (or the profile's `verl`), and any
requirement `name @ file://...` or `name @ git+URL@REV`, each made into a wheel on this host
(sources/sourcebuild.py) and handed to uv as that wheel, never as a directory or a git URL (a
fork's own `[tool.uv.sources]` and git hosts never reach the resolver).

The rest of the stack stays the profile's: its own pins as they are, and the versions of its
committed lock (for the same target) as constraints. A fork's requirement that disagrees with
one of the profile's own pins stops the resolution with one line per clash (which requirement,
whose pin, what to change); one that disagrees with a version the committed lock only happened
to choose lets that package be resolved again, which a note says.
"""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verl_bundle.errors import LockError, ResolutionError
from verl_bundle.net.download import Downloader, Want
from verl_bundle.profile.model import Profile
from verl_bundle.profile.sources import (
    BUILT,
    Release,
    SourceSpec,
    parse_spec,
    requirement_source,
    with_extras,
)
from verl_bundle.profile.target import Target
from verl_bundle.resolve.lock import LOCAL, Lock, LockedPackage
from verl_bundle.resolve.uvcompile import release_of
from verl_bundle.sources.sourcebuild import BuiltSource, SourceBuilder


@dataclass(frozen=True)
class Prepared:
    """The profile as uv is to see it (built sources as wheels, the committed lock's versions
    as constraints), the wheels made, and what to tell the user."""

    profile: Profile
    built: Mapping[str, BuiltSource]
    notes: tuple[str, ...]


def specs_of(profile: Profile) -> dict[str, SourceSpec]:
    """Every source of the profile that is not an index's release, by package name."""
    found: dict[str, SourceSpec] = {}
    for text in profile.requirements:
        req = requirement_source(text)
        if req is not None:
            found[req.name] = req.spec
    if profile.verl is not None:
        found["verl"] = parse_spec(profile.verl, "--verl")
    return found


def has_sources(profile: Profile) -> bool:
    return profile.verl is not None or any(
        requirement_source(t) is not None for t in profile.requirements
    )


def prepare(
    profile: Profile, target: Target, builder: SourceBuilder, stack: Lock | None
) -> Prepared:
    """Build every source of `profile`, then rewrite its requirements to those wheels."""
    specs = specs_of(profile)
    built = {
        name: builder.make(name, spec) for name, spec in specs.items() if isinstance(spec, BUILT)
    }
    notes = [n for b in built.values() for n in b.notes]
    release = specs.get("verl")
    requirements = _rewrite(profile, built, release if isinstance(release, Release) else None)
    pins = _profile_pins(profile, built)
    # verl's own version is the one asked (a release), never the committed lock's.
    locked = {n: v for n, v in _locked_pins(profile, stack, built).items() if n != "verl"}
    hard: list[str] = []
    again: set[str] = set()
    overrides = list(profile.overrides)
    overridden = {canonicalize_name(Requirement(o).name) for o in profile.overrides}
    for name, b in built.items():
        extras = _extras_asked(profile, name)
        for req, extra in active_requirements(b, extras, target):
            dep = canonicalize_name(req.name)
            if req.url:
                if dep in built:
                    if dep not in overridden:
                        overrides.append(f"{dep} @ {built[dep].url}")
                        overridden.add(dep)
                elif dep not in overridden:
                    hard.append(_url_line(b, req, extra))
                continue
            if dep in pins and not _allows(req, pins[dep]):
                hard.append(_pin_line(profile, b, req, extra, pins[dep]))
            elif dep in locked and not _allows(req, locked[dep]) and dep not in again:
                again.add(dep)
                notes.append(
                    f"note: {b.name} from {b.source.describe()} requires {req.name}"
                    f"{req.specifier}{_for_extra(extra)}; the committed lock of profile "
                    f"{profile.name} has {dep} {locked[dep]}: resolved again for your tree"
                )
    if hard:
        raise ResolutionError("\n".join(dict.fromkeys(hard)))
    constraints = [*profile.constraints]
    constrained = {canonicalize_name(Requirement(c).name) for c in constraints}
    constraints += [
        f"{n}=={v}"
        for n, v in sorted(locked.items())
        if n not in again and n not in constrained and n not in overridden
    ]
    if "verl" in built:
        notes.extend(_version_note(profile, built["verl"]))
    return Prepared(
        replace(
            profile,
            requirements=tuple(requirements),
            constraints=tuple(constraints),
            overrides=tuple(overrides),
        ),
        built,
        tuple(notes),
    )


def _rewrite(
    profile: Profile, built: Mapping[str, BuiltSource], release: Release | None
) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for text in profile.requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        seen.add(name)
        marker = f" ; {req.marker}" if req.marker else ""
        if name in built:
            extras = tuple(sorted(req.extras))
            out.append(f"{with_extras(name, extras)} @ {built[name].url}{marker}")
        elif name == "verl" and release is not None:
            extras = tuple(sorted(req.extras))
            out.append(f"{with_extras(name, extras)}=={release.version}{marker}")
        else:
            out.append(text)
    if "verl" in built and "verl" not in seen:
        out.append(f"verl @ {built['verl'].url}")
    elif release is not None and "verl" not in seen:
        out.append(f"verl=={release.version}")
    return out


def _extras_asked(profile: Profile, name: str) -> tuple[str, ...]:
    for text in profile.requirements:
        req = Requirement(text)
        if canonicalize_name(req.name) == name:
            return tuple(sorted(req.extras))
    return ()


def active_requirements(
    b: BuiltSource, extras: Iterable[str], target: Target
) -> list[tuple[Requirement, str]]:
    """The wheel's requirements that apply on the target with these extras (and the extras
    its own requirements on itself add, as verl-core's `verl[transferqueue]` does), each with
    the extra that brought it in ("" for none)."""
    reqs: list[Requirement] = []
    for text in b.requires:
        try:
            reqs.append(Requirement(text))
        except InvalidRequirement:
            continue
    active = {""} | {canonicalize_name(e) for e in extras}
    while True:
        more = {
            canonicalize_name(e)
            for r in reqs
            for extra in active
            if canonicalize_name(r.name) == b.name and _applies(r, target, extra)
            for e in r.extras
        } - active
        if not more:
            break
        active |= more
    out: list[tuple[Requirement, str]] = []
    for r in reqs:
        if canonicalize_name(r.name) == b.name:
            continue
        for extra in sorted(active):
            if _applies(r, target, extra):
                out.append((r, extra))
                break
    return out


def _applies(req: Requirement, target: Target, extra: str) -> bool:
    if req.marker is None:
        return extra == ""
    marker: Marker = req.marker
    return bool(marker.evaluate(target.markers(extra)))


def _allows(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True


def _for_extra(extra: str) -> str:
    return f" (extra {extra})" if extra else ""


def _pin_line(profile: Profile, b: BuiltSource, req: Requirement, extra: str, pinned: str) -> str:
    dep = canonicalize_name(req.name)
    return (
        f"{b.name} {b.version} from {b.source.describe()} requires {req.name}{req.specifier}"
        f"{_for_extra(extra)}; profile {profile.name} pins {dep}=={pinned}: change that "
        f"requirement in your tree's build configuration, or use a profile that pins a "
        f"{dep} it allows"
    )


def _url_line(b: BuiltSource, req: Requirement, extra: str) -> str:
    dep = canonicalize_name(req.name)
    return (
        f"{b.name} {b.version} from {b.source.describe()} requires {req.name} @ {req.url}"
        f"{_for_extra(extra)}, a direct reference; add `{dep} @ git+URL@REV` (or a path) to "
        f"the profile's requirements (a mirror: --mirror {dep}=PATH), or a released version "
        f'to its overrides, e.g. overrides = ["{dep}==X.Y"]'
    )


def _profile_pins(profile: Profile, built: Mapping[str, BuiltSource]) -> dict[str, str]:
    """Packages the profile itself pins with == (its CUDA pins: torch, triton, vllm, ...)."""
    pins: dict[str, str] = {}
    for text in (*profile.requirements, *profile.constraints):
        req = Requirement(text)
        name = canonicalize_name(req.name)
        specs = list(req.specifier)
        if name not in built and len(specs) == 1 and specs[0].operator == "==":
            pins[name] = specs[0].version
    return pins


def _locked_pins(
    profile: Profile, stack: Lock | None, built: Mapping[str, BuiltSource]
) -> dict[str, str]:
    """The committed lock's versions, as the resolver knows them: a direct artifact's (a file
    host's `2.5.8+cu118torch2.1cxx11abiFALSE`) without its label, which only the file has."""
    if stack is None:
        return {}
    pins = {}
    for p in stack.packages:
        if p.name in built or p.location == LOCAL:
            continue
        loc = profile.locations.get(p.location)
        on_index = loc is not None and loc.kind == "index"
        pins[p.name] = p.version if on_index else Version(p.version).public
    return pins


def _version_note(profile: Profile, b: BuiltSource) -> list[str]:
    for text in profile.requirements:
        req = Requirement(text)
        if canonicalize_name(req.name) != "verl" or req.url:
            continue
        specs = [s for s in req.specifier if s.operator == "=="]
        if specs and not req.specifier.contains(Version(b.version), prereleases=True):
            return [
                f"note: verl from {b.source.describe()} is {b.version}; profile {profile.name} "
                f"was made for verl {specs[0].version}: its stack is kept, and readiness and "
                f"the dry run follow {b.version}"
            ]
    return []


def attach(lock: Lock, built: Mapping[str, BuiltSource]) -> Lock:
    """The lock with every wheel made here marked with its source."""
    packages = []
    for p in lock.packages:
        b = built.get(p.name)
        if b is not None and p.location == LOCAL:
            p = replace(p, source=b.source, file=replace(p.file, url=source_url(b)))
        packages.append(p)
    return replace(lock, packages=tuple(packages))


def source_url(b: BuiltSource) -> str:
    """Where the wheel came from, as a URL: git+URL@COMMIT, or the file:// of a path."""
    s = b.source
    if s.kind == "git":
        return f"git+{s.origin}@{s.commit}"
    return "file://" + s.origin


def ensure_built(lock: Lock, builder: SourceBuilder) -> list[str]:
    """Building from a lock: each wheel it says was made here must be in the cache, or be
    made again from its recorded source with the same hash."""
    notes: list[str] = []
    for p in lock.packages:
        if p.location != LOCAL or builder.cache.lookup(p.file.sha256) is not None:
            continue
        if p.source is None:
            raise LockError(
                f"{p.name} {p.version}: the lock has a wheel made on another host "
                f"({p.file.filename}) and says nothing of its source; make the lock again here "
                "(`verl-bundle lock`, with --verl for verl)"
            )
        again = builder.make(p.name, _spec_of(p))
        if again.wheel.sha256 != p.file.sha256:
            raise LockError(
                f"{p.name} {p.version}: made again from {p.source.describe()}, its wheel has "
                f"sha256 {again.wheel.sha256[:12]}..., not the lock's {p.file.sha256[:12]}... "
                "(its tree or its build tools changed); make the lock again (`verl-bundle lock`)"
            )
        notes += again.notes
    return notes


def _spec_of(p: LockedPackage) -> SourceSpec:
    s = p.source
    if s is None:  # pragma: no cover - ensure_built asks only for packages with a source
        raise LockError(f"{p.name}: the lock says nothing of its source")
    if s.kind == "git":
        return parse_spec(f"git+{s.origin}@{s.commit}", p.name)
    return parse_spec(s.origin, p.name)


_COMPARED_UP_TO = 100 * 1000 * 1000  # bytes: a larger release file is not fetched to compare


def released_notes(
    profile: Profile,
    target: Target,
    built: Mapping[str, BuiltSource],
    downloader: Downloader,
) -> list[str]:
    """For each package built here from a git pin (verl aside): whether the default index has
    a released equivalent, the same version with the same files (the wheel's RECORD, less its
    dist-info), or only the same version with other content, or nothing of that version."""
    notes = []
    for name, made in sorted(built.items()):
        if made.source.kind != "git" or name == "verl":
            continue
        pin = f"{name} {made.version} (git {made.source.commit[:7]})"
        cand = release_of(profile, target, name, made.version, downloader)
        if cand is None:
            notes.append(
                f"note: {pin}: the default index has no {name} {made.version}; no released "
                "equivalent"
            )
            continue
        size = cand.file.size or 0
        if not cand.file.is_wheel or size > _COMPARED_UP_TO:
            notes.append(
                f"note: {pin}: the default index has {name} {made.version} "
                f"({cand.file.filename}), not compared with the git build"
            )
            continue
        want = Want(
            name, cand.file.filename, cand.file.url, cand.location, cand.file.sha256, cand.file.size
        )
        differ = record_difference(made.wheel.path, downloader.fetch(want).path)
        if not differ:
            notes.append(
                f"note: {pin}: the same files as the default index's {name} {made.version}, a "
                f"released equivalent (`{name}=={made.version}`)"
            )
        else:
            notes.append(
                f"note: {pin}: the default index's {name} {made.version} is other content "
                f"({len(differ)} files differ, e.g. {differ[0]}): the same version, not an "
                "equivalent"
            )
    return notes


def record_difference(a: Path, b: Path) -> list[str]:
    """The paths whose content differs between two wheels (by RECORD), dist-info aside."""

    def entries(wheel: Path) -> dict[str, str]:
        with zipfile.ZipFile(wheel) as zf:
            record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            rows = csv.reader(io.StringIO(zf.read(record).decode("utf-8", "replace")))
            return {
                row[0]: row[1]
                for row in rows
                if row and len(row) > 1 and ".dist-info/" not in row[0]
            }

    left, right = entries(a), entries(b)
    return sorted(p for p in set(left) | set(right) if left.get(p) != right.get(p))
