"""Profiles: one CUDA-matched stack as data (TOML), loaded and checked into frozen values."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verl_bundle.credentials import redact_url
from verl_bundle.errors import ProfileError, UsageError
from verl_bundle.resources import data_dir
from verl_bundle.target import Target, normalize_platform, parse_python

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 hosts only
    import tomli as tomllib

LocationKind = Literal["index", "files"]

DEFAULT_INDEX = "pypi"


@dataclass(frozen=True)
class Location:
    """A named place files come from: a package index, or a host of files at known paths."""

    name: str
    kind: LocationKind
    url: str | None  # None: the resolver's default index (only `pypi`)

    def describe(self) -> str:
        return f"{self.name} ({redact_url(self.url) if self.url else 'the default index'})"


# Built-in locations every profile can use; a profile may add its own or redefine these.
BUILTIN_LOCATIONS: dict[str, Location] = {
    loc.name: loc
    for loc in (
        Location(DEFAULT_INDEX, "index", None),
        Location("pytorch-cu118", "index", "https://download.pytorch.org/whl/cu118"),
        Location("pytorch-cu121", "index", "https://download.pytorch.org/whl/cu121"),
        Location("pytorch-cu124", "index", "https://download.pytorch.org/whl/cu124"),
        Location("pytorch-cu126", "index", "https://download.pytorch.org/whl/cu126"),
        Location(
            "flash-attn-releases",
            "files",
            "https://github.com/Dao-AILab/flash-attention/releases/download",
        ),
        Location(
            "vllm-releases", "files", "https://github.com/vllm-project/vllm/releases/download"
        ),
    )
}


@dataclass(frozen=True)
class StaticMetadata:
    """Metadata given to the resolver for a package whose own cannot be built (flash-attn)."""

    name: str
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str | None = None


@dataclass(frozen=True)
class DirectArtifact:
    """A file taken from a file host instead of what the resolver picked (a prebuilt wheel)."""

    package: str
    location: str
    file: str  # path template below the location: {version}, {python_tag}
    sha256: Mapping[str, str] = field(default_factory=dict)  # filename -> known hash
    fallback: Literal["resolved", "error"] = "resolved"

    def path_for(self, version: str, target: Target) -> str:
        return self.file.format(version=version, python_tag=target.python_tag)


@dataclass(frozen=True)
class MaxJobs:
    """MAX_JOBS for a compiled build: one job per `gib_per_job` of RAM, at most half the cores."""

    gib_per_job: float = 9.0
    limit: int | None = None


@dataclass(frozen=True)
class SourceBuild:
    """A package shipped as an sdist and compiled on the server, with what its build needs."""

    package: str
    build_requires: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    max_jobs: MaxJobs = MaxJobs()
    needs_cuda: bool = True


@dataclass(frozen=True)
class Phase:
    """One install step; `*` in packages stands for every package no other phase names."""

    name: str
    packages: tuple[str, ...]

    @property
    def is_rest(self) -> bool:
        return "*" in self.packages


@dataclass(frozen=True)
class Checks:
    """What the server verifies after installing."""

    imports: tuple[str, ...] = ()
    torch_version: str | None = None
    torch_cuda: str | None = None


@dataclass(frozen=True)
class Toolchain:
    """What the server must have: nvcc's release, the gcc nvcc accepts, the driver it needs."""

    nvcc: str | None = None
    gcc: str | None = None  # a version specifier, e.g. ">=6,<12"
    driver: str | None = None  # full-toolkit minimum
    driver_compat: str | None = None  # minimum under CUDA minor-version compatibility


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    sha256: str
    description: str
    cuda: str
    python: str
    python_versions: str | None
    platform: str
    exclude_newer: str | None
    notes: tuple[str, ...]
    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    bootstrap: tuple[str, ...]
    locations: Mapping[str, Location]
    bindings: Mapping[str, str]  # canonical package name -> location name
    static_metadata: tuple[StaticMetadata, ...]
    artifacts: tuple[DirectArtifact, ...]
    source_builds: tuple[SourceBuild, ...]
    phases: tuple[Phase, ...]
    checks: Checks
    toolchain: Toolchain
    lock: Path | None = None  # a committed lock to build from by default

    def location(self, name: str) -> Location:
        return self.locations[name]

    def source_build(self, package: str) -> SourceBuild | None:
        name = canonicalize_name(package)
        return next((b for b in self.source_builds if canonicalize_name(b.package) == name), None)

    def artifact(self, package: str) -> DirectArtifact | None:
        name = canonicalize_name(package)
        return next((a for a in self.artifacts if canonicalize_name(a.package) == name), None)

    def phase_of(self, package: str) -> str:
        name = canonicalize_name(package)
        rest = ""
        for phase in self.phases:
            if phase.is_rest:
                rest = phase.name
            elif name in {canonicalize_name(p) for p in phase.packages}:
                return phase.name
        return rest

    def target(self, python: str | None = None, platform: str | None = None) -> Target:
        version = parse_python(python or self.python)
        if self.python_versions and Version(f"{version[0]}.{version[1]}") not in SpecifierSet(
            self.python_versions
        ):
            raise UsageError(
                f"profile {self.name!r} supports Python {self.python_versions}, not "
                f"{version[0]}.{version[1]}; pick another --python or another profile"
            )
        return Target(version, normalize_platform(platform or self.platform))

    def with_mirrors(self, mirrors: Mapping[str, str]) -> Profile:
        """Replace locations' URLs by name (`--mirror NAME=URL`)."""
        locations = dict(self.locations)
        for name, url in mirrors.items():
            if name not in locations:
                raise UsageError(
                    f"--mirror {name}=...: profile {self.name!r} has no location {name!r}; "
                    f"its locations are: {', '.join(sorted(locations))}"
                )
            locations[name] = replace(locations[name], url=url)
        return replace(self, locations=locations)


