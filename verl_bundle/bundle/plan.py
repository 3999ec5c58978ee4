"""The plan of a bundle: every file it will hold, with its hash, and the typed manifest, worked
out before a byte of the tarball is written (the tarball module only copies what is planned)."""

from __future__ import annotations

import os
import shlex
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from verl_bundle import __version__
from verl_bundle.airgap.contract import figures
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.trust.release import of_time
from verl_bundle.bundle import simple
from verl_bundle.bundle.entries import BundlePlan, Entry, airgap_entries, made_here
from verl_bundle.compile.cost import pinned_version, server_build_time
from verl_bundle.errors import LockError
from verl_bundle.fetch.standalone import BundledPython
from verl_bundle.fetch.wheelhouse import Artifact, Wheelhouse
from verl_bundle.profile.model import Profile
from verl_bundle.profile.model import SourceBuild as ProfileSourceBuild
from verl_bundle.profile.target import Target
from verl_bundle.resolve.lock import Lock, LockedPackage, dumps, group_by_phase
from verl_bundle.resources import airgap_dir, data_dir
from verl_bundle.wheel.licenses import declared, metadata_of_wheel, of_file

if TYPE_CHECKING:
    from verl_bundle.airgap.verify.signature import Signer
    from verl_bundle.bundle.crossing.extras import Base


SERVED = "verl_bundle/airgap/verify/served.py"


def bundle_name(lock: Lock) -> str:
    return name_for(lock.profile, lock.target)


def name_for(profile: str, target: Target) -> str:
    """A bundle's name (its tarball's stem and top directory), from its profile and target."""
    return f"verl-bundle-{profile}-{target.python_tag}-{target.platform}"


def check_phases(lock: Lock, profile: Profile, where: str = "the lock") -> None:
    """Every locked package installs in one of the profile's phases (pip and uv in the
    bootstrap): a package in another phase would be bundled and never installed."""
    known = [p.name for p in profile.phases]
    for pkg in lock.packages:
        bootstrap = pkg.role == "bootstrap" and pkg.phase == mf.BOOTSTRAP_PHASE
        if pkg.phase not in known and not bootstrap:
            raise LockError(
                f"{where}: {pkg.name} is in phase {pkg.phase!r}, which profile {profile.name} "
                f"does not have ({', '.join(known)}); make the lock again with `verl-bundle lock`"
            )


def _folder(a: Artifact) -> str:
    if a.package.role == "bootstrap":
        return mf.BOOTSTRAP
    if a.package.kind == "sdist" and a.compiled is None:
        return mf.SOURCES
    return mf.WHEELS


def as_locked(pkg: LockedPackage) -> bool:
    """A package whose file goes into the bundle as the lock names it (a wheel: never built or
    compiled here). These come first in the tarball, in `locked_entries` order, so their place
    is known before anything is fetched and each is written there as its download ends
    (bundle/early.py)."""
    return pkg.kind == "wheel"


def locked_entries(lock: Lock) -> list[Entry]:
    """The tarball's first files as `plan` orders them, from the lock alone: every `as_locked`
    package's file by folder and name, with the lock's sha256 and size; [] when the lock
    lacks a size (its place would not be known)."""
    picked = [p for p in lock.packages if as_locked(p)]
    if any(p.file.size is None for p in picked):
        return []
    folder = {p.name: mf.BOOTSTRAP if p.role == "bootstrap" else mf.WHEELS for p in picked}
    ordered = sorted(picked, key=lambda p: (folder[p.name], p.file.filename))
    return [
        Entry(f"{folder[p.name]}/{p.file.filename}", p.file.sha256, p.file.size or 0)
        for p in ordered
    ]


