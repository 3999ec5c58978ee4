"""A profile file (TOML) read into a `Profile`: every key checked, every problem one line that
names the file and the key."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from verl_bundle.airgap.contract.manifest import MaxJobs
from verl_bundle.credentials import redact_url
from verl_bundle.errors import ProfileError, UsageError
from verl_bundle.profile.model import (
    BUILTIN_LOCATIONS,
    DEFAULT_INDEX,
    Checks,
    DirectArtifact,
    InterpreterSource,
    Location,
    Phase,
    Profile,
    Readiness,
    SourceBuild,
    StaticMetadata,
    Toolchain,
    UvLock,
)
from verl_bundle.profile.sources import Git, parse_git, parse_spec, requirement_source
from verl_bundle.profile.table import (
    Table,
    read_cutoff,
    read_requirements,
    read_specifier,
    read_version,
)
from verl_bundle.profile.target import normalize_platform, parse_python
from verl_bundle.wheel.origin import Expect

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 hosts only
    import tomli as tomllib


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
    "readiness",
    "interpreter",
    "verl",
    "overrides",
    "git",
    "uv-lock",
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
    top = Table(path, data)
    top.check_keys(_TOP_KEYS)

    name = top.text("name", required=True) or ""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise top.fail("name", f"{name!r} must be letters, digits, '.', '_' or '-'")
    cuda = read_version(top, "cuda", required=True) or ""
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

    requirements = read_requirements(top, "requirements")
    if not requirements and "uv-lock" not in data:
        raise top.fail("requirements", "expected at least one requirement")
    constraints = read_requirements(top, "constraints")
    overrides = read_requirements(top, "overrides")
    bootstrap = read_requirements(top, "bootstrap") or ("pip",)
    git = _git_sources(top, requirements)
    verl = top.text("verl")
    if verl is not None:
        try:
            spec = parse_spec(verl, "SPEC")
        except UsageError as exc:
            raise top.fail("verl", str(exc)) from None
        if isinstance(spec, Git):
            git["verl"] = spec.clean

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
                version=read_version(t, "version", required=True) or "",
                requires_dist=read_requirements(t, "requires-dist"),
                requires_python=read_specifier(t, "requires-python"),
            )
        )

    artifacts: list[DirectArtifact] = []
    for t in top.tables("artifacts"):
        t.check_keys({"package", "location", "file", "sha256", "fallback", "expect"})
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
                expect=_expect(t),
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
                build_requires=read_requirements(t, "build-requires"),
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
        nvcc=read_version(tool_t, "nvcc"),
        gcc=read_specifier(tool_t, "gcc"),
        driver=tool_t.text("driver"),
        driver_compat=tool_t.text("driver-compat"),
    )
    lock_rel = top.text("lock")
    ready_t = top.table("readiness")
    ready_t.check_keys({"purpose", "modules", "config", "limit"})
    readiness = Readiness(
        purpose=ready_t.text("purpose", Readiness.purpose) or Readiness.purpose,
        modules=ready_t.texts("modules"),
        config=ready_t.text("config", Readiness.config) or Readiness.config,
        limit=ready_t.text("limit", "") or "",
    )
    return Profile(
        name=name,
        path=path,
        sha256=hashlib.sha256(raw).hexdigest(),
        description=top.text("description", "") or "",
        cuda=cuda,
        python=python,
        python_versions=read_specifier(top, "python-versions"),
        platform=platform,
        exclude_newer=read_cutoff(top, "exclude-newer"),
        # build prints the notes: a known limit comes first.
        notes=((f"Known limit: {readiness.limit}",) if readiness.limit else ())
        + top.texts("notes"),
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
        readiness=readiness,
        interpreter=_interpreter(top, locations),
        verl=verl,
        overrides=overrides,
        git=git,
        uv_lock=_uv_lock(top, path, locations),
    )


def _expect(t: Table) -> Expect | None:
    """An artifact's `expect = { torch = "2.11", cuda = "13", cxx11abi = true }`."""
    if "expect" not in t.data:
        return None
    e = t.table("expect")
    e.check_keys({"torch", "cuda", "cxx11abi"})
    torch = read_version(e, "torch")
    cuda = read_version(e, "cuda")
    abi = e.data.get("cxx11abi")
    if abi is not None and not isinstance(abi, bool):
        raise e.fail("cxx11abi", f"expected true or false, found {abi!r}")
    return Expect(torch, cuda, abi)


