"""The fetch stage: every locked file into the cache, hash checked; pure sdists built into
wheels; every wheel checked whole (CRCs, RECORD) before it may enter a bundle.

A lock may have been made against other locations than the ones used now (a lock committed
upstream, built inside the intranet with --mirror): each file is then looked up by name on the
mirror, and its hash must still match the lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.compile import CompileOptions, SourceCompiler
from verl_bundle.credentials import split_credentials
from verl_bundle.errors import FetchError, LockError
from verl_bundle.hostbuild import build_pure_wheel
from verl_bundle.integrity import ensure_whole
from verl_bundle.lock import Lock, LockedFile, LockedPackage
from verl_bundle.net.cache import disk_error
from verl_bundle.net.download import Cached, Downloader, Want
from verl_bundle.net.http import Http, shown_url
from verl_bundle.net.index import read_project
from verl_bundle.profile import DEFAULT_INDEX, Profile
from verl_bundle.progress import Reporter
from verl_bundle.standalone import BundledPython


@dataclass(frozen=True)
class Artifact:
    """One file as it goes into the bundle."""

    package: LockedPackage
    path: str  # in the cache
    filename: str  # in the bundle
    sha256: str
    size: int
    built_from: LockedFile | None = None  # set for wheels built on the online host
    compiled: mf.Compiled | None = None  # set for a source build compiled on the online host
    # Fetched and hashed against the lock in this run (as it streamed in): the tar writer does
    # not hash it again. False for a cache hit, which the tar writer hashes while copying it.
    verified: bool = False


@dataclass(frozen=True)
class Wheelhouse:
    """The fetch stage's result: every file of the lock, cached, hashed and checked."""

    artifacts: tuple[Artifact, ...]
    downloaded_files: int  # by this run, lock-time downloads included
    downloaded_bytes: int
    cached_files: int
    host_built: int
    compiled: tuple[str, ...] = ()  # one summary line per source build (compiled or left)
    interpreter: BundledPython | None = None  # build --with-python: the bundled CPython