def _unpacked(a: Artifact) -> tuple[int, str]:
    """What the file takes once installed (a wheel's unpacked size; for an sdist built on the
    server, its unpacked size plus room for the build, an estimate), and the licence its
    metadata declares: for a wheel as its check recorded them (integrity.WheelFacts), else
    from one opening of the file; a .tar.gz's size unpacked from its last 4 bytes (no need to
    inflate thousands of members)."""
    if a.facts is not None:
        return a.facts.unpacked, a.facts.license
    try:
        if a.filename.endswith(".whl"):
            with zipfile.ZipFile(a.path) as zf:
                try:
                    license = declared(metadata_of_wheel(zf))
                except (KeyError, UnicodeDecodeError):
                    license = ""
                return sum(i.file_size for i in zf.infolist()), license
        if a.filename.endswith(".tar.gz"):
            with open(a.path, "rb") as fh:
                fh.seek(-4, os.SEEK_END)
                size = int.from_bytes(fh.read(4), "little") * 4 + (2 << 30)
        else:
            with tarfile.open(a.path) as tf:
                size = sum(m.size for m in tf.getmembers()) * 4 + (2 << 30)
        return size, of_file(Path(a.path))
    except (OSError, zipfile.BadZipFile, tarfile.TarError):
        return a.size * 3, ""


def _requirement_line(a: Artifact) -> str:
    # The version is the one in the file name (a local label such as +cu118 included), so that
    # pip matches exactly this file among --find-links.
    return f"{a.package.name}=={_file_version(a)} --hash=sha256:{a.sha256}"


def _file_version(a: Artifact) -> str:
    if a.filename.endswith(".whl"):
        return str(parse_wheel_filename(a.filename)[1])
    return str(parse_sdist_filename(a.filename)[1])


def render_install(context: dict[str, Any], template: str = "install.sh.j2") -> str:
    # A shell script, not HTML: values are quoted for the shell with the `sh` filter instead.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    # install.sh carries the Python it runs first (airgap/install/boot.py) as its text.
    boot = (airgap_dir() / "install" / "boot.py").read_text(encoding="utf-8").rstrip("\n")
    return env.get_template(template).render(boot=boot, **context)


def _phases(
    lock: Lock, profile: Profile, by_name: dict[str, Artifact]
) -> tuple[list[mf.Phase], list[Entry]]:
    """One manifest phase and one hash-pinned requirements file per install phase, in profile
    order."""
    phases: list[mf.Phase] = []
    files: list[Entry] = []
    order = [p.name for p in profile.phases]
    for i, (phase, locked) in enumerate(group_by_phase(lock, order), start=1):
        members = [by_name[m.name] for m in locked]
        req_path = f"{mf.REQUIREMENTS}/{i:02d}-{phase}.txt"
        text = "".join(_requirement_line(a) + "\n" for a in members)
        files.append(made_here(req_path, text.encode()))
        builds = []
        for a in members:
            # A source build compiled on the online host is a wheel: the server builds nothing.
            server_builds = a.package.kind == "sdist" and a.compiled is None
            build = profile.source_build(a.package.name) if server_builds else None
            if build is not None:
                builds.append(source_build_of(build, _file_version(a), profile.toolchain.nvcc))
        phases.append(
            mf.Phase(
                name=phase,
                requirements=req_path,
                packages=tuple(f"{a.package.name}=={_file_version(a)}" for a in members),
                source_builds=tuple(builds),
            )
        )
    return phases, files


def _manifest_file(e: Entry, a: Artifact, license: str) -> mf.File:
    return mf.File(
        path=e.arcname,
        name=a.package.name,
        version=_file_version(a),
        sha256=a.sha256,
        size=a.size,
        location=a.package.location,
        url=a.package.file.url,
        phase=a.package.phase,
        kind=_manifest_kind(a),
        built_from=mf.BuiltFrom(a.built_from.filename, a.built_from.sha256)
        if a.built_from
        else None,
        compiled=a.compiled,
        license=license,
        source=a.package.source,
    )


