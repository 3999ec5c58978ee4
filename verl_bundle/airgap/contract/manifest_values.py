"""The manifest's values: the names inside a bundle, the frozen dataclasses manifest.json
holds, and the questions every tool asks of a `Manifest`. Importers use
`verl_bundle.airgap.contract.manifest`, which adds the reader and the writer; the reader and the writer
import from here, so that any of the three can be imported first. Standard library only,
Python 3.8+.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from verl_bundle.airgap.errors import DamagedError

SCHEMA = 2  # the manifest schema this code writes and reads (1: verl-bundle 0.1's untyped dict)
MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
LOCK = "pylock.toml"
INSTALL = "install.sh"
DOCTOR = "doctor"
README = "README.txt"
WHEELS = "wheels"
SOURCES = "sources"
BOOTSTRAP = "bootstrap"
INTERPRETER = "python"  # the folder of the bundled CPython archive
REQUIREMENTS = "requirements"
LIB = "lib"
SBOM = "sbom.cdx.json"  # the CycloneDX bill of materials of the bundle's payload
LICENSES = "LICENSES.txt"  # the same components grouped by licence, for an approver
# The signature of manifest.json (build --sign): an SSH signature (ssh-keygen -Y sign, namespace
# SIGNING_NAMESPACE) or an armored GPG one. Listed in SHA256SUMS; the manifest cannot list it.
SIGNATURE = "manifest.json.sig"
SIGNATURE_GPG = "manifest.json.asc"
SIGNING_NAMESPACE = "verl-bundle"
BOOTSTRAP_PHASE = "bootstrap"
# What a file of the bundle is for: a wheel of the stack, a build requirement of a server-side
# source build, an sdist built on the server, or the bundled pip/uv.
KINDS = ("wheel", "build-dep", "sdist", "bootstrap")


class ManifestError(DamagedError, ValueError):
    """manifest.json cannot be used: unreadable, not a manifest, a newer schema, or a field
    that is missing, mistyped or unsafe. The message names the field."""


# -- the values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The server the bundle is for."""

    python: str  # "3.10"
    python_tag: str  # "cp310"
    platform: str  # "manylinux_2_17_x86_64"
    arch: str | None  # "x86_64"
    glibc: str | None  # the highest glibc a wheel needs, "2.17"
    cuda: str  # "12.1"


@dataclass(frozen=True)
class Toolchain:
    """What a server-side source build needs, and the driver the CUDA build needs (specs)."""

    nvcc: str | None = None
    gcc: str | None = None
    driver: str | None = None
    driver_compat: str | None = None


@dataclass(frozen=True)
class MaxJobs:
    """How MAX_JOBS is sized for a source build: one job per `gib_per_job` of RAM, at most
    `limit` (and at most half the cores). The profile declares it; the manifest carries it."""

    gib_per_job: float = 9.0
    limit: int | None = None


@dataclass(frozen=True)
class BuildTime:
    """What a source build costs, as measured on the host: CPU-core-minutes to compile one GPU
    architecture, and the architectures the server's build compiles ("8.0", "9.0"). The server
    divides by its MAX_JOBS to say how long the build will take there."""

    core_minutes_per_arch: float
    archs: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceBuild:
    """A package compiled on the server, with the environment its build needs. `build_time`:
    None where no figure is known (and in bundles written before the field)."""

    package: str
    env: tuple[tuple[str, str], ...] = ()
    max_jobs: MaxJobs = MaxJobs()
    needs_cuda: bool = True
    build_time: BuildTime | None = None

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class Phase:
    """One install step: its requirements file (pins with hashes) and what it installs."""

    name: str
    requirements: str  # a bundle path, e.g. "requirements/01-torch.txt"
    packages: tuple[str, ...]  # "name==version" in file order
    source_builds: tuple[SourceBuild, ...] = ()


@dataclass(frozen=True)
class BuiltFrom:
    file: str
    sha256: str