def fetch(
    lock: Lock,
    profile: Profile,
    downloader: Downloader,
    reporter: Reporter,
    compile_options: CompileOptions | None = None,
) -> Wheelhouse:
    """Fetch (or find cached) every file of `lock`; raises FetchError/LockError/HostBuildError."""
    for pkg in lock.packages:
        check_locked_name(pkg)
    wants = [_want(p, lock, profile, downloader.http) for p in lock.packages]
    locked = {p.name: p for p in lock.packages}

    def fetch_and_check(want: Want) -> Cached:
        """A wheel is checked whole as soon as it is in the cache, while the other downloads
        go on (a check passed is remembered, so the pass over every wheel below skips it)."""
        got = downloader.fetch(want)
        pkg = locked[want.package]
        if pkg.kind == "wheel" and want.filename.endswith(".whl"):
            ensure_whole(
                downloader.cache,
                got.path,
                got.sha256,
                package=pkg.name,
                filename=want.filename,
                url=pkg.file.url,
            )
        return got

    results: list[Cached] = downloader.parallel(fetch_and_check, wants)
    by_name = {r.want.package: r for r in results}
    artifacts: list[Artifact] = []
    built = 0
    index = profile.location(DEFAULT_INDEX).url
    compiler = SourceCompiler(
        profile,
        lock,
        compile_options or CompileOptions(),
        downloader.cache.root,
        downloader.http.redact,
    )
    cached_wheels = {r.want.filename: r.path for r in results}
    summaries: list[str] = []
    for pkg in lock.packages:
        got = by_name[pkg.name]
        if pkg.kind == "host-build":
            reporter.status(f"building {pkg.file.filename} into a wheel on this host")
            try:
                wheel = build_pure_wheel(
                    pkg.name,
                    got.path,
                    pkg.file.filename,
                    got.sha256,
                    downloader.cache,
                    index,
                    downloader.http.redact,
                )
            except OSError as exc:
                written = Path(exc.filename or downloader.cache.root)
                full = disk_error(exc, written, f"{pkg.name}: building a wheel on this host")
                if full is None:
                    raise
                raise full from None
            built += 1
            artifacts.append(
                Artifact(pkg, str(wheel.path), wheel.filename, wheel.sha256, wheel.size, pkg.file)
            )
        elif pkg.kind == "sdist" and (source_build := profile.source_build(pkg.name)):
            outcome = compiler.compile(
                pkg, source_build, got.path, got.sha256, cached_wheels, reporter
            )
            summaries.append(outcome.summary)
            w = outcome.wheel
            artifacts.append(
                Artifact(pkg, str(w.path), w.filename, w.sha256, w.size, pkg.file, w.provenance)
                if w is not None
                else Artifact(pkg, str(got.path), pkg.file.filename, got.sha256, got.size)
            )
        else:
            artifacts.append(
                Artifact(
                    pkg,
                    str(got.path),
                    pkg.file.filename,
                    got.sha256,
                    got.size,
                    verified=got.fresh,
                )
            )
    wheels = [a for a in artifacts if a.filename.endswith(".whl")]
    if wheels:
        reporter.status(f"checking {len(wheels)} wheels are whole ...")
        downloader.parallel(
            lambda a: ensure_whole(
                downloader.cache,
                Path(a.path),
                a.sha256,
                package=a.package.name,
                filename=a.filename,
                url=(a.built_from or a.package.file).url,
                built=a.built_from is not None,
            ),
            wheels,
        )
    return Wheelhouse(
        artifacts=tuple(artifacts),
        downloaded_files=downloader.downloaded_files,
        downloaded_bytes=downloader.downloaded_bytes,
        # Every package's file was either downloaded in this run (lock-time included) or not.
        cached_files=max(0, len(lock.packages) - downloader.downloaded_files),
        host_built=built,
        compiled=tuple(summaries),
    )


def check_locked_name(pkg: LockedPackage) -> None:
    """A lock's file name becomes a path on this host and in the bundle: it must be plain."""
    try:
        plain_filename(pkg.file.filename, f"the lock's file for {pkg.name}")
    except UnsafeNameError as exc:
        raise LockError(
            f"{exc}; the lock is damaged or was edited by hand: make a new one with "
            "`verl-bundle lock`"
        ) from None


def _want(pkg: LockedPackage, lock: Lock, profile: Profile, http: Http) -> Want:
    url = pkg.file.url
    loc = profile.locations.get(pkg.location)
    locked_base = lock.locations.get(pkg.location, "")
    if loc is not None and loc.url and split_credentials(loc.url)[0] != locked_base:
        url = _relocate(pkg, locked_base, loc.url, loc.kind, http)
    return Want(pkg.name, pkg.file.filename, url, pkg.location, pkg.file.sha256, pkg.file.size)


def _relocate(pkg: LockedPackage, locked_base: str, new_base: str, kind: str, http: Http) -> str:
    """Where the locked file lives on the location's current (mirror) URL."""
    clean_new = split_credentials(new_base)[0]
    if locked_base and pkg.file.url.startswith(locked_base + "/"):
        return clean_new + pkg.file.url[len(locked_base) :]
    if kind != "index":
        return clean_new + "/" + urlsplit(pkg.file.url).path.lstrip("/")
    where = f"{pkg.name} (location {pkg.location})"
    page = read_project(http, clean_new, pkg.name, where)
    shown = shown_url(f"{clean_new}/{pkg.name}/")
    if page is None:
        raise FetchError(f"{where}: {shown} answered 404; the mirror does not serve this project")
    found = page.file(pkg.file.filename)
    if found is None:
        raise FetchError(
            f"{pkg.name}: {pkg.file.filename} is not on {shown} "
            f"(location {pkg.location}); the mirror lacks the locked file"
        )
    return split_credentials(found.url)[0]
