"""Resolution: a profile and a target in, a Lock out (one file per package, hash and size).

uv resolves for the target's Python and platform (not the host's), with packages bound to their
locations, static metadata for what cannot be built, and the upload-date cut-off where the index
can honour it. Then verl-bundle picks the one file per package, swaps in direct artifacts
(prebuilt wheels from file hosts), and classifies every package by kind, role and phase.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.credentials import split_credentials
from verl_bundle.errors import FetchError, ProfileError, ResolutionError
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import shown_url
from verl_bundle.net.index import read_project
from verl_bundle.profile.model import (
    DEFAULT_INDEX,
    DirectArtifact,
    Location,
    Profile,
    SourceBuild,
)
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter
from verl_bundle.resolve import tomlwrite
from verl_bundle.resolve.lock import (
    BOOTSTRAP_PHASE,
    LOCAL,
    Kind,
    Lock,
    LockedFile,
    LockedPackage,
    Role,
    now,
)
from verl_bundle.resolve.uverrors import explain_failure
from verl_bundle.uvcmd import host_python, run_uv
from verl_bundle.wheel import origin
from verl_bundle.wheel.integrity import ensure_whole

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_PROJECT = "verl-bundle-profile"


@dataclass(frozen=True)
class Candidate:
    """What uv chose for one package, narrowed to the one file for the target."""

    name: str
    version: str
    file: LockedFile
    location: str


def lock_profile(
    profile: Profile, target: Target, downloader: Downloader, reporter: Reporter
) -> Lock:
    """Resolve `profile` for `target` and return the lock; raises on any conflict or failure."""
    cutoff = _cutoff(profile, downloader, reporter)
    reporter.status(f"resolving {profile.name} for {target.describe()} ...")
    chosen = _resolve(profile, target, cutoff, (), downloader)
    chosen = _apply_artifacts(profile, target, chosen, downloader, reporter)
    builds = _server_builds(profile, chosen)
    if builds:
        # The server will build these sdists: their build requirements join the stack, resolved
        # together with it so that one version of each lands in the venv (--no-build-isolation).
        extra = tuple(r for b in builds for r in b.build_requires)
        chosen = _resolve(profile, target, cutoff, extra, downloader)
        chosen = _apply_artifacts(profile, target, chosen, downloader, reporter)
        builds = _server_builds(profile, chosen)
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
        overrides=tuple(o for o in profile.overrides if not Requirement(o).url),
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


# -- running uv ------------------------------------------------------------------------------


def _project_toml(profile: Profile, requirements: Iterable[str], cutoff: str | None) -> str:
    deps = list(dict.fromkeys(requirements))
    named = {canonicalize_name(Requirement(r).name) for r in deps}
    # A binding only reaches the packages uv is asked for directly, so every bound package is
    # asked for (unpinned when the profile does not pin it): it is part of the stack.
    deps += [pkg for pkg in sorted(profile.bindings) if pkg not in named]
    lines = [
        "[project]",
        tomlwrite.assign("name", _PROJECT),
        tomlwrite.assign("version", "0"),
        tomlwrite.assign("dependencies", deps),
        "",
        "[tool.uv]",
    ]
    if profile.constraints:
        lines.append(tomlwrite.assign("constraint-dependencies", list(profile.constraints)))
    if profile.overrides:
        lines.append(tomlwrite.assign("override-dependencies", list(profile.overrides)))
    if cutoff:
        lines.append(tomlwrite.assign("exclude-newer", cutoff))
        if profile.bindings:
            # Indexes like the PyTorch one give no upload times; the cut-off would hide every file.
            lines.append(
                tomlwrite.assign(
                    "exclude-newer-package", {p: False for p in sorted(profile.bindings)}
                )
            )
    for meta in profile.static_metadata:
        entry: dict[str, Any] = {
            "name": meta.name,
            "version": meta.version,
            "requires-dist": list(meta.requires_dist),
        }
        if meta.requires_python:
            entry["requires-python"] = meta.requires_python
        lines += ["", "[[tool.uv.dependency-metadata]]"]
        lines += [tomlwrite.assign(k, v) for k, v in entry.items()]
    if profile.bindings:
        lines += ["", "[tool.uv.sources]"]
        lines += [
            tomlwrite.assign(p, {"index": loc}) for p, loc in sorted(profile.bindings.items())
        ]
    for name in sorted(set(profile.bindings.values())):
        loc = profile.location(name)
        lines += ["", "[[tool.uv.index]]", tomlwrite.assign("name", name)]
        lines += [tomlwrite.assign("url", loc.url or ""), "explicit = true"]
    pypi = profile.location(DEFAULT_INDEX)
    if pypi.url:
        lines += ["", "[[tool.uv.index]]", tomlwrite.assign("name", DEFAULT_INDEX)]
        lines += [tomlwrite.assign("url", pypi.url), "default = true"]
    return "\n".join(lines) + "\n"


def release_of(
    profile: Profile, target: Target, name: str, version: str, downloader: Downloader
) -> Candidate | None:
    """The default index's `name==version` for the target (its file, not its dependencies);
    None when the index has no such release."""
    alone = replace(
        profile,
        requirements=(f"{name}=={version}",),
        bootstrap=(),
        constraints=(),
        overrides=(),
        bindings={},
        static_metadata=(),
        uv_lock=None,
    )
    try:
        found = _resolve(alone, target, None, (), downloader, no_deps=True)
    except ResolutionError:
        return None
    return found.get(canonicalize_name(name))


def _resolve(
    profile: Profile,
    target: Target,
    cutoff: str | None,
    extra: tuple[str, ...],
    downloader: Downloader,
    no_deps: bool = False,
) -> dict[str, Candidate]:
    requirements = [*profile.requirements, *profile.bootstrap, *extra]
    with tempfile.TemporaryDirectory(prefix="verl-bundle-resolve-") as tmp:
        work = Path(tmp)
        work.chmod(0o700)  # the project file may hold mirror credentials
        (work / "pyproject.toml").write_text(_project_toml(profile, requirements, cutoff))
        args = [
            "pip",
            "compile",
            "pyproject.toml",
            "--python-version",
            target.python_version,
            "--python-platform",
            target.uv_platform,
            "--python",
            host_python(),
            "--format",
            "pylock.toml",
            "--no-header",
            "--quiet",
            "-o",
            "pylock.toml",
            *(["--no-deps"] if no_deps else []),
        ]
        run = run_uv(args, work, downloader.http.redact)
        if run.returncode != 0:
            raise explain_failure(profile, target, run.stderr, _PROJECT)
        data = tomllib.loads((work / "pylock.toml").read_text())
    return _candidates(profile, target, data.get("packages", []))


def _candidates(
    profile: Profile, target: Target, packages: list[Mapping[str, Any]]
) -> dict[str, Candidate]:
    out: dict[str, Candidate] = {}
    for raw in packages:
        name = canonicalize_name(raw["name"])
        if "archive" in raw:  # a wheel made here from a source (resolve/local.py)
            out[name] = _archive(name, raw)
            continue
        if "directory" in raw or "vcs" in raw:
            form = "a directory" if "directory" in raw else "a git repository"
            raise ResolutionError(
                f"{name}: uv was given {form}, not a wheel; give it to the profile as "
                f"`{name} @ file://PATH` or `{name} @ git+URL@REV` (verl-bundle builds it), "
                "or as a wheel file"
            )
        location = profile.bindings.get(name, DEFAULT_INDEX)
        best: tuple[int, Mapping[str, Any]] | None = None
        for wheel in raw.get("wheels", []):
            filename = wheel.get("name") or _filename(wheel["url"])
            rank = target.wheel_rank(filename)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, wheel)
        if best is not None:
            entry = best[1]
        elif "sdist" in raw:
            entry = raw["sdist"]
        else:
            raise ResolutionError(
                f"{name} {raw['version']}: no wheel for {target.describe()} and no sdist on "
                f"{profile.location(location).describe()}; pick another version or Python"
            )
        url = split_credentials(entry["url"])[0]
        sha = entry.get("hashes", {}).get("sha256", "")
        try:
            filename = plain_filename(
                entry.get("name") or _filename(url), f"{name}: the index's file name"
            )
        except UnsafeNameError as exc:
            raise ResolutionError(
                f"{exc} (location {location}, {shown_url(url)}); the index page is not "
                "trustworthy: check the mirror"
            ) from None
        out[name] = Candidate(
            name, str(raw["version"]), LockedFile(filename, url, sha, entry.get("size")), location
        )
    return out


def _archive(name: str, raw: Mapping[str, Any]) -> Candidate:
    """A local wheel (`name @ file://.../x.whl`), as pylock.toml writes it: its file name and
    hash; the lock records its source (resolve/local.py), the fetch stage finds it by hash."""
    archive = raw["archive"]
    where = str(archive.get("path") or archive.get("url") or "")
    filename = plain_filename(_filename(where), f"{name}: the local wheel's file name")
    sha = archive.get("hashes", {}).get("sha256", "")
    path = Path(unquote(urlsplit(where).path)) if where.startswith("file:") else Path(where)
    size = archive.get("size") or (path.stat().st_size if path.is_file() else None)
    return Candidate(
        name,
        str(raw.get("version") or parse_wheel_filename(filename)[1]),
        LockedFile(filename, "", sha, size),
        LOCAL,
    )


def _filename(url: str) -> str:
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


# -- direct artifacts and server builds ---------------------------------------------------------


def _apply_artifacts(
    profile: Profile,
    target: Target,
    chosen: dict[str, Candidate],
    downloader: Downloader,
    reporter: Reporter,
    artifacts: Iterable[DirectArtifact] | None = None,
) -> dict[str, Candidate]:
    """Each package's direct artifacts (the profile's, or `artifacts`), tried in the order
    listed: the first that is there and, where the profile says what it must be built
    against, fits, replaces what the resolver picked; when none does, the resolver's pick
    stays (a note says why), or the build stops where the profile allows no fallback."""
    out = dict(chosen)
    by_package: dict[str, list[DirectArtifact]] = {}
    for art in profile.artifacts if artifacts is None else artifacts:
        by_package.setdefault(canonicalize_name(art.package), []).append(art)
    for name, arts in by_package.items():
        cand = chosen.get(name)
        if cand is None:
            continue
        tried: list[str] = []
        for art in arts:
            found, why = _try_artifact(profile, target, art, cand, downloader, reporter)
            if found is not None:
                out[name] = found
                break
            tried.append(why)
        else:
            if any(a.fallback == "error" for a in arts):
                raise FetchError(
                    f"{arts[0].package}: {'; '.join(tried)}; this profile needs one of these "
                    f"files (there is no fallback). Point --mirror {arts[0].location}=URL at "
                    "a host that serves it"
                )
            reporter.note(
                f"note: {arts[0].package}: {'; '.join(tried)}; using {cand.file.filename} "
                f"from {cand.location} instead"
            )
    return out


def _try_artifact(
    profile: Profile,
    target: Target,
    art: DirectArtifact,
    cand: Candidate,
    downloader: Downloader,
    reporter: Reporter,
) -> tuple[Candidate | None, str]:
    """The artifact as the package's candidate, or None and why not (one phrase)."""
    version = Version(cand.version).public
    loc: Location = profile.location(art.location)
    path = art.path_for(version, target)
    filename = _artifact_filename(art.package, path, profile)
    url = f"{split_credentials(loc.url or '')[0]}/{path}"
    shown = f"{shown_url(loc.url or '')}/{path}"
    _check_artifact_name(art.package, version, filename, target)
    if art.expect is not None:
        why, _ = origin.check(art.expect, filename, None)
        if why:
            return None, f"{shown} (location {art.location}) does not fit: {why}"
    probe = downloader.probe(url)
    if not probe.available:
        return None, f"{shown} (location {art.location}) is not available ({probe.reason})"
    known = art.sha256.get(filename)
    if known and art.expect is None:
        file = LockedFile(filename, url, known, probe.size)
    else:
        got = downloader.fetch(Want(art.package, filename, url, art.location, known, probe.size))
        if not known:
            # No published hash: the zip's own CRCs and RECORD are the only check there is.
            ensure_whole(
                downloader.cache,
                got.path,
                got.sha256,
                package=art.package,
                filename=filename,
                url=url,
            )
        if art.expect is not None:
            why, checked = origin.check(art.expect, filename, got.path)
            if why:
                return None, f"{shown} (location {art.location}) does not fit: {why}"
            reporter.note(
                f"note: {art.package}: {filename} from {art.location} checked against "
                f"{art.expect.describe()}: {checked}"
            )
        file = LockedFile(filename, url, got.sha256, got.size)
    found = Candidate(cand.name, str(parse_wheel_filename(filename)[1]), file, art.location)
    return found, ""


def _artifact_filename(package: str, path: str, profile: Profile) -> str:
    """The file name at the end of a direct artifact's path: it names files in the cache and
    the bundle, so it must be one plain component."""
    try:
        return plain_filename(path.rsplit("/", 1)[-1], f"{package}: direct artifact {path!r}")
    except UnsafeNameError as exc:
        raise ProfileError(
            f"{profile.path}: {exc}; fix the artifact's file template in the profile"
        ) from None


def _check_artifact_name(package: str, version: str, filename: str, target: Target) -> None:
    if not filename.endswith(".whl"):
        raise ResolutionError(f"{package}: direct artifact {filename} is not a wheel")
    name, wheel_version, _, _ = parse_wheel_filename(filename)
    if name != canonicalize_name(package) or wheel_version.public != version:
        raise ResolutionError(
            f"{package}: direct artifact {filename} is not {package} {version}; fix the "
            "artifact's file template in the profile"
        )
    if target.wheel_rank(filename) is None:
        raise ResolutionError(
            f"{package}: direct artifact {filename} does not install on {target.describe()}"
        )


def _server_builds(profile: Profile, chosen: Mapping[str, Candidate]) -> list[SourceBuild]:
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