def plan(
    profile: Profile,
    lock: Lock,
    wheelhouse: Wheelhouse,
    base: Base | None = None,
    signer: Signer | None = None,
    release: int | None = None,
) -> BundlePlan:
    """Everything the bundle will hold, with hashes, before a byte of the tar is written; with
    `base`, a delta that leaves out the files the base has; with `signer`, manifest.json's
    signature beside it. `release`: the manifest's release number (default: the lock's time)."""
    check_phases(lock, profile)
    name = bundle_name(lock)
    by_name = {a.package.name: a for a in wheelhouse.artifacts}
    # The files as locked first (`locked_entries`), then those made here, each by folder and name.
    ordered = sorted(
        wheelhouse.artifacts,
        key=lambda a: (not as_locked(a.package), _folder(a), a.filename),
    )
    payload = [
        Entry(f"{_folder(a)}/{a.filename}", a.sha256, a.size, source=a.path, verified=a.verified)
        for a in ordered
    ]
    python = wheelhouse.interpreter
    carried = [] if python is None else [_interpretermade_here(python)]
    phases, generated = _phases(lock, profile, by_name)
    generated.append(made_here(mf.LOCK, dumps(lock).encode()))
    generated += airgap_entries()
    # install.sh --from URL fetches this file alone and runs it: the shim carries its hash.
    served = next(e for e in generated if e.arcname == f"{mf.LIB}/{SERVED}")
    glibc = [
        lock.target.highest_glibc(a.filename)
        for a in wheelhouse.artifacts
        if a.filename.endswith(".whl")
    ]
    glibc_needed = max((g for g in glibc if g), default=None)
    flash = next(
        (a for a in wheelhouse.artifacts if a.package.name == canonicalize_name("flash-attn")), None
    )
    # install.sh is a shim that finds a Python and hands over to lib/'s installer, which reads
    # everything else from the manifest; README.txt is for the server's admin.
    context = {
        "name": name,
        "version": __version__,
        "profile": profile.name,
        "python_version": lock.target.python_version,
        "python_tag": lock.target.python_tag,
        "platform": lock.target.platform,
        "cuda": lock.cuda,
        "phases": [p.name for p in phases],
        # The bundled CPython the sh entry unpacks when the server has no fitting Python.
        "python_archive": python.entry.path if python else "",
        "python_sha256": python.entry.sha256 if python else "",
        "served_sha256": served.sha256,
    }
    generated.insert(0, made_here(mf.INSTALL, render_install(context).encode()))
    generated.insert(1, made_here(mf.README, render_install(context, "README.txt.j2").encode()))
    generated.append(made_here(mf.DOCTOR, _doctor_script().encode()))
    unpacked = [_unpacked(a) for a in ordered]
    files = tuple(
        _manifest_file(e, a, license)
        for e, a, (_, license) in zip(payload, ordered, unpacked, strict=True)
    )
    generated += [made_here(path, data) for path, data in simple.pages(files)]  # pip/uv index
    manifest = mf.Manifest(
        name=name,
        created_by=f"verl-bundle {__version__}",
        created=lock.created,
        release=release if release is not None else of_time(lock.created),
        profile=profile_info(profile),
        target=target_of(lock.target, lock.cuda, glibc_needed),
        toolchain=toolchain_of(profile),
        checks=mf.Checks(
            imports=tuple(profile.checks.imports),
            torch_version=profile.checks.torch_version,
            torch_cuda=profile.checks.torch_cuda,
            flash_attn_wheel=flash.filename if flash and flash.filename.endswith(".whl") else None,
            overrides=tuple(lock.overrides),
        ),
        phases=tuple(phases),
        files=files,
        generated=tuple(mf.Generated(e.arcname, e.sha256, e.size) for e in generated),
        installed_size=sum(size for size, _ in unpacked) + (python.unpacked if python else 0),
        readiness=mf.Readiness(**vars(profile.readiness)),
        interpreter=python.entry if python else None,
    )
    from verl_bundle.bundle.crossing.extras import finish

    return finish(name, manifest, generated, payload, carried, base, signer)


def _interpretermade_here(python: BundledPython) -> Entry:
    e = python.entry
    return Entry(e.path, e.sha256, e.size, source=str(python.source))


