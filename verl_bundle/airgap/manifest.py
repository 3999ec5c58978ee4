"""The bundle's manifest: the one contract between the online host and the server.

Typed, frozen values with a schema version. The host's assemble stage builds a `Manifest` and
writes it with `dumps`; every server tool (verify, doctor, install, postinstall) and rehearse
read it with `load`. Nothing else parses manifest.json. Standard library only, Python 3.8+.

Reading is strict: a missing or mistyped field is one `ManifestError` naming the field, a path
that would leave the bundle is refused, and a bundle written with a newer schema says so in one
line instead of being half-understood.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from verl_bundle.airgap.names import UnsafeNameError, bundle_path, plain_filename

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
REQUIREMENTS = "requirements"
LIB = "lib"
BOOTSTRAP_PHASE = "bootstrap"
# What a file of the bundle is for: a wheel of the stack, a build requirement of a server-side
# source build, an sdist built on the server, or the bundled pip/uv.
KINDS = ("wheel", "build-dep", "sdist", "bootstrap")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
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
    """How MAX_JOBS is sized for a source build: so many GiB of RAM per job, at most `limit`."""

    gib_per_job: float = 9.0
    limit: int | None = None


@dataclass(frozen=True)
class SourceBuild:
    """A package compiled on the server, with the environment its build needs."""

    package: str
    env: tuple[tuple[str, str], ...] = ()
    max_jobs: MaxJobs = MaxJobs()
    needs_cuda: bool = True

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

    # -- questions every server tool asks ------------------------------------------------------

    @property
    def bootstrap(self) -> tuple[File, ...]:
        return tuple(f for f in self.files if f.kind == "bootstrap")

    def bootstrap_file(self, name: str) -> File | None:
        """The bundled wheel of `name` (pip, uv) or None."""
        return next((f for f in self.bootstrap if f.name == _canon(name)), None)

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
        out.update({g.path: g.sha256 for g in self.generated})
        return out

    def has(self, name: str) -> bool:
        return any(f.name == _canon(name) for f in self.installed)

    def without_phases(self, skipped: list[str] | tuple[str, ...]) -> Manifest:
        """The manifest as if the skipped phases were not in the bundle (a rehearsal that could
        not do a source build): their packages, imports and builds are not expected."""
        if not skipped:
            return self
        gone = {f.name for f in self.files if f.phase in skipped}
        checks = Checks(
            imports=tuple(m for m in self.checks.imports if _canon(m) not in gone),
            torch_version=self.checks.torch_version,
            torch_cuda=self.checks.torch_cuda,
            flash_attn_wheel=None if "flash-attn" in gone else self.checks.flash_attn_wheel,
        )
        return _replace(
            self,
            files=tuple(f for f in self.files if f.name not in gone),
            phases=tuple(p for p in self.phases if p.name not in skipped),
            checks=checks,
        )


def _replace(m: Manifest, **changes: Any) -> Manifest:
    import dataclasses

    return dataclasses.replace(m, **changes)


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# -- writing -------------------------------------------------------------------------------------


def to_dict(m: Manifest) -> dict[str, Any]:
    """The JSON document; keys are stable (tests and rehearse rely on them)."""
    return {
        "schema": m.schema,
        "name": m.name,
        "created_by": m.created_by,
        "created": m.created,
        "profile": {
            "name": m.profile.name,
            "description": m.profile.description,
            "sha256": m.profile.sha256,
            "notes": list(m.profile.notes),
        },
        "target": {
            "python": m.target.python,
            "python_tag": m.target.python_tag,
            "platform": m.target.platform,
            "arch": m.target.arch,
            "glibc": m.target.glibc,
            "cuda": m.target.cuda,
        },
        "toolchain": {
            "nvcc": m.toolchain.nvcc,
            "gcc": m.toolchain.gcc,
            "driver": m.toolchain.driver,
            "driver_compat": m.toolchain.driver_compat,
        },
        "checks": {
            "imports": list(m.checks.imports),
            "torch_version": m.checks.torch_version,
            "torch_cuda": m.checks.torch_cuda,
            "flash_attn_wheel": m.checks.flash_attn_wheel,
        },
        "phases": [
            {
                "name": p.name,
                "requirements": p.requirements,
                "packages": list(p.packages),
                "source_builds": [
                    {
                        "package": b.package,
                        "env": dict(b.env),
                        "max_jobs": {
                            "gib_per_job": b.max_jobs.gib_per_job,
                            "limit": b.max_jobs.limit,
                        },
                        "needs_cuda": b.needs_cuda,
                    }
                    for b in p.source_builds
                ],
            }
            for p in m.phases
        ],
        "readiness": {
            "purpose": m.readiness.purpose,
            "modules": list(m.readiness.modules),
            "config": m.readiness.config,
            "limit": m.readiness.limit,
        },
        "installed_size": m.installed_size,
        "files": [_file_dict(f) for f in m.files],
        "generated": [{"path": g.path, "sha256": g.sha256, "size": g.size} for g in m.generated],
    }


def _file_dict(f: File) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "path": f.path,
        "name": f.name,
        "version": f.version,
        "sha256": f.sha256,
        "size": f.size,
        "location": f.location,
        "url": f.url,
        "phase": f.phase,
        "kind": f.kind,
    }
    if f.built_from is not None:
        doc["built_from"] = {"file": f.built_from.file, "sha256": f.built_from.sha256}
    if f.compiled is not None:
        c = f.compiled
        doc["compiled"] = {
            "toolkit": c.toolkit,
            "compiler": c.compiler,
            "archs": c.archs,
            "seconds": c.seconds,
            "key": c.key,
        }
    return doc


def dumps(m: Manifest) -> str:
    return json.dumps(to_dict(m), indent=2) + "\n"


# -- reading -------------------------------------------------------------------------------------


class _Reader:
    """Typed access to one JSON table, with errors that name the field."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ManifestError(f"{where} must be a table, not {_show(data)}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data or self.data[key] is None:
            if required:
                raise ManifestError(f"{self.where}.{key} is missing")
            return None
        return self.data[key]

    def text(self, key: str, default: str | None = None) -> str:
        value = self._get(key, default is None)
        if value is None:
            return default  # type: ignore[return-value]
        if not isinstance(value, str):
            raise ManifestError(f"{self.where}.{key} must be a string, not {_show(value)}")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self._get(key, False)
        if value is not None and not isinstance(value, str):
            raise ManifestError(f"{self.where}.{key} must be a string, not {_show(value)}")
        return value or None

    def number(self, key: str, default: int | None = None) -> int:
        value = self._get(key, default is None)
        if value is None:
            return default  # type: ignore[return-value]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ManifestError(f"{self.where}.{key} must be a whole number, not {_show(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ManifestError(f"{self.where}.{key} must be true or false, not {_show(value)}")
        return value

    def items(self, key: str) -> list[Any]:
        value = self._get(key, False)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ManifestError(f"{self.where}.{key} must be a list, not {_show(value)}")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        items = self.items(key)
        for i, v in enumerate(items):
            if not isinstance(v, str):
                raise ManifestError(f"{self.where}.{key}[{i}] must be a string, not {_show(v)}")
        return tuple(items)

    def table(self, key: str, required: bool = True) -> _Reader:
        value = self._get(key, required)
        return _Reader({} if value is None else value, f"{self.where}.{key}")

    def path(self, key: str) -> str:
        try:
            return bundle_path(self.text(key), f"{self.where}.{key}")
        except UnsafeNameError as exc:
            raise ManifestError(str(exc)) from None

    def sha256(self, key: str) -> str:
        value = self.text(key)
        if not _SHA256.match(value):
            raise ManifestError(f"{self.where}.{key} is not a sha256 digest: {_show(value)}")
        return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _source_build(r: _Reader) -> SourceBuild:
    env = r.table("env", required=False)
    pairs = []
    for k in sorted(env.data):
        v = env.data[k]
        if not isinstance(v, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise ManifestError(f'{env.where}.{k} must be NAME = "string"')
        pairs.append((k, v))
    jobs = r.table("max_jobs", required=False)
    gib = jobs.data.get("gib_per_job", 9.0)
    if not isinstance(gib, (int, float)) or isinstance(gib, bool) or gib <= 0:
        raise ManifestError(f"{jobs.where}.gib_per_job must be a positive number")
    limit = jobs.data.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ManifestError(f"{jobs.where}.limit must be a whole number")
    return SourceBuild(
        package=r.text("package"),
        env=tuple(pairs),
        max_jobs=MaxJobs(float(gib), limit or None),
        needs_cuda=r.flag("needs_cuda", True),
    )


def _file(r: _Reader) -> File:
    kind = r.text("kind")
    if kind not in KINDS:
        raise ManifestError(f"{r.where}.kind must be one of {', '.join(KINDS)}, not {kind!r}")
    path = r.path("path")
    built = r.table("built_from", required=False)
    compiled = r.table("compiled", required=False)
    return File(
        path=path,
        name=_canon(r.text("name")),
        version=r.text("version"),
        sha256=r.sha256("sha256"),
        size=r.number("size"),
        location=r.text("location", ""),
        url=r.text("url", ""),
        phase=r.text("phase"),
        kind=kind,
        built_from=BuiltFrom(built.text("file"), built.sha256("sha256")) if built.data else None,
        compiled=_compiled(compiled) if compiled.data else None,
    )


def _compiled(r: _Reader) -> Compiled:
    seconds = r.data.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise ManifestError(f"{r.where}.seconds must be a number, not {seconds!r}")
    return Compiled(
        toolkit=r.text("toolkit"),
        compiler=r.text("compiler"),
        archs=r.text("archs"),
        seconds=float(seconds),
        key=r.text("key", ""),
    )


def from_dict(data: Any) -> Manifest:
    """A Manifest from the parsed JSON document; ManifestError naming the first bad field."""
    if not isinstance(data, dict):
        raise ManifestError("manifest.json is not a JSON table")
    schema = data.get("schema", data.get("format"))
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise ManifestError("manifest.json has no schema number: is it a verl-bundle manifest?")
    if schema > SCHEMA:
        raise ManifestError(
            f"this bundle's manifest has schema {schema}, newer than this verl-bundle reads "
            f"(up to {SCHEMA}): run the bundle's own ./install.sh, or upgrade verl-bundle"
        )
    if schema < SCHEMA:
        raise ManifestError(
            f"this bundle's manifest has schema {schema}, older than this verl-bundle reads "
            f"({SCHEMA}): run the bundle's own ./install.sh, or rebuild the bundle"
        )
    r = _Reader(data, "manifest")
    ready = r.table("readiness", required=False)
    prof, tgt, tool, chk = (
        r.table("profile"),
        r.table("target"),
        r.table("toolchain"),
        r.table("checks", required=False),
    )
    phases = []
    seen = set()
    for i, p in enumerate(r.items("phases")):
        pr = _Reader(p, f"manifest.phases[{i}]")
        name = pr.text("name")
        try:
            plain_filename(name, f"{pr.where}.name")
        except UnsafeNameError as exc:
            raise ManifestError(str(exc)) from None
        if name in seen:
            raise ManifestError(f"{pr.where}.name: phase {name!r} is listed twice")
        seen.add(name)
        phases.append(
            Phase(
                name=name,
                requirements=pr.path("requirements"),
                packages=pr.texts("packages"),
                source_builds=tuple(
                    _source_build(_Reader(b, f"{pr.where}.source_builds[{j}]"))
                    for j, b in enumerate(pr.items("source_builds"))
                ),
            )
        )
    files = tuple(_file(_Reader(f, f"manifest.files[{i}]")) for i, f in enumerate(r.items("files")))
    for f in files:
        if f.kind != "bootstrap" and f.phase not in seen:
            raise ManifestError(
                f"manifest.files: {f.path} is in phase {f.phase!r}, which is not a phase of "
                f"this bundle ({', '.join(sorted(seen)) or 'none'})"
            )
    generated = tuple(
        Generated(g.path("path"), g.sha256("sha256"), g.number("size"))
        for g in (
            _Reader(x, f"manifest.generated[{i}]") for i, x in enumerate(r.items("generated"))
        )
    )
    return Manifest(
        name=r.text("name"),
        created_by=r.text("created_by", ""),
        created=r.text("created", ""),
        profile=ProfileInfo(
            name=prof.text("name"),
            description=prof.text("description", ""),
            sha256=prof.text("sha256", ""),
            notes=prof.texts("notes"),
        ),
        target=Target(
            python=tgt.text("python"),
            python_tag=tgt.text("python_tag"),
            platform=tgt.text("platform"),
            arch=tgt.opt_text("arch") or _arch_of(tgt.text("platform")),
            glibc=tgt.opt_text("glibc"),
            cuda=tgt.text("cuda"),
        ),
        toolchain=Toolchain(
            nvcc=tool.opt_text("nvcc"),
            gcc=tool.opt_text("gcc"),
            driver=tool.opt_text("driver"),
            driver_compat=tool.opt_text("driver_compat"),
        ),
        checks=Checks(
            imports=chk.texts("imports"),
            torch_version=chk.opt_text("torch_version"),
            torch_cuda=chk.opt_text("torch_cuda"),
            flash_attn_wheel=chk.opt_text("flash_attn_wheel"),
        ),
        phases=tuple(phases),
        files=files,
        generated=generated,
        installed_size=r.number("installed_size", 0),
        schema=schema,
        readiness=Readiness(
            purpose=ready.text("purpose", Readiness.purpose),
            modules=ready.texts("modules"),
            config=ready.text("config", Readiness.config),
            limit=ready.text("limit", ""),
        ),
    )


def _arch_of(platform: str) -> str | None:
    m = re.search(r"(x86_64|aarch64|ppc64le|s390x)$", platform)
    return m.group(1) if m else None


def loads(text: str) -> Manifest:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"manifest.json is not valid JSON: {exc}") from None
    return from_dict(data)


def find_root(path: str) -> str:
    """The bundle directory: `path` itself, or the one bundle directory inside it."""
    if os.path.isfile(os.path.join(path, SUMS)) or os.path.isfile(os.path.join(path, MANIFEST)):
        return path
    if os.path.isdir(path):
        inner = [
            os.path.join(path, d)
            for d in sorted(os.listdir(path))
            if os.path.isfile(os.path.join(path, d, SUMS))
        ]
        if len(inner) == 1:
            return inner[0]
    return path


def load(root: str) -> Manifest:
    """The manifest of the bundle directory `root` (or of the one bundle inside it).
    ManifestError (one line, naming the file) when it is missing or unusable."""
    where = os.path.join(find_root(root), MANIFEST)
    try:
        with open(where, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ManifestError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        return loads(text)
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def iter_paths(m: Manifest) -> Iterator[str]:
    """Every bundle path the manifest lists, manifest.json and SHA256SUMS excluded."""
    for f in m.files:
        yield f.path
    for g in m.generated:
        yield g.path
