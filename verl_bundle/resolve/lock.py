"""The lock: every package of the stack with the one file chosen for the target.

Written as a PEP 751 `pylock.toml` with exactly one file per package; what verl-bundle adds
(location, kind, role, phase, and the profile/target it was made for) lives in `tool` tables.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name

from verl_bundle import __version__
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.manifest_read import Reader, read_source
from verl_bundle.errors import LockError
from verl_bundle.profile.target import Target, normalize_platform, parse_python
from verl_bundle.resolve import tomlwrite

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# How a file gets into the bundle: as it is (wheel), built into a wheel on the online host
# (host-build: a pure-Python sdist), or shipped as an sdist and built on the server (sdist).
Kind = Literal["wheel", "host-build", "sdist"]
# Why the package is there: the stack, a server build's build requirement, or the bundled pip.
Role = Literal["requirement", "build-dep", "bootstrap"]

KINDS: tuple[Kind, ...] = ("wheel", "host-build", "sdist")
ROLES: tuple[Role, ...] = ("requirement", "build-dep", "bootstrap")
BOOTSTRAP_PHASE = "bootstrap"
# The location of a wheel made on this host from a source (a tree, git, a local file): not an
# index or a file host; the package's `source` says where it came from.
LOCAL = "local"


@dataclass(frozen=True)
class LockedFile:
    filename: str
    url: str  # never carries credentials
    sha256: str
    size: int | None

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class LockedPackage:
    name: str  # canonical
    version: str
    file: LockedFile
    location: str
    kind: Kind
    role: Role
    phase: str
    source: mf.Source | None = None  # set for a wheel made here from a source (LOCAL)

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Lock:
    profile: str
    profile_sha256: str
    target: Target
    cuda: str
    packages: tuple[LockedPackage, ...]
    locations: Mapping[str, str] = field(default_factory=dict)  # name -> URL ("" = default)
    exclude_newer: str | None = None
    created: str = ""
    # Requirements the stack overrides on purpose (upstream's uv.lock, the profile's
    # `overrides`): the server's pip check accepts what they explain.
    overrides: tuple[str, ...] = ()

    def package(self, name: str) -> LockedPackage | None:
        canon = canonicalize_name(name)
        return next((p for p in self.packages if p.name == canon), None)

    @property
    def total_size(self) -> int:
        return sum(p.file.size or 0 for p in self.packages)


def _environment_marker(target: Target) -> str:
    return (
        f"python_version == '{target.python_version}' and sys_platform == 'linux' "
        f"and platform_machine == '{target.arch}'"
    )


def dumps(lock: Lock) -> str:
    """Serialize the lock as pylock.toml text (stable order, one file per package)."""
    out = [
        'lock-version = "1.0"',
        f"created-by = {tomlwrite.string('verl-bundle ' + __version__)}",
        f"requires-python = {tomlwrite.string('==' + lock.target.python_version + '.*')}",
        f"environments = [{tomlwrite.string(_environment_marker(lock.target))}]",
        "",
        "[tool.verl-bundle]",
        f"profile = {tomlwrite.string(lock.profile)}",
        f"profile-sha256 = {tomlwrite.string(lock.profile_sha256)}",
        f"python = {tomlwrite.string(lock.target.python_version)}",
        f"platform = {tomlwrite.string(lock.target.platform)}",
        f"cuda = {tomlwrite.string(lock.cuda)}",
    ]
    if lock.exclude_newer:
        out.append(f"exclude-newer = {tomlwrite.string(lock.exclude_newer)}")
    if lock.created:
        out.append(f"created = {tomlwrite.string(lock.created)}")
    out.append(f"locations = {tomlwrite.value(dict(sorted(lock.locations.items())))}")
    if lock.overrides:
        out.append(f"overrides = {tomlwrite.value(list(lock.overrides))}")
    for pkg in sorted(lock.packages, key=lambda p: p.name):
        f = pkg.file
        entry: dict[str, Any] = {"name": f.filename, "url": f.url}
        if f.size is not None:
            entry["size"] = f.size
        entry["hashes"] = {"sha256": f.sha256}
        out += [
            "",
            "[[packages]]",
            f"name = {tomlwrite.string(pkg.name)}",
            f"version = {tomlwrite.string(pkg.version)}",
        ]
        if f.is_wheel:
            out.append(f"wheels = [{tomlwrite.value(entry)}]")
        else:
            out.append(f"sdist = {tomlwrite.value(entry)}")
        tool: dict[str, Any] = {
            "location": pkg.location,
            "kind": pkg.kind,
            "role": pkg.role,
            "phase": pkg.phase,
        }
        if pkg.source is not None:
            tool["source"] = mf.source_dict(pkg.source)
        out.append(f"tool = {{ verl-bundle = {tomlwrite.value(tool)} }}")
    return "\n".join(out) + "\n"


def write_lock(lock: Lock, path: Path) -> None:
    """Write atomically: a reader never sees half a lock under the final name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps(lock), encoding="utf-8")
    tmp.replace(path)