def _git_sources(top: Table, requirements: tuple[str, ...]) -> dict[str, str]:
    """[git] (package = upstream URL) and every requirement `name @ git+URL@REV`."""
    out: dict[str, str] = {}
    t = top.table("git")
    for pkg, url in top.str_map("git").items():
        try:
            out[canonicalize_name(pkg)] = parse_git(url.removeprefix("git+"), "URL").clean
        except UsageError as exc:
            raise t.fail(pkg, str(exc)) from None
    for i, text in enumerate(requirements):
        try:
            found = requirement_source(text)
        except UsageError as exc:
            raise top.fail(f"requirements[{i}]", str(exc)) from None
        if found is not None and isinstance(found.spec, Git):
            out[found.name] = found.spec.clean
    return out


def _uv_lock(top: Table, path: Path, locations: dict[str, Location]) -> UvLock | None:
    """[uv-lock]: the stack is upstream's uv.lock (its path, or verl's tree's own), with these
    extras; `substitute` maps an index named in its pyproject.toml to a location of ours."""
    if "uv-lock" not in top.data:
        return None
    t = top.table("uv-lock")
    t.check_keys({"path", "extras", "substitute"})
    extras = t.texts("extras")
    if not extras:
        raise t.fail("extras", "expected the extras to install, e.g. ['vllm', 'fsdp']")
    substitute = t.str_map("substitute")
    sub_t = t.table("substitute")
    for index, loc in substitute.items():
        if loc not in locations or locations[loc].kind != "index":
            raise sub_t.fail(index, f"{loc!r} is not an index location of this profile")
    where = t.text("path")
    return UvLock(
        extras=extras,
        path=(path.parent / where) if where else None,
        substitute=substitute,
    )


def _interpreter(top: Table, locations: dict[str, Location]) -> InterpreterSource:
    """[interpreter]: where the bundled CPython comes from, and whether build carries it by
    default; every key optional (the built-in python-build-standalone release)."""
    t = top.table("interpreter")
    t.check_keys({"bundled", "location", "release", "versions", "file", "sums", "sha256"})
    base = InterpreterSource()
    loc = t.text("location", base.location) or base.location
    if loc not in locations or locations[loc].kind != "files":
        raise t.fail("location", f"{loc!r} is not a files location of this profile")
    template = t.text("file", base.file) or base.file
    sums = t.text("sums", base.sums) or base.sums
    for key, value in (("file", template), ("sums", sums)):
        try:
            value.format(release="r", version="3.10.0", arch="x86_64")
        except (KeyError, IndexError, ValueError):
            raise t.fail(
                key, "a path template may use only {release}, {version} and {arch}"
            ) from None
    versions = t.str_map("versions")
    for minor, full in versions.items():
        if not re.fullmatch(r"3\.\d+", minor) or not full.startswith(minor + "."):
            raise t.fail(f"versions.{minor}", 'expected "X.Y" = "X.Y.Z"')
    hashes = t.str_map("sha256")
    for fname, digest in hashes.items():
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise t.fail(f"sha256.{fname}", "expected 64 lowercase hex digits")
    return InterpreterSource(
        location=loc,
        release=t.text("release", base.release) or base.release,
        versions=versions or base.versions,
        file=template,
        sums=sums,
        sha256=hashes,
        bundled=t.flag("bundled", False),
    )


def _check_phases(top: Table, phases: list[Phase], builds: list[SourceBuild]) -> None:
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