def source_build_of(
    build: ProfileSourceBuild, version: str | None = None, nvcc: str | None = None
) -> mf.SourceBuild:
    """The manifest's source build of `version` (its figure: compile/cost.py, the one source)."""
    return mf.SourceBuild(
        package=build.package,
        env=tuple(sorted(dict(build.env).items())),
        max_jobs=mf.MaxJobs(build.max_jobs.gib_per_job, build.max_jobs.limit),
        needs_cuda=build.needs_cuda,
        build_time=build_time_of(build, version, nvcc),
    )


def build_time_of(
    build: ProfileSourceBuild, version: str | None = None, nvcc: str | None = None
) -> mf.BuildTime | None:
    """The host's measured figure for this build and the architectures the server compiles
    (compile/cost.py: server_build_time, the figure the host's own estimate uses), carried to
    the server so that it can say how long the build will take there. None for a package with
    no measured figure."""
    return server_build_time(build, version, nvcc)


def profile_info(profile: Profile) -> mf.ProfileInfo:
    return mf.ProfileInfo(
        name=profile.name,
        description=profile.description,
        sha256=profile.sha256,
        notes=tuple(profile.notes),
    )


def toolchain_of(profile: Profile) -> mf.Toolchain:
    return mf.Toolchain(
        nvcc=profile.toolchain.nvcc,
        gcc=profile.toolchain.gcc,
        driver=profile.toolchain.driver,
        driver_compat=profile.toolchain.driver_compat,
    )


def target_of(target: Target, cuda: str, glibc: tuple[int, int] | None) -> mf.Target:
    return mf.Target(
        python=target.python_version,
        python_tag=target.python_tag,
        platform=target.platform,
        arch=target.arch,
        glibc=f"{glibc[0]}.{glibc[1]}" if glibc else None,
        cuda=cuda,
    )


def manifest_for_profile(profile: Profile, target: Target) -> mf.Manifest:
    """What a bundle of this profile will need from a server, before it is built (for the
    doctor run without a bundle, and for `profiles show`). The worst case: its declared source
    builds happen, each in the profile's own phase (named as install.sh names it)."""
    phases = []
    for i, phase in enumerate(profile.phases, start=1):
        builds = tuple(
            source_build_of(b, pinned_version(profile, b.package), profile.toolchain.nvcc)
            for b in profile.source_builds
            if profile.phase_of(b.package) == phase.name
        )
        req = f"{mf.REQUIREMENTS}/{i:02d}-{phase.name}.txt"
        phases.append(mf.Phase(phase.name, req, (), builds))
    return mf.Manifest(
        name=f"profile {profile.name}",
        created_by=f"verl-bundle {__version__}",
        created="",
        profile=profile_info(profile),
        target=target_of(target, profile.cuda, target.glibc),
        toolchain=toolchain_of(profile),
        checks=mf.Checks(
            imports=tuple(profile.checks.imports),
            torch_version=profile.checks.torch_version,
            torch_cuda=profile.checks.torch_cuda,
        ),
        phases=tuple(phases),
    )


def driver_line(profile: Profile) -> tuple[str, ...]:
    """ "the server needs an NVIDIA driver >= ..." from the profile's [toolchain] (worded by
    airgap/contract/figures.py, as the doctor words it); () when it names no driver."""
    driver = figures.driver_minimum(
        toolchain_of(profile), profile.checks.torch_cuda or profile.cuda
    )
    return (f"the server needs an {driver}",) if driver else ()


def profile_figures(profile: Profile) -> tuple[str, ...]:
    """What `profiles show` says a profile needs: the driver, and each source build's phase,
    GPU architectures and build time on the server, read from the manifest a bundle of it would
    carry (manifest_for_profile), so the doctor and the installer say the same."""
    m = manifest_for_profile(profile, profile.target())
    return driver_line(profile) + tuple(figures.source_build_lines(m))


def _manifest_kind(a: Artifact) -> str:
    if a.package.role == "bootstrap":
        return "bootstrap"
    if a.package.kind == "sdist" and a.compiled is None:
        return "sdist"
    if a.package.role == "build-dep":
        return "build-dep"
    return "wheel"


def _doctor_script() -> str:
    return (data_dir("templates") / "doctor.sh").read_text()
