"""Profiles: one CUDA-matched stack as frozen values (read from TOML by profile_load, the
built-ins and --cuda choice in catalog)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from verl_bundle.airgap.contract.manifest import MaxJobs  # one value for host and server
from verl_bundle.credentials import Redactor, redact_url
from verl_bundle.errors import UsageError
from verl_bundle.profile.target import Target, normalize_platform, parse_python
from verl_bundle.wheel.origin import Expect

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
        Location("pytorch-cu130", "index", "https://download.pytorch.org/whl/cu130"),
        Location(
            "flash-attn-releases",
            "files",
            "https://github.com/Dao-AILab/flash-attention/releases/download",
        ),
        Location(
            "vllm-releases", "files", "https://github.com/vllm-project/vllm/releases/download"
        ),
        # verl's own wheel repository (flash-attn, transformer-engine, apex, megatron-bridge
        # for cp311/cp312; its file names carry no torch or CUDA tag).
        Location(
            "verl-wheelhouse",
            "files",
            "https://github.com/verl-project/verl-wheelhouse/releases/download",
        ),
        # Community flash-attn builds per torch and CUDA (`+cu130torch2.11` in the name).
        Location(
            "mjun0812-releases",
            "files",
            "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download",
        ),
        # python-build-standalone's releases: the relocatable CPython builds uv installs.
        Location(
            "python-build-standalone",
            "files",
            "https://github.com/astral-sh/python-build-standalone/releases/download",
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
    # What a prebuilt extension must be built against; None: not checked (the name is trusted).
    expect: Expect | None = None

    def path_for(self, version: str, target: Target) -> str:
        return self.file.format(version=version, python_tag=target.python_tag)


@dataclass(frozen=True)
class SourceBuild:
    """A package shipped as an sdist and compiled on the server, with what its build needs."""

    package: str
    build_requires: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    max_jobs: MaxJobs = field(default_factory=MaxJobs)
    needs_cuda: bool = True


# The python-build-standalone release a bundle's CPython comes from unless the profile names
# another, with its CPython for each Python X.Y (the release's asset names, 20241016).
DEFAULT_PYTHON_RELEASE = "20241016"
DEFAULT_PYTHON_VERSIONS: Mapping[str, str] = {
    "3.9": "3.9.20",
    "3.10": "3.10.15",
    "3.11": "3.11.10",
    "3.12": "3.12.7",
}


@dataclass(frozen=True)
class InterpreterSource:
    """Where the bundled CPython comes from (`build --with-python`): an `install_only` archive
    of a python-build-standalone release on a files location, its hash pinned here or read
    from the release's SHA256SUMS. `bundled`: the profile asks for it by default."""

    location: str = "python-build-standalone"
    release: str = DEFAULT_PYTHON_RELEASE
    versions: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PYTHON_VERSIONS))
    file: str = "{release}/cpython-{version}+{release}-{arch}-unknown-linux-gnu-install_only.tar.gz"
    sums: str = "{release}/SHA256SUMS"
    sha256: Mapping[str, str] = field(default_factory=dict)  # file name -> known hash
    bundled: bool = False

    def path_for(self, version: str, arch: str) -> str:
        return self.file.format(release=self.release, version=version, arch=arch)


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
class Readiness:
    """What the stack is for, proven after install (airgap/postinstall/readiness.py), and a known limit."""

    purpose: str = "PPO with FSDP and vLLM rollout"
    modules: tuple[str, ...] = ()  # empty: the modules behind main_ppo for the verl release
    config: str = "ppo_trainer"
    limit: str = ""  # one line, printed by build, profiles and the readiness report