@dataclass(frozen=True)
class Compiled:
    """Provenance of a wheel compiled on the online host from a source build's sdist: the
    toolkit, the host compiler, the GPU architectures, how long it took, and its cache key."""

    toolkit: str  # "nvcc 13.0.88 (/usr/local/cuda-13.0)"
    compiler: str  # "gcc 12.2.0"
    archs: str  # TORCH_CUDA_ARCH_LIST, "8.0;9.0"
    seconds: float
    key: str = ""
    made: str = ""  # when the compile finished (UTC, ISO 8601); "" for bundles made before
    reused_from_cache: bool = False  # the wheel came from the compile cache, not this build


@dataclass(frozen=True)
class Source:
    """Where a wheel made on the online host from a source came from, when that source is not
    an index: a source tree (a checkout, a fork; `dirty` when it differs from its commit), a git
    revision (asked `rev`, got `commit`), or a wheel
    or sdist file given by path. `tree_sha256` hashes the tree's files (path, mode, content);
    `note` says what was left out (an object a mirror lacks). Which mirror served a git source
    is not recorded: the upstream URL and the commit say what it is. Bundles written before
    this field read as None."""

    kind: str  # "tree", "git", "wheel" or "sdist"
    origin: str  # the path or URL given (never credentials)
    commit: str = ""
    rev: str = ""
    dirty: bool = False
    tree_sha256: str = ""
    note: str = ""

    def describe(self) -> str:
        """One phrase: "/src/verl (commit 1a2b3c4d5e6f, dirty)", "git+URL@rev (commit ...)"."""
        facts = []
        if self.kind == "tree" and not self.commit:
            facts.append("not a git checkout")
        if self.commit:
            facts.append(f"commit {self.commit[:12]}")
        if self.dirty:
            facts.append("dirty")
        if self.note:
            facts.append(self.note)
        where = f"git+{self.origin}@{self.rev}" if self.kind == "git" and self.rev else self.origin
        return f"{where} ({', '.join(facts)})" if facts else where


SOURCE_KINDS = ("tree", "git", "wheel", "sdist")


@dataclass(frozen=True)
class File:
    """A payload file: a wheel, an sdist or a bootstrap wheel, with where it came from."""

    path: str  # bundle path: wheels/..., sources/..., bootstrap/...
    name: str  # canonical distribution name
    version: str  # as in the file name (a local label such as +cu118 included)
    sha256: str
    size: int
    location: str
    url: str  # never carries credentials
    phase: str
    kind: str  # one of KINDS
    built_from: BuiltFrom | None = None
    compiled: Compiled | None = None  # set for a source build compiled on the online host
    # The licence its metadata declares (License-Expression, else License, else the licence
    # classifiers); "" when it declares none (and in bundles written before the field).
    license: str = ""
    source: Source | None = None  # set for a wheel built here from a tree, git or a local file

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Delta:
    """A delta bundle (build --base OLD): the payload files whose hashes the base bundle already
    has are left out of the tarball. The manifest and SHA256SUMS still list every file of the
    full bundle; the server takes the omitted ones from the old bundle's directory, each checked
    against this manifest's sha256 (install.sh --base OLD_DIR)."""

    base: str  # the base bundle's name
    base_manifest: str  # sha256 of the base's manifest.json
    omitted: tuple[str, ...]  # bundle paths not in this tarball