def read_lock(path: Path) -> Lock:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LockError(f"{path}: not valid TOML: {exc}") from None
    try:
        return _parse(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise LockError(
            f"{path}: not a verl-bundle lock ({exc}); make one with `verl-bundle lock`"
        ) from None


def _parse(data: Mapping[str, Any]) -> Lock:
    meta = data["tool"]["verl-bundle"]
    target = Target(parse_python(meta["python"]), normalize_platform(meta["platform"]))
    packages = []
    for raw in data.get("packages", []):
        tool = raw["tool"]["verl-bundle"]
        if "wheels" in raw:
            if len(raw["wheels"]) != 1:
                raise ValueError(f"package {raw['name']} has {len(raw['wheels'])} wheels, not 1")
            f = raw["wheels"][0]
        else:
            f = raw["sdist"]
        kind, role = tool["kind"], tool["role"]
        if kind not in KINDS or role not in ROLES:
            raise ValueError(f"package {raw['name']}: unknown kind {kind!r} or role {role!r}")
        sha = f["hashes"]["sha256"]
        source = tool.get("source")
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError(f"package {raw['name']}: sha256 {sha!r} is not 64 hex digits")
        packages.append(
            LockedPackage(
                name=canonicalize_name(raw["name"]),
                version=str(raw["version"]),
                file=LockedFile(str(f["name"]), str(f["url"]), sha, f.get("size")),
                location=str(tool["location"]),
                kind=kind,
                role=role,
                phase=str(tool["phase"]),
                source=read_source(Reader(source, f"{raw['name']}.source")) if source else None,
            )
        )
    return Lock(
        profile=str(meta["profile"]),
        profile_sha256=str(meta["profile-sha256"]),
        target=target,
        cuda=str(meta["cuda"]),
        packages=tuple(packages),
        locations=dict(meta.get("locations", {})),
        exclude_newer=meta.get("exclude-newer"),
        created=str(meta.get("created", "")),
        overrides=tuple(str(o) for o in meta.get("overrides", [])),
    )


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def group_by_phase(lock: Lock, phase_order: Iterable[str]) -> list[tuple[str, list[LockedPackage]]]:
    """Packages per install phase, in profile order (phases with no package are dropped)."""
    groups = []
    for phase in phase_order:
        members = sorted((p for p in lock.packages if p.phase == phase), key=lambda p: p.name)
        if members:
            groups.append((phase, members))
    return groups


def diff_locks(old: Lock, new: Lock) -> list[str]:
    """What changed from `old` to `new`, one line per package (empty when they agree)."""
    lines = []
    before = {p.name: p for p in old.packages}
    after = {p.name: p for p in new.packages}
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None and b is not None:
            lines.append(f"+ {name} {b.version} ({b.file.filename}) is new")
        elif b is None and a is not None:
            lines.append(f"- {name} {a.version} is no longer in the stack")
        elif a is not None and b is not None:
            if a.version != b.version:
                lines.append(f"~ {name} {a.version} -> {b.version}")
            elif a.file.filename != b.file.filename:
                lines.append(f"~ {name} {a.version}: file {a.file.filename} -> {b.file.filename}")
            elif a.location != b.location or a.source != b.source:
                was = a.source.describe() if a.source else f"location {a.location}"
                now_ = b.source.describe() if b.source else f"location {b.location}"
                lines.append(f"~ {name} {a.version}: from {was} -> from {now_}")
            elif a.file.sha256 != b.file.sha256:
                lines.append(f"! {name} {a.version}: {a.file.filename} has a new sha256 upstream")
            elif (a.kind, a.phase, a.location) != (b.kind, b.phase, b.location):
                lines.append(
                    f"~ {name}: {a.kind}/{a.phase}/{a.location} -> {b.kind}/{b.phase}/{b.location}"
                )
    if old.target != new.target:
        lines.insert(0, f"~ target {old.target.describe()} -> {new.target.describe()}")
    return lines
