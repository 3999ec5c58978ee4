"""The fetch stage: every locked file into the cache, hash checked; pure sdists built into
wheels; every wheel checked (integrity.py: its structure, or whole where no published hash
vouches for it) before it may enter a bundle.

A lock may have been made against other locations than the ones used now (a lock committed
upstream, built inside the intranet with --mirror): each file is then looked up by name on the
mirror, and its hash must still match the lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.compile.compiler import CompileOptions, SourceCompiler
from verl_bundle.credentials import split_credentials
from verl_bundle.errors import FetchError, LockError
from verl_bundle.fetch.standalone import BundledPython
from verl_bundle.fetch.wheelchecks import WheelCheck, WheelChecks
from verl_bundle.net.cache import disk_error
from verl_bundle.net.download import Cached, Downloader, Want
from verl_bundle.net.http import Http, shown_url
from verl_bundle.net.index import read_project
from verl_bundle.profile.model import DEFAULT_INDEX, Profile
from verl_bundle.progress import Reporter, step
from verl_bundle.resolve.lock import LOCAL, Lock, LockedFile, LockedPackage
from verl_bundle.sources.hostbuild import BuiltWheel, build_pure_wheel
from verl_bundle.wheel.integrity import WheelFacts, ensure_whole, passed, recorded


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
    facts: WheelFacts | None = None  # a wheel's unpacked size and licence, as its check saw them


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
    fetched: Callable[[str, str, bool], None] | None = None,
) -> Wheelhouse:
    """Fetch (or find cached) every file of `lock`; raises FetchError/LockError/HostBuildError.

    The largest files start first (sdists built here before them: their builds run while the
    rest download); each wheel is checked (wheelchecks.py) as soon as it is in the cache; a
    pure sdist is built into a wheel as soon as it is. `fetched(sha256, path, fresh)` is told
    of each file as soon as it is in the cache."""
    for pkg in lock.packages:
        check_locked_name(pkg)
        if pkg.location == LOCAL and downloader.cache.lookup(pkg.file.sha256) is None:
            raise FetchError(
                f"{pkg.name} {pkg.version}: {pkg.file.filename} was made on another host (or "
                "removed from the cache); build again with its source (--verl SPEC for verl)"
            )
    wants = [_want(p, lock, profile, downloader.http) for p in lock.packages]
    locked = {p.name: p for p in lock.packages}
    index = profile.location(DEFAULT_INDEX).url
    checks = WheelChecks(downloader.cache)
    sources = HashSources(lock, profile, downloader.http)
    built: dict[str, BuiltWheel] = {}
    # One host build at a time: uv build takes the cores it finds, and finding uv reads
    # sysconfig, whose first use is not safe from two threads at once (Python 3.11).
    one_build = threading.Lock()

    def fetch_one(want: Want) -> Cached:
        got = downloader.fetch(want)
        pkg = locked[want.package]
        if fetched is not None:  # the tarball's writer copies it now (bundle/early.py)
            fetched(got.sha256, str(got.path), got.fresh)
        if pkg.kind == "wheel" and want.filename.endswith(".whl"):
            structure = passed(downloader.cache, got.sha256, whole=False)
            whole = not (structure or sources.published(pkg))
            checks.submit(
                WheelCheck(
                    got.path, got.sha256, got.size, whole, pkg.name, want.filename, pkg.file.url
                )
            )
        elif pkg.kind == "host-build":
            with one_build:
                wheel = _host_build(pkg, got, downloader, index, reporter)
            built[pkg.name] = wheel
            checks.submit(
                WheelCheck(
                    wheel.path,
                    wheel.sha256,
                    wheel.size,
                    True,
                    pkg.name,
                    wheel.filename,
                    pkg.file.url,
                    built=True,
                )
            )
        return got

    try:
        want_of = {w.package: w for w in wants}
        order = [want_of[p.name] for p in fetch_order(lock.packages)]
        results = downloader.parallel(fetch_one, order)
        with (
            step(reporter, f"checking {checks.checked} wheels") if checks.checked else nullcontext()
        ):
            checks.wait()  # before any compile: a damaged wheel stops the build at once
    finally:
        checks.close()
    by_name = {r.want.package: r for r in results}
    artifacts: list[Artifact] = []
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
            w = built[pkg.name]
            artifacts.append(
                Artifact(
                    pkg,
                    str(w.path),
                    w.filename,
                    w.sha256,
                    w.size,
                    pkg.file,
                    facts=recorded(downloader.cache, w.sha256),
                )
            )
        elif pkg.kind == "sdist" and (source_build := profile.source_build(pkg.name)):
            outcome = compiler.compile(
                pkg, source_build, got.path, got.sha256, cached_wheels, reporter
            )
            summaries.append(outcome.summary)
            c = outcome.wheel
            if c is None:
                artifacts.append(
                    Artifact(pkg, str(got.path), pkg.file.filename, got.sha256, got.size)
                )
                continue
            ensure_whole(
                downloader.cache,
                c.path,
                c.sha256,
                package=pkg.name,
                filename=c.filename,
                url=pkg.file.url,
                built=True,
            )
            artifacts.append(
                Artifact(
                    pkg,
                    str(c.path),
                    c.filename,
                    c.sha256,
                    c.size,
                    pkg.file,
                    c.provenance,
                    facts=recorded(downloader.cache, c.sha256),
                )
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
                    facts=recorded(downloader.cache, got.sha256),
                )
            )
    return Wheelhouse(
        artifacts=tuple(artifacts),
        downloaded_files=downloader.downloaded_files,
        downloaded_bytes=downloader.downloaded_bytes,
        # Every package's file was either downloaded in this run (lock-time included) or not.
        cached_files=max(0, len(lock.packages) - downloader.downloaded_files),
        host_built=len(built),
        compiled=tuple(summaries),
    )


def fetch_order(packages: Sequence[LockedPackage]) -> list[LockedPackage]:
    """Sources first (a pure one is built here while the rest download; a compile needs its
    own), then the largest files: the longest downloads start at once instead of last."""

    def key(pkg: LockedPackage) -> tuple[int, float]:
        size = pkg.file.size
        return (0 if pkg.kind != "wheel" else 1, -(size if size is not None else math.inf))

    return sorted(packages, key=key)


class HashSources:
    """Whether the lock's hash of a file is one its source published (an index page, or the
    profile's pin for a direct artifact) rather than computed from a download (by uv or the
    lock, where the source gave none): that decides how deep its wheel check goes. An index
    named by URL is asked once, with the page of the first of its files that needs a check;
    the resolver's default index (no URL) publishes a sha256 for every file."""

    def __init__(self, lock: Lock, profile: Profile, http: Http) -> None:
        self.lock = lock
        self.profile = profile
        self.http = http
        self._asked: dict[str, bool] = {}
        self._guard = threading.Lock()

    def published(self, pkg: LockedPackage) -> bool:
        loc = self.profile.locations.get(pkg.location)
        if loc is None:
            return False
        if loc.kind != "index":
            art = self.profile.artifact(pkg.name)
            return art is not None and art.sha256.get(pkg.file.filename) == pkg.file.sha256
        if not loc.url:
            return True
        with self._guard:  # one question per location, whichever download asks first
            if loc.name not in self._asked:
                where = f"{pkg.name} (location {pkg.location})"
                page = read_project(self.http, split_credentials(loc.url)[0], pkg.name, where)
                found = page.file(pkg.file.filename) if page is not None else None
                self._asked[loc.name] = found is not None and found.sha256 == pkg.file.sha256
            return self._asked[loc.name]


def _host_build(
    pkg: LockedPackage, got: Cached, downloader: Downloader, index: str | None, reporter: Reporter
) -> BuiltWheel:
    reporter.status(f"building {pkg.file.filename} into a wheel on this host")
    try:
        return build_pure_wheel(
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
