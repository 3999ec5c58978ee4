"""uv as the resolver: a profile as a throwaway project file (its pins, constraints, overrides,
bindings of packages to their indexes, static metadata and the upload-date cut-off), compiled by
`uv pip compile` for the target's Python and platform (not the host's), and uv's pylock.toml
read back as one `Candidate` per package: the one file for the target, its hash and location."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.credentials import split_credentials
from verl_bundle.errors import ResolutionError
from verl_bundle.net.download import Downloader
from verl_bundle.net.http import shown_url
from verl_bundle.profile.model import DEFAULT_INDEX, Profile
from verl_bundle.profile.target import Target
from verl_bundle.resolve import tomlwrite
from verl_bundle.resolve.lock import LOCAL, LockedFile
from verl_bundle.resolve.uverrors import explain_failure
from verl_bundle.uvcmd import host_python, run_uv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROJECT = "verl-bundle-profile"


@dataclass(frozen=True)
class Candidate:
    """What uv chose for one package, narrowed to the one file for the target."""

    name: str
    version: str
    file: LockedFile
    location: str


def project_toml(profile: Profile, requirements: Iterable[str], cutoff: str | None) -> str:
    deps = list(dict.fromkeys(requirements))
    named = {canonicalize_name(Requirement(r).name) for r in deps}
    # A binding only reaches the packages uv is asked for directly, so every bound package is
    # asked for (unpinned when the profile does not pin it): it is part of the stack.
    deps += [pkg for pkg in sorted(profile.bindings) if pkg not in named]
    lines = [
        "[project]",
        tomlwrite.assign("name", PROJECT),
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
        found = resolve(alone, target, None, (), downloader, no_deps=True)
    except ResolutionError:
        return None
    return found.get(canonicalize_name(name))


def resolve(
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
        (work / "pyproject.toml").write_text(project_toml(profile, requirements, cutoff))
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
            raise explain_failure(profile, target, run.stderr, PROJECT)
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
            filename = wheel.get("name") or filename_of(wheel["url"])
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
                entry.get("name") or filename_of(url), f"{name}: the index's file name"
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
    filename = plain_filename(filename_of(where), f"{name}: the local wheel's file name")
    sha = archive.get("hashes", {}).get("sha256", "")
    path = Path(unquote(urlsplit(where).path)) if where.startswith("file:") else Path(where)
    size = archive.get("size") or (path.stat().st_size if path.is_file() else None)
    return Candidate(
        name,
        str(raw.get("version") or parse_wheel_filename(filename)[1]),
        LockedFile(filename, "", sha, size),
        LOCAL,
    )


def filename_of(url: str) -> str:
    """The file name a URL ends in, unquoted."""
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])