@dataclass(frozen=True)
class UvLock:
    """The stack taken from upstream's own `uv.lock` (with the `pyproject.toml` beside it): the
    lock's own file (`path`; None: the one in verl's source tree), the extras it installs (one
    rollout engine among them: verl's rollout has no default), and how a package the lock
    takes from a named index of its pyproject.toml is taken when that index cannot be used:
    `substitute` maps that index's name to a location of this profile that serves the same
    builds under the version without its local label (torch 2.11.0+cu130 -> 2.11.0)."""

    extras: tuple[str, ...]
    path: Path | None = None
    substitute: Mapping[str, str] = field(default_factory=dict)


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
    readiness: Readiness = Readiness()
    interpreter: InterpreterSource = InterpreterSource()
    # Where verl comes from when not the index's release (`verl = "SPEC"`, build --verl): a
    # source tree, a wheel or sdist, git+URL@REV, or a version (profile/sources.py).
    verl: str | None = None
    # uv's override-dependencies: requirements that replace any package's own on that name
    # (a fork's `TransferQueue @ git+...@main` met by a released version, say).
    overrides: tuple[str, ...] = ()
    # Git repositories the build reads, by package name -> upstream URL: a requirement
    # `name @ git+URL@REV` declares its own; `--mirror NAME=URL` (a path, file://, git://,
    # http(s)) serves one from a mirror.
    git: Mapping[str, str] = field(default_factory=dict)
    git_mirrors: Mapping[str, str] = field(default_factory=dict)
    uv_lock: UvLock | None = None  # the stack is upstream's uv.lock (resolve/uvlock.py)

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

    def with_verl(self, spec: str) -> Profile:
        """The profile with verl from `spec` (build --verl); a git spec joins `git`."""
        from verl_bundle.profile.sources import Git, parse_spec

        parsed = parse_spec(spec, "--verl")
        git = dict(self.git)
        if isinstance(parsed, Git):
            git["verl"] = parsed.clean
        return replace(self, verl=spec, git=git)

    def with_mirrors(self, mirrors: Mapping[str, str]) -> Profile:
        """Replace locations' URLs by name (`--mirror NAME=URL`), and serve git repositories
        from mirrors (`--mirror PACKAGE=PATH|URL` for a package the profile reads from git)."""
        locations = dict(self.locations)
        git_mirrors = dict(self.git_mirrors)
        for name, url in mirrors.items():
            if name in locations:
                if not _is_http(url):
                    raise UsageError(
                        f"--mirror {name}=...: {redact_url(url)!r} is not an http(s) URL; "
                        f"location {name!r} is a package index or file host"
                    )
                locations[name] = replace(locations[name], url=url.rstrip("/"))
            elif canonicalize_name(name) in self.git:
                git_mirrors[canonicalize_name(name)] = url
            else:
                repos = f"; its git repositories: {', '.join(sorted(self.git))}" if self.git else ""
                raise UsageError(
                    f"--mirror {name}=...: profile {self.name!r} has no location {name!r}; "
                    f"its locations are: {', '.join(sorted(locations))}{repos}"
                )
        return replace(self, locations=locations, git_mirrors=git_mirrors)


def _is_http(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


def parse_mirror(value: str) -> tuple[str, str]:
    """'NAME=URL' -> (NAME, URL), with the URL checked to be a whole http(s) address, or, for a
    git repository, a git URL (file://, git://, ssh://) or an absolute path."""
    name, sep, url = value.partition("=")
    name, url = name.strip(), url.strip()
    if not sep or not name or not url:
        raise UsageError(
            f"--mirror {Redactor()(value)!r}: write it as NAME=URL, e.g. pypi=https://host/simple"
        )
    example = "give the mirror's full address, e.g. https://nexus.example/repository/pypi/simple"
    if url.startswith("/") and not re.search(r"\s", url):
        return name, url.rstrip("/")  # a git mirror on this host
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks the port (a number up to 65535)
    except ValueError as exc:
        # The URL itself is not shown: it may hold credentials, and it cannot be parsed to mask.
        raise UsageError(f"--mirror {name}=...: not a valid URL ({exc}); {example}") from None
    if parts.scheme == "file" and parts.path.startswith("/") and not re.search(r"\s", url):
        return name, url.rstrip("/")  # a git mirror on this host
    if parts.scheme in ("git", "ssh") and parts.hostname and not re.search(r"\s", url):
        return name, url  # a git daemon, or ssh
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", url):
        raise UsageError(
            f"--mirror {name}=...: {redact_url(url)!r} is not an http(s) URL; {example}"
        )
    return name, url.rstrip("/")
