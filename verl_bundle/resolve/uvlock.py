"""Upstream's own lock as the stack: the pins verl's `uv.lock` selects for the extras asked
(uvproject.py), one file per package chosen for the target, nothing resolved again. The lock's
own TOML says where each file is and its hash. Then per package, by the lock's source:
- the default index (a registry no `[[tool.uv.index]]` names): the lock's file and hash;
- a named index the profile substitutes (`[uv-lock] substitute`, e.g. the PyTorch cu130 index
  by the default index, whose torch 2.11.0 is the same CUDA build): the same version, less its
  local label, from that location, said in a note;
- a named index whose entries the lock carries without hashes (verl's wheelhouse): the
  profile's direct artifacts for it, tried in order, else the lock's URL itself; hashed on
  download; where none can be had, the profile's source build from the default index's sdist;
- git: built on this host from the commit the lock pins (sources/sourcebuild.py, mirrors
  honoured); verl itself (`editable = "."`): the tree the lock came with, built the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from verl_bundle.credentials import split_credentials
from verl_bundle.errors import ProfileError, ResolutionError
from verl_bundle.net.download import Downloader
from verl_bundle.profile.model import DEFAULT_INDEX, DirectArtifact, Profile
from verl_bundle.profile.sources import Git
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter
from verl_bundle.resolve import resolver
from verl_bundle.resolve.artifacts import apply_artifacts
from verl_bundle.resolve.lock import LOCAL, Lock, LockedFile
from verl_bundle.resolve.uvcompile import Candidate, filename_of, resolve
from verl_bundle.resolve.uvproject import Pin, export, project_files, read_project, selected
from verl_bundle.sources.sourcebuild import BuiltSource, SourceBuilder


@dataclass(frozen=True)
class FromLock:
    lock: Lock
    built: Mapping[str, BuiltSource]


def lock_from_uv(
    profile: Profile,
    target: Target,
    verl: BuiltSource,
    builder: SourceBuilder,
    downloader: Downloader,
    reporter: Reporter,
) -> FromLock:
    """The stack of verl's own uv.lock (in `verl`'s tree, or the profile's `[uv-lock] path`)
    for the profile's extras, as a verl-bundle lock for `target`."""
    spec = profile.uv_lock
    if spec is None:  # pragma: no cover - the pipeline asks only for a profile with [uv-lock]
        raise ProfileError(f"{profile.path}: no [uv-lock]")
    where = str(spec.path.parent) if spec.path else verl.source.describe()
    files = project_files(spec.path.parent) if spec.path else dict(verl.project)
    project = read_project(files, where)
    pins = selected(export(project, spec.extras, where, downloader), target)
    chosen: dict[str, Candidate] = {}
    built: dict[str, BuiltSource] = {"verl": verl}
    wanted_from_index: dict[str, str] = {}  # name -> version, taken from the default index
    hashless: dict[str, tuple[str, Candidate]] = {}  # name -> (index, candidate)
    indexes = project.indexes
    for pin in pins:
        record = project.record(pin.name, pin.version)
        if record is None:
            raise ResolutionError(
                f"{where}/uv.lock: {pin.name} {pin.version or ''} is exported but not in the "
                "lock; the lock and pyproject.toml do not belong together"
            )
        source = record.get("source", {})
        if pin.git is not None or "git" in source:
            git = _git_of(pin, source)
            made = builder.make(pin.name, git)
            built[pin.name] = made
            for note in made.notes:
                reporter.note(note)
            chosen[pin.name] = _local(made)
            continue
        if "registry" not in source:
            raise ResolutionError(
                f"{where}/uv.lock: {pin.name} comes from {sorted(source)}, which verl-bundle "
                "does not take from a lock (a registry or git only)"
            )
        index = indexes.get(str(source["registry"]).rstrip("/"))
        version = str(record["version"])
        if index is not None and index in spec.substitute:
            wanted_from_index[pin.name] = Version(version).public
            reporter.note(
                f"note: {pin.name} {version}: the lock takes it from index {index}; taken as "
                f"{Version(version).public} from {spec.substitute[index]} instead (the profile's "
                "[uv-lock] substitute: the same build under the version without its label)"
            )
            continue
        cand = _from_record(pin.name, version, record, target, index or DEFAULT_INDEX, where)
        if index is not None and not cand.file.sha256:
            hashless[pin.name] = (index, cand)
            continue
        if index is not None and index not in profile.locations:
            raise ProfileError(
                f"{profile.path}: the lock takes {pin.name} from index {index!r}, which is no "
                f"location of the profile; add [locations.{index}] or [uv-lock] substitute"
            )
        chosen[pin.name] = cand
    chosen["verl"] = _local(verl)
    # The default index for what it is to serve instead (and the server's pip and uv): one uv
    # resolution of exactly those pins, with nothing else of the stack.
    builds = {b.package for b in profile.source_builds}
    fallbacks = {n: hashless[n][1].version for n in hashless if n in builds}
    wanted = {**wanted_from_index, **fallbacks}
    side = _from_default_index(profile, target, wanted, downloader)
    for name in wanted_from_index:
        chosen[name] = side[name]
    for name, (index, cand) in hashless.items():
        chosen[name] = _hashless(
            profile, target, name, index, cand, side.get(name), downloader, reporter
        )
    bootstrap = {canonicalize_name(Requirement(r).name) for r in profile.bootstrap}
    for name in bootstrap:
        chosen.setdefault(name, side[name])
    server = resolver.server_builds(profile, chosen)
    # A server build's build requirements join the stack (installed before it, --no-build-
    # isolation): those the lock lacks (flash-attn's `wheel`) from the default index, held to
    # the versions the lock has.
    absent = sorted(
        {r for b in server for r in b.build_requires if _name(r) not in chosen}, key=_name
    )
    if absent:
        held = [f"{c.name}=={c.version}" for c in chosen.values() if c.location != LOCAL]
        more = _from_default_index(profile, target, {}, downloader, absent, held)
        for req in absent:
            chosen[_name(req)] = more[_name(req)]
    overrides = project.overrides(target, spec.extras)
    lock = resolver.lock_of(profile, target, chosen, server, downloader, None, overrides)
    return FromLock(lock, built)