def parse_mirror(value: str) -> tuple[str, str]:
    """'NAME=URL' -> (NAME, URL), with the URL checked to be http(s)."""
    name, sep, url = value.partition("=")
    name, url = name.strip(), url.strip()
    if not sep or not name or not url:
        raise UsageError(f"--mirror {value!r}: write it as NAME=URL, e.g. pypi=https://host/simple")
    if not re.match(r"^https?://[^/\s]+", url):
        raise UsageError(
            f"--mirror {name}=...: {redact_url(url)!r} is not an http(s) URL; "
            "give the mirror's full address, e.g. https://nexus.example/repository/pypi/simple"
        )
    return name, url.rstrip("/")


# -- loading ----------------------------------------------------------------------------


class _Table:
    """A TOML table being read: every access is checked, every unknown key is an error."""

    def __init__(self, path: Path, data: Mapping[str, Any], prefix: str = "") -> None:
        self.path = path
        self.data = data
        self.prefix = prefix

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def fail(self, name: str, expected: str) -> ProfileError:
        return ProfileError(f"{self.path}: key '{self.key(name)}': {expected}")

    def check_keys(self, allowed: set[str]) -> None:
        for k in self.data:
            if k not in allowed:
                raise ProfileError(
                    f"{self.path}: unknown key '{self.key(k)}'; expected one of: "
                    + ", ".join(sorted(allowed))
                )

    def text(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        if name not in self.data:
            if required:
                raise self.fail(name, "is required (a string)")
            return default
        value = self.data[name]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, f"expected a non-empty string, found {value!r}")
        return value.strip()

    def texts(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(name, f"expected a list of strings, found {value!r}")
        return tuple(v.strip() for v in value)

    def flag(self, name: str, default: bool) -> bool:
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, found {value!r}")
        return value

    def table(self, name: str) -> _Table:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(name, f"expected a table, found {value!r}")
        return _Table(self.path, value, f"{self.key(name)}.")

    def tables(self, name: str) -> list[_Table]:
        value = self.data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(name, f"expected an array of tables ([[{self.key(name)}]])")
        return [_Table(self.path, v, f"{self.key(name)}[{i}].") for i, v in enumerate(value)]

    def str_map(self, name: str) -> dict[str, str]:
        t = self.table(name)
        out = {}
        for k, v in t.data.items():
            if not isinstance(v, str):
                raise t.fail(k, f"expected a string, found {v!r}")
            out[k] = v
        return out


def _requirement(t: _Table, name: str, index: int, text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        detail = str(exc).splitlines()[0]
        raise ProfileError(
            f"{t.path}: key '{t.key(name)}[{index}]': {text!r} is not a PEP 508 requirement "
            f"({detail}); write it like 'torch==2.1.2' or 'verl[vllm]>=0.2'"
        ) from None


def _requirements(t: _Table, name: str) -> tuple[str, ...]:
    return tuple(str(_requirement(t, name, i, r)) for i, r in enumerate(t.texts(name)))


def _specifier(t: _Table, name: str) -> str | None:
    value = t.text(name)
    if value is None:
        return None
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise t.fail(name, f"{value!r} is not a version specifier (e.g. '>=3.8,<3.12')") from None
    return value


def _version(t: _Table, name: str, *, required: bool = False) -> str | None:
    value = t.text(name, required=required)
    if value is None:
        return None
    try:
        Version(value)
    except InvalidVersion:
        raise t.fail(name, f"{value!r} is not a version (e.g. '11.8')") from None
    return value


def _cutoff(t: _Table, name: str) -> str | None:
    value = t.data.get(name)
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise t.fail(name, f"{value!r} is not a date (e.g. 2025-03-01)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
    else:
        raise t.fail(name, f"expected a date such as 2025-03-01, found {value!r}")
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_TOP_KEYS = {
    "name",
    "description",
    "cuda",
    "python",
    "python-versions",
    "platform",
    "exclude-newer",
    "notes",
    "requirements",
    "constraints",
    "bootstrap",
    "locations",
    "bindings",
    "static-metadata",
    "artifacts",
    "source-builds",
    "phases",
    "checks",
    "toolchain",
    "lock",
}


def load_profile(path: Path) -> Profile:
    """Read and check one profile file; any problem is one ProfileError line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the profile ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    top = _Table(path, data)
    top.check_keys(_TOP_KEYS)

    name = top.text("name", required=True) or ""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise top.fail("name", f"{name!r} must be letters, digits, '.', '_' or '-'")
    cuda = _version(top, "cuda", required=True) or ""
    python = top.text("python", "3.10") or "3.10"
    try:
        parse_python(python)
    except UsageError:
        raise top.fail("python", f"{python!r} is not a Python version (X.Y)") from None
    platform = top.text("platform", "manylinux_2_17_x86_64") or ""
    try:
        platform = normalize_platform(platform)
    except UsageError as exc:
        raise top.fail("platform", str(exc)) from None

    locations = dict(BUILTIN_LOCATIONS)
    loc_table = top.table("locations")
    for loc_name in loc_table.data:
        lt = loc_table.table(loc_name)
        lt.check_keys({"type", "url"})
        kind = lt.text("type", "index")
        if kind not in ("index", "files"):
            raise lt.fail("type", f"expected 'index' or 'files', found {kind!r}")
        url = lt.text("url")
        if url is None and loc_name != DEFAULT_INDEX:
            raise lt.fail("url", "is required (an http(s) URL)")
        if url is not None and not re.match(r"^https?://", url):
            raise lt.fail("url", f"expected an http(s) URL, found {redact_url(url)!r}")
        locations[loc_name] = Location(
            loc_name, "index" if kind == "index" else "files", url.rstrip("/") if url else None
        )

    requirements = _requirements(top, "requirements")
    if not requirements:
        raise top.fail("requirements", "expected at least one requirement")
    constraints = _requirements(top, "constraints")
    bootstrap = _requirements(top, "bootstrap") or ("pip",)

    bindings: dict[str, str] = {}
    bind_table = top.table("bindings")
    for pkg, loc in top.str_map("bindings").items():
        if loc not in locations:
            raise bind_table.fail(
                pkg,
                f"location {loc!r} is not defined; defined locations: "
                + ", ".join(sorted(locations)),
            )
        if locations[loc].kind != "index":
            raise bind_table.fail(pkg, f"location {loc!r} is a file host; bind to an index")
        bindings[canonicalize_name(pkg)] = loc

    static: list[StaticMetadata] = []
    for t in top.tables("static-metadata"):
        t.check_keys({"name", "version", "requires-dist", "requires-python"})
        pkg = t.text("name", required=True) or ""
        static.append(
            StaticMetadata(
                name=pkg,
                version=_version(t, "version", required=True) or "",
                requires_dist=_requirements(t, "requires-dist"),
                requires_python=_specifier(t, "requires-python"),
            )
        )

    artifacts: list[DirectArtifact] = []
    for t in top.tables("artifacts"):
        t.check_keys({"package", "location", "file", "sha256", "fallback"})
        loc = t.text("location", required=True) or ""
        if loc not in locations:
            raise t.fail(
                "location",
                f"location {loc!r} is not defined; defined locations: "
                + ", ".join(sorted(locations)),
            )
        if locations[loc].kind != "files":
            raise t.fail(
                "location", f"location {loc!r} is an index; artifacts come from a files host"
            )
        fallback = t.text("fallback", "resolved")
        if fallback not in ("resolved", "error"):
            raise t.fail("fallback", f"expected 'resolved' or 'error', found {fallback!r}")
        template = t.text("file", required=True) or ""
        try:
            template.format(version="0", python_tag="cp310")
        except (KeyError, IndexError, ValueError):
            raise t.fail(
                "file", "a path template may use only {version} and {python_tag}"
            ) from None
        hashes = t.str_map("sha256")
        for fname, digest in hashes.items():
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise t.fail(f"sha256.{fname}", "expected 64 lowercase hex digits")
        artifacts.append(
            DirectArtifact(
                package=t.text("package", required=True) or "",
                location=loc,
                file=template,
                sha256=hashes,
                fallback="resolved" if fallback == "resolved" else "error",
            )
        )

    builds: list[SourceBuild] = []
    for t in top.tables("source-builds"):
        t.check_keys({"package", "build-requires", "env", "max-jobs", "needs-cuda"})
        mj = t.table("max-jobs")
        mj.check_keys({"gib-per-job", "limit"})
        gib = mj.data.get("gib-per-job", 9.0)
        limit = mj.data.get("limit")
        if not isinstance(gib, (int, float)) or isinstance(gib, bool) or gib <= 0:
            raise mj.fail("gib-per-job", f"expected a positive number, found {gib!r}")
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
            raise mj.fail("limit", f"expected a positive integer, found {limit!r}")
        builds.append(
            SourceBuild(
                package=t.text("package", required=True) or "",
                build_requires=_requirements(t, "build-requires"),
                env=t.str_map("env"),
                max_jobs=MaxJobs(float(gib), limit),
                needs_cuda=t.flag("needs-cuda", True),
            )
        )

    phases: list[Phase] = []
    for t in top.tables("phases"):
        t.check_keys({"name", "packages"})
        phases.append(Phase(t.text("name", required=True) or "", t.texts("packages")))
    if not phases:
        phases = [Phase("wheels", ("*",))]
    _check_phases(top, phases, builds)

    checks_t = top.table("checks")
    checks_t.check_keys({"imports", "torch-version", "torch-cuda"})
    checks = Checks(
        imports=checks_t.texts("imports"),
        torch_version=checks_t.text("torch-version"),
        torch_cuda=checks_t.text("torch-cuda"),
    )
    tool_t = top.table("toolchain")
    tool_t.check_keys({"nvcc", "gcc", "driver", "driver-compat"})
    toolchain = Toolchain(
        nvcc=_version(tool_t, "nvcc"),
        gcc=_specifier(tool_t, "gcc"),
        driver=tool_t.text("driver"),
        driver_compat=tool_t.text("driver-compat"),
    )
    lock_rel = top.text("lock")
    return Profile(
        name=name,
        path=path,
        sha256=hashlib.sha256(raw).hexdigest(),
        description=top.text("description", "") or "",
        cuda=cuda,
        python=python,
        python_versions=_specifier(top, "python-versions"),
        platform=platform,
        exclude_newer=_cutoff(top, "exclude-newer"),
        notes=top.texts("notes"),
        requirements=requirements,
        constraints=constraints,
        bootstrap=bootstrap,
        locations=locations,
        bindings=bindings,
        static_metadata=tuple(static),
        artifacts=tuple(artifacts),
        source_builds=tuple(builds),
        phases=tuple(phases),
        checks=checks,
        toolchain=toolchain,
        lock=(path.parent / lock_rel) if lock_rel else None,
    )


def _check_phases(top: _Table, phases: list[Phase], builds: list[SourceBuild]) -> None:
    seen_names: set[str] = set()
    placed: dict[str, int] = {}
    rest = -1
    for i, phase in enumerate(phases):
        key = f"phases[{i}]"
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", phase.name):
            raise top.fail(f"{key}.name", "expected lowercase letters, digits and '-'")
        if phase.name in seen_names:
            raise top.fail(f"{key}.name", f"phase {phase.name!r} is defined twice")
        seen_names.add(phase.name)
        for pkg in phase.packages:
            if pkg == "*":
                if rest >= 0:
                    raise top.fail(f"{key}.packages", "only one phase may hold '*'")
                rest = i
                continue
            name = canonicalize_name(pkg)
            if name in placed:
                raise top.fail(f"{key}.packages", f"{pkg!r} is already in another phase")
            placed[name] = i
    if rest < 0:
        raise top.fail("phases", "one phase must hold '*' (every package no other phase names)")
    for build in builds:
        here = placed.get(canonicalize_name(build.package), rest)
        for req in build.build_requires:
            dep = canonicalize_name(Requirement(req).name)
            if placed.get(dep, rest) >= here:
                raise top.fail(
                    "phases",
                    f"{build.package} is built on the server, so its build requirement "
                    f"{dep} must be installed in an earlier phase",
                )


# -- finding profiles ---------------------------------------------------------------------


def builtin_profiles() -> list[Profile]:
    return [load_profile(p) for p in sorted(data_dir("profiles").glob("*.toml"))]


def find_profile(spec: str) -> Profile:
    """A built-in profile by name, or a profile file by path."""
    path = Path(spec).expanduser()
    if spec.endswith(".toml") or "/" in spec or path.is_file():
        if not path.is_file():
            raise UsageError(f"--profile {spec}: no such file")
        return load_profile(path)
    candidate = data_dir("profiles") / f"{spec}.toml"
    if candidate.is_file():
        return load_profile(candidate)
    names = ", ".join(p.stem for p in sorted(data_dir("profiles").glob("*.toml")))
    raise UsageError(
        f"--profile {spec}: no built-in profile of that name (built-in: {names}); "
        "give a path to use your own file"
    )


def profile_for_cuda(cuda: str) -> Profile:
    """The built-in profile for `--cuda X.Y`.

    An exact CUDA match wins (the one named cuXY when several match). Otherwise the profile
    with the same major and the highest minor not above X.Y: CUDA's minor-version
    compatibility lets an X.Y driver run any X.(<=Y) build, so --cuda 12.2 picks cu121."""
    m = re.fullmatch(r"(\d+)\.(\d+)", cuda.strip())
    if not m:
        raise UsageError(f"--cuda {cuda!r}: write the CUDA version as X.Y, e.g. 11.8")
    want = (int(m.group(1)), int(m.group(2)))
    profiles = builtin_profiles()

    def version(p: Profile) -> tuple[int, int]:
        major, minor = p.cuda.split(".")[:2]
        return int(major), int(minor)

    exact = [p for p in profiles if version(p) == want]
    if exact:
        preferred = f"cu{want[0]}{want[1]}"
        return next(
            (p for p in exact if p.name == preferred), sorted(exact, key=lambda p: p.name)[0]
        )
    fits = [p for p in profiles if version(p)[0] == want[0] and version(p)[1] < want[1]]
    if fits:
        return max(fits, key=lambda p: (version(p), p.name == f"cu{version(p)[0]}{version(p)[1]}"))
    known = ", ".join(f"{p.cuda} ({p.name})" for p in sorted(profiles, key=version))
    raise UsageError(
        f"--cuda {cuda}: no built-in profile runs on CUDA {cuda} (known: {known}); "
        "pass --profile with your own file"
    )


def select_profile(cuda: str | None, profile: str | None) -> Profile:
    if cuda and profile:
        raise UsageError("give either --cuda or --profile, not both")
    if profile:
        return find_profile(profile)
    if cuda:
        return profile_for_cuda(cuda)
    raise UsageError("say which stack to bundle: --cuda X.Y (e.g. 11.8) or --profile NAME|PATH")
