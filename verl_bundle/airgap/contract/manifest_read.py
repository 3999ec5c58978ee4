"""Reading manifest.json into `manifest`'s values, strictly.

A missing or mistyped field is one `ManifestError` naming the field, a path that would leave
the bundle is refused, and a bundle written with a newer schema says so in one line instead of
being half-understood. Import through `verl_bundle.airgap.contract.manifest` (`manifest.load`).
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Iterator, Mapping, TypeVar

from verl_bundle.airgap.contract.manifest_values import (
    KINDS,
    MANIFEST,
    SCHEMA,
    SOURCE_KINDS,
    SUMS,
    BuildTime,
    BuiltFrom,
    Checks,
    Compiled,
    Delta,
    File,
    Generated,
    Interpreter,
    Manifest,
    ManifestError,
    MaxJobs,
    Phase,
    ProfileInfo,
    Readiness,
    Source,
    SourceBuild,
    Target,
    Toolchain,
    canonical,
)
from verl_bundle.airgap.contract.names import UnsafeNameError, bundle_path, plain_filename

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

T = TypeVar("T")


class Reader:
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

    def table(self, key: str, required: bool = True) -> Reader:
        value = self._get(key, required)
        return Reader({} if value is None else value, f"{self.where}.{key}")

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


def _source_build(r: Reader) -> SourceBuild:
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
    took = r.table("build_time", required=False)
    return SourceBuild(
        package=r.text("package"),
        env=tuple(pairs),
        max_jobs=MaxJobs(float(gib), limit or None),
        needs_cuda=r.flag("needs_cuda", True),
        build_time=_build_time(took) if took.data else None,
    )


def _build_time(r: Reader) -> BuildTime:
    minutes = r.data.get("core_minutes_per_arch")
    if not isinstance(minutes, (int, float)) or isinstance(minutes, bool) or minutes <= 0:
        raise ManifestError(f"{r.where}.core_minutes_per_arch must be a positive number")
    return BuildTime(float(minutes), r.texts("archs"))


def _file(r: Reader) -> File:
    kind = r.text("kind")
    if kind not in KINDS:
        raise ManifestError(f"{r.where}.kind must be one of {', '.join(KINDS)}, not {kind!r}")
    path = r.path("path")
    built = r.table("built_from", required=False)
    compiled = r.table("compiled", required=False)
    source = r.table("source", required=False)
    return File(
        path=path,
        name=canonical(r.text("name")),
        version=r.text("version"),
        sha256=r.sha256("sha256"),
        size=r.number("size"),
        location=r.text("location", ""),
        url=r.text("url", ""),
        phase=r.text("phase"),
        kind=kind,
        built_from=BuiltFrom(built.text("file"), built.sha256("sha256")) if built.data else None,
        compiled=_compiled(compiled) if compiled.data else None,
        license=r.text("license", ""),
        source=read_source(source) if source.data else None,
    )


def read_source(r: Reader) -> Source:
    """A file's `source` table (also the lock's, read by the host)."""
    kind = r.text("kind")
    if kind not in SOURCE_KINDS:
        raise ManifestError(
            f"{r.where}.kind must be one of {', '.join(SOURCE_KINDS)}, not {kind!r}"
        )
    tree = r.text("tree_sha256", "")
    if tree and not _SHA256.match(tree):
        raise ManifestError(f"{r.where}.tree_sha256 is not a sha256 digest: {_show(tree)}")
    return Source(
        kind=kind,
        origin=r.text("origin"),
        commit=r.text("commit", ""),
        rev=r.text("rev", ""),
        dirty=r.flag("dirty", False),
        tree_sha256=tree,
        note=r.text("note", ""),
    )


def _compiled(r: Reader) -> Compiled:
    seconds = r.data.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise ManifestError(f"{r.where}.seconds must be a number, not {seconds!r}")
    return Compiled(
        toolkit=r.text("toolkit"),
        compiler=r.text("compiler"),
        archs=r.text("archs"),
        seconds=float(seconds),
        key=r.text("key", ""),
        made=r.text("made", ""),
        reused_from_cache=r.flag("reused_from_cache", False),
    )


def _interpreter(r: Reader) -> Interpreter | None:
    if not r.data:
        return None
    return Interpreter(
        path=r.path("path"),
        version=r.text("version"),
        sha256=r.sha256("sha256"),
        size=r.number("size"),
        arch=r.text("arch"),
        libc=r.text("libc", "gnu"),
        release=r.text("release", ""),
        location=r.text("location", ""),
        url=r.text("url", ""),
    )


def _delta(r: Reader, files: tuple[File, ...]) -> Delta | None:
    """A delta bundle's base; every omitted path must be a payload file the manifest lists."""
    if not r.data:
        return None
    paths = {f.path for f in files}
    omitted = []
    for i, value in enumerate(r.items("omitted")):
        where = f"{r.where}.omitted[{i}]"
        if not isinstance(value, str):
            raise ManifestError(f"{where} must be a string, not {_show(value)}")
        try:
            path = bundle_path(value, where)
        except UnsafeNameError as exc:
            raise ManifestError(str(exc)) from None
        if path not in paths:
            raise ManifestError(f"{where}: {path} is not a file of this bundle")
        omitted.append(path)
    return Delta(r.text("base"), r.sha256("base_manifest"), tuple(omitted))