@dataclass(frozen=True)
class Interpreter:
    """A relocatable CPython the bundle carries (python-build-standalone's `install_only`
    archive for the target's Python, architecture and libc), for a server whose own Python
    does not fit. Bundles written before this field read as None."""

    path: str  # bundle path: python/cpython-3.10.15+20241016-x86_64-unknown-linux-gnu-...
    version: str  # the full CPython version, "3.10.15"
    sha256: str
    size: int
    arch: str  # "x86_64"
    libc: str = "gnu"
    release: str = ""  # the release it comes from, "20241016"
    location: str = ""
    url: str = ""  # never carries credentials

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Generated:
    """A file written by the host for this bundle (install.sh, requirements, lib/ code)."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Checks:
    """What post-install checks: imports, and the torch build the stack needs."""

    imports: tuple[str, ...] = ()
    torch_version: str | None = None
    torch_cuda: str | None = None
    flash_attn_wheel: str | None = None
    # Requirements the stack overrides on purpose ("numpy>=2.0.0": upstream's uv.lock, a
    # profile's overrides): a pip check finding they explain is not a failure.
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Readiness:
    """What the bundle is for, proven after install by importing what verl's trainer loads.

    `modules` empty: the modules behind `main_ppo` for the installed verl version and this
    purpose (airgap/readiness.json). `limit`: a known limit of the stack, one line, printed by
    build, profiles and the readiness report. Bundles written before this field read as the
    defaults."""

    purpose: str = "PPO with FSDP and vLLM rollout"
    modules: tuple[str, ...] = ()
    config: str = "ppo_trainer"
    limit: str = ""


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    description: str = ""
    sha256: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """Everything the server side knows about a bundle."""

    name: str
    created_by: str
    created: str
    profile: ProfileInfo
    target: Target
    toolchain: Toolchain
    checks: Checks
    phases: tuple[Phase, ...]
    files: tuple[File, ...] = ()
    generated: tuple[Generated, ...] = ()
    installed_size: int = 0
    schema: int = SCHEMA
    readiness: Readiness = Readiness()
    interpreter: Interpreter | None = None
    delta: Delta | None = None  # set for a delta bundle; None for a full one (and older ones)
    # Monotonic: a later bundle of a line has a higher one (build --release N, else the lock's
    # time as YYYYMMDDhhmmss); 0 for bundles made before it. Both signatures cover it.
    release: int = 0

    # -- questions every server tool asks ------------------------------------------------------

    @property
    def bootstrap(self) -> tuple[File, ...]:
        return tuple(f for f in self.files if f.kind == "bootstrap")

    def bootstrap_file(self, name: str) -> File | None:
        """The bundled wheel of `name` (pip, uv) or None."""
        return next((f for f in self.bootstrap if f.name == canonical(name)), None)

    @property
    def installed(self) -> tuple[File, ...]:
        """The distributions the install puts into the environment (not pip/uv)."""
        return tuple(f for f in self.files if f.kind != "bootstrap")

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.phases)

    def files_of(self, phase: str) -> tuple[File, ...]:
        return tuple(f for f in self.files if f.phase == phase)

    @property
    def source_builds(self) -> tuple[SourceBuild, ...]:
        return tuple(b for p in self.phases for b in p.source_builds)

    def hashes(self) -> dict[str, str]:
        """Bundle path -> sha256 for every file the manifest lists (payload and generated)."""
        out = {f.path: f.sha256 for f in self.files}
        if self.interpreter is not None:
            out[self.interpreter.path] = self.interpreter.sha256
        out.update({g.path: g.sha256 for g in self.generated})
        return out

    def omitted_files(self) -> tuple[File, ...]:
        """The payload files a delta bundle leaves to its base (none for a full bundle)."""
        gone = set(self.delta.omitted) if self.delta else set()
        return tuple(f for f in self.files if f.path in gone)

    def has(self, name: str) -> bool:
        return any(f.name == canonical(name) for f in self.installed)

    def without_phases(self, skip_phases: list[str] | tuple[str, ...]) -> Manifest:
        """The manifest as if the skipped phases were not in the bundle (a rehearsal that could
        not do a source build): their packages, imports and builds are not expected."""
        if not skip_phases:
            return self
        gone = {f.name for f in self.files if f.phase in skip_phases}
        checks = Checks(
            imports=tuple(m for m in self.checks.imports if canonical(m) not in gone),
            torch_version=self.checks.torch_version,
            torch_cuda=self.checks.torch_cuda,
            flash_attn_wheel=None if "flash-attn" in gone else self.checks.flash_attn_wheel,
            overrides=self.checks.overrides,
        )
        return _replace(
            self,
            files=tuple(f for f in self.files if f.name not in gone),
            phases=tuple(p for p in self.phases if p.name not in skip_phases),
            checks=checks,
        )


def _replace(m: Manifest, **changes: Any) -> Manifest:
    return dataclasses.replace(m, **changes)


def canonical(name: str) -> str:
    """A distribution name as the manifest stores it (PEP 503: runs of -_. as -, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()