def _git_of(pin: Pin, source: Mapping[str, Any]) -> Git:
    """The lock's git source: `URL?rev=main#COMMIT` (the revision asked, the commit got)."""
    text = str(source.get("git", ""))
    url, _, commit = text.partition("#")
    base, _, query = url.partition("?")
    asked = ""
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key in ("rev", "tag", "branch"):
            asked = unquote(value)
    commit = commit or (pin.git.rev if pin.git else "")
    if not commit:
        raise ResolutionError(f"{pin.name}: the lock's git source {text!r} pins no commit")
    return Git(base or (pin.git.url if pin.git else ""), commit, asked)


def _local(made: BuiltSource) -> Candidate:
    w = made.wheel
    return Candidate(made.name, made.version, LockedFile(w.filename, "", w.sha256, w.size), LOCAL)


def _from_record(
    name: str, version: str, record: Mapping[str, Any], target: Target, location: str, where: str
) -> Candidate:
    """The lock's best file for the target (a wheel, else its sdist)."""
    best: tuple[int, Mapping[str, Any]] | None = None
    for wheel in record.get("wheels", []):
        rank = target.wheel_rank(filename_of(wheel["url"]))
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, wheel)
    entry = best[1] if best is not None else record.get("sdist")
    if entry is None or "url" not in entry:
        raise ResolutionError(
            f"{where}/uv.lock: {name} {version} has no file for {target.describe()}; pick the "
            "lock's own target (its environments) with --python and --platform"
        )
    digest = str(entry.get("hash", ""))
    sha = digest.removeprefix("sha256:") if digest.startswith("sha256:") else ""
    file = LockedFile(filename_of(entry["url"]), str(entry["url"]), sha, entry.get("size"))
    return Candidate(name, version, file, location)


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def _from_default_index(
    profile: Profile,
    target: Target,
    wanted: Mapping[str, str],
    downloader: Downloader,
    more: Sequence[str] = (),
    held: Sequence[str] = (),
) -> dict[str, Candidate]:
    """`name==version` for each wanted package (and `more` requirements, with `held` as
    constraints) and the profile's bootstrap, resolved on the default index alone, with the
    profile's static metadata for what cannot be built."""
    asked = [*(f"{n}=={v}" for n, v in sorted(wanted.items())), *more]
    alone = replace(
        profile,
        requirements=tuple(asked) or tuple(profile.bootstrap),
        constraints=tuple(held),
        overrides=(),
        bindings={},
        artifacts=(),
        uv_lock=None,
    )
    return resolve(alone, target, None, (), downloader)


def _hashless(
    profile: Profile,
    target: Target,
    name: str,
    index: str,
    cand: Candidate,
    fallback: Candidate | None,
    downloader: Downloader,
    reporter: Reporter,
) -> Candidate:
    """A file the lock names without a hash (verl's wheelhouse): the profile's artifacts for
    it in order, else the lock's own URL; hashed as it is downloaded. Where none is there:
    the default index's sdist for the profile's source build, else one line."""
    arts = [a for a in profile.artifacts if canonicalize_name(a.package) == name]
    if not arts:
        arts = [_artifact_of_url(profile, name, index, cand.file.url)]
    if fallback is None:
        arts = [replace(a, fallback="error") for a in arts]
        start = {name: cand}
    else:
        arts = [replace(a, fallback="resolved") for a in arts]
        start = {name: fallback}
    got = apply_artifacts(profile, target, start, downloader, reporter, arts)
    return got[name]


def _artifact_of_url(profile: Profile, name: str, index: str, url: str) -> DirectArtifact:
    """The lock's own URL as a direct artifact of the files location it lies under."""
    for loc in profile.locations.values():
        base = split_credentials(loc.url or "")[0].rstrip("/")
        if loc.kind == "files" and base and url.startswith(base + "/"):
            path = url[len(base) + 1 :]
            return DirectArtifact(name, loc.name, path.replace("{", "{{").replace("}", "}}"))
    raise ProfileError(
        f"{profile.path}: the lock takes {name} from index {index!r} without a hash, at "
        f"{url}, which lies under no files location of the profile; add one (or "
        f"[[artifacts]] for {name})"
    )