def read_generated(r: Reader) -> tuple[Generated, ...]:
    """The manifest's `generated` list (files the host wrote: install.sh, lib/ code), shared
    with the asset bundle's manifest (airgap/contract/assets.py)."""
    return tuple(
        Generated(g.path("path"), g.sha256("sha256"), g.number("size"))
        for g in (Reader(x, f"manifest.generated[{i}]") for i, x in enumerate(r.items("generated")))
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
    r = Reader(data, "manifest")
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
        pr = Reader(p, f"manifest.phases[{i}]")
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
                    _source_build(Reader(b, f"{pr.where}.source_builds[{j}]"))
                    for j, b in enumerate(pr.items("source_builds"))
                ),
            )
        )
    files = tuple(_file(Reader(f, f"manifest.files[{i}]")) for i, f in enumerate(r.items("files")))
    for f in files:
        if f.kind != "bootstrap" and f.phase not in seen:
            raise ManifestError(
                f"manifest.files: {f.path} is in phase {f.phase!r}, which is not a phase of "
                f"this bundle ({', '.join(sorted(seen)) or 'none'})"
            )
    generated = read_generated(r)
    return Manifest(
        name=r.text("name"),
        created_by=r.text("created_by", ""),
        created=r.text("created", ""),
        release=r.number("release", 0),
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
            overrides=chk.texts("overrides"),
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
        interpreter=_interpreter(r.table("interpreter", required=False)),
        delta=_delta(r.table("delta", required=False), files),
    )


def _arch_of(platform: str) -> str | None:
    m = re.search(r"(x86_64|aarch64|ppc64le|s390x)$", platform)
    return m.group(1) if m else None


def read_json(text: str) -> Any:
    """manifest.json's document; ManifestError when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"manifest.json is not valid JSON: {exc}") from None


def loads(text: str) -> Manifest:
    return from_dict(read_json(text))


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


def load_with(root: str, parse: Callable[[str], T]) -> T:
    """`parse` applied to manifest.json of the bundle at `root` (or of the one bundle inside
    it); ManifestError (one line, naming the file) when it is missing or unusable. The stack
    and the asset bundle share this."""
    where = os.path.join(find_root(root), MANIFEST)
    try:
        with open(where, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ManifestError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        return parse(text)
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def load(root: str) -> Manifest:
    """The manifest of the bundle directory `root` (or of the one bundle inside it)."""
    return load_with(root, loads)


def iter_paths(m: Manifest) -> Iterator[str]:
    """Every bundle path the manifest lists, manifest.json and SHA256SUMS excluded."""
    for f in m.files:
        yield f.path
    if m.interpreter is not None:
        yield m.interpreter.path
    for g in m.generated:
        yield g.path
