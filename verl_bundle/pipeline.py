"""The online side, end to end: profile -> resolve (lock) -> fetch -> assemble.

Each function takes plain values and returns a frozen result; nothing here prints except through
the reporter, so the CLI (or a test) decides how results are shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from verl_bundle.bundle.assembly import (
    Base,
    Bundle,
    Compression,
    Crossing,
    Damaged,
    DeltaFigures,
    DigestMemo,
    EarlyTar,
    assemble,
    bundle_name,
    early_tar,
)
from verl_bundle.bundle.plan import check_phases, driver_line
from verl_bundle.bundle.tarball import check_output_dir
from verl_bundle.compile.compiler import CompileOptions
from verl_bundle.errors import LockError, UsageError
from verl_bundle.fetch.standalone import fetch_interpreter
from verl_bundle.fetch.wheelhouse import Wheelhouse, fetch
from verl_bundle.net.cache import Cache
from verl_bundle.net.download import Downloader
from verl_bundle.net.http import Http
from verl_bundle.profile.model import DEFAULT_INDEX, Profile
from verl_bundle.profile.sources import BUILT
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter
from verl_bundle.resolve.local import (
    attach,
    ensure_built,
    has_sources,
    prepare,
    released_notes,
    specs_of,
)
from verl_bundle.resolve.lock import Lock, diff_locks, read_lock, write_lock
from verl_bundle.resolve.resolver import lock_profile
from verl_bundle.resolve.uvlock import lock_from_uv
from verl_bundle.sources.sourcebuild import SourceBuilder


@dataclass(frozen=True)
class Request:
    """What the user asked for, already parsed: the profile with mirrors applied, the target."""

    profile: Profile
    target: Target
    mirrors: Mapping[str, str]
    cache_dir: Path
    jobs: int = 8
    python_given: bool = False  # --python was given: a lock for another Python is refused
    # --verl or --from-lock was given: the profile's committed lock is not the stack asked for
    verl_given: bool = False


@dataclass(frozen=True)
class BuildRequest:
    """`build`'s options beyond the stack: where the tarball goes, a lock to build exactly, and
    the tarball's compression."""

    stack: Request
    output: Path
    lock: Path | None = None
    compress: Compression = "none"
    compile: CompileOptions | None = None  # None: --compile auto, the profile's archs
    with_python: bool | None = None  # carry a CPython for the target; None: as the profile asks
    base: Path | None = None  # build a delta against this bundle (tarball, directory, manifest)
    split: int | None = None  # write volumes of at most this many bytes
    sign: str | None = None  # an SSH key, or gpg:KEYID
    release: int | None = None  # the manifest's release number; None: the lock's time


@dataclass(frozen=True)
class LockResult:
    lock: Lock
    path: Path
    notes: tuple[str, ...]


@dataclass(frozen=True)
class BuildResult:
    bundle: Bundle
    lock: Lock
    lock_source: str  # "resolved" or the lock file used
    wheelhouse: Wheelhouse
    notes: tuple[str, ...]
    delta: DeltaFigures | None = None


def _downloader(req: Request, reporter: Reporter) -> Downloader:
    urls = [loc.url for loc in req.profile.locations.values() if loc.url]
    return Downloader(Cache(req.cache_dir), Http.for_urls(urls), reporter, jobs=req.jobs)


def _builder(req: Request, downloader: Downloader, reporter: Reporter) -> SourceBuilder:
    index = req.profile.location(DEFAULT_INDEX).url
    return SourceBuilder(
        downloader.cache, index, downloader.http.redact, reporter, req.profile.git_mirrors
    )


def _stack_lock(req: Request, target: Target) -> Lock | None:
    """The profile's committed lock, when it is for this target: its versions stay the stack's
    around a verl (or another package) built from source."""
    path = req.profile.lock
    if path is None or not path.is_file():
        return None
    lock = read_lock(path)
    return lock if lock.target == target else None


def resolve(req: Request, target: Target, downloader: Downloader, reporter: Reporter) -> Lock:
    """The profile resolved for `target`: its sources (verl's tree, a git revision, a local
    file) built here first and resolved as wheels, with the committed lock's versions kept."""
    if req.profile.uv_lock is not None:
        return _from_uv_lock(req, target, downloader, reporter)
    if not has_sources(req.profile):
        return lock_profile(req.profile, target, downloader, reporter)
    prepared = prepare(
        req.profile, target, _builder(req, downloader, reporter), _stack_lock(req, target)
    )
    for note in prepared.notes:
        reporter.note(note)
    for note in released_notes(req.profile, target, prepared.built, downloader):
        reporter.note(note)
    lock = lock_profile(prepared.profile, target, downloader, reporter)
    return attach(lock, prepared.built)


def _from_uv_lock(req: Request, target: Target, downloader: Downloader, reporter: Reporter) -> Lock:
    """The stack of upstream's uv.lock ([uv-lock], build --from-lock), verl built from the tree
    the lock belongs to."""
    builder = _builder(req, downloader, reporter)
    spec = specs_of(req.profile).get("verl")
    if not isinstance(spec, BUILT):
        raise UsageError(
            f"profile {req.profile.name}: a stack from upstream's uv.lock needs verl's own tree "
            "(its project): give --verl DIR or git+URL@REV (or verl = ... in the profile)"
        )
    verl = builder.make("verl", spec)
    for note in verl.notes:
        reporter.note(note)
    got = lock_from_uv(req.profile, target, verl, builder, downloader, reporter)
    for note in released_notes(req.profile, target, got.built, downloader):
        reporter.note(note)
    return attach(got.lock, got.built)


def make_lock(req: Request, output: Path | None, reporter: Reporter) -> LockResult:
    downloader = _downloader(req, reporter)
    lock = resolve(req, req.target, downloader, reporter)
    path = output or Path(f"pylock.{bundle_name(lock)}.toml")
    write_lock(lock, path)
    return LockResult(lock, path, req.profile.notes)


@dataclass(frozen=True)
class LockCheck:
    path: Path
    differences: tuple[str, ...]
    profile_changed: bool

    @property
    def current(self) -> bool:
        return not self.differences


def check_lock(req: Request, path: Path | None, reporter: Reporter) -> LockCheck:
    """Resolve the profile again and compare with a lock (the profile's committed one by default)."""
    path = path or req.profile.lock
    if path is None:
        raise LockError(
            f"profile {req.profile.name} has no committed lock; give the lock to check with -o FILE"
        )
    old = read_lock(path)
    fresh = resolve(req, old.target, _downloader(req, reporter), reporter)
    return LockCheck(path, tuple(diff_locks(old, fresh)), old.profile_sha256 != req.profile.sha256)


def load_matching_lock(req: Request, path: Path) -> tuple[Lock, list[str]]:
    """Read a lock and check it belongs to this profile and target."""
    lock = read_lock(path)
    notes: list[str] = []
    if lock.profile != req.profile.name:
        raise LockError(
            f"{path}: this lock is for profile {lock.profile!r}, not {req.profile.name!r}; "
            f"pass --profile {lock.profile} or make a new lock"
        )
    if req.python_given and lock.target.python != req.target.python:
        raise LockError(
            f"{path}: this lock is for Python {lock.target.python_version}, not "
            f"{req.target.python_version}; drop --python or make a lock for that Python"
        )
    if lock.target.platform != req.target.platform:
        raise LockError(
            f"{path}: this lock is for {lock.target.platform}, not {req.target.platform}"
        )
    check_phases(lock, req.profile, str(path))
    if lock.profile_sha256 != req.profile.sha256:
        notes.append(
            f"note: {req.profile.path} changed since {path} was made; building from the lock as "
            "it is (run `verl-bundle lock` to pick up the change)"
        )
    return lock, notes


def _crossing(request: BuildRequest, notes: list[str]) -> Crossing:
    """--base, --split-size and --sign, checked before anything is fetched."""
    from verl_bundle.airgap.verify.signature import Signer
    from verl_bundle.bundle.read import open_bundle

    signer = Signer.parse(request.sign) if request.sign else None
    base = None
    if request.base is not None:
        opened = open_bundle(request.base)
        base = Base(opened.manifest, opened.manifest_sha256, opened.where)
        old, new = opened.manifest, request.stack
        if old.profile.name != new.profile.name:
            notes.append(
                f"note: the base {request.base} is a bundle of profile {old.profile.name}, not "
                f"{new.profile.name}: the delta leaves out only the files both have"
            )
    return Crossing(base=base, split=request.split, signer=signer, release=request.release)


def build(request: BuildRequest, reporter: Reporter) -> BuildResult:
    req, lock_path = request.stack, request.lock
    if lock_path is not None and req.verl_given:
        raise UsageError(
            "--lock builds exactly that lock, verl and all: leave out --verl and --from-lock, "
            "or make a lock with them (`verl-bundle lock --verl SPEC`)"
        )
    check_output_dir(request.output)  # before hours of work, not after
    downloader = _downloader(req, reporter)
    notes = [*driver_line(req.profile), *req.profile.notes]
    crossing = _crossing(request, notes)
    committed = not req.verl_given  # --verl: the committed lock's verl is not the one asked
    if (
        committed
        and lock_path is None
        and req.profile.lock is not None
        and req.profile.lock.is_file()
    ):
        candidate = read_lock(req.profile.lock)
        if candidate.target == req.target:
            lock_path = req.profile.lock
            notes.append(
                f"note: building from the profile's committed lock {lock_path} (no resolution); "
                "pass --lock to use another, or `verl-bundle lock --check` to compare with today"
            )
    if lock_path is not None:
        lock, more = load_matching_lock(req, lock_path)
        notes += more
        source = str(lock_path)
        # The bundle is built for the lock's target (its Python, when --python was not given).
        req = replace(req, target=lock.target)
        # Wheels the lock says were made here from a source: in the cache, or made again.
        notes += ensure_built(lock, _builder(req, downloader, reporter))
    else:
        lock = resolve(req, req.target, downloader, reporter)
        source = "resolved"
    with_python = request.with_python
    if with_python is None:
        with_python = req.profile.interpreter.bundled

    def fetch_all(early: EarlyTar | None = None) -> Wheelhouse:
        # The interpreter first: an archive that does not fit stops the build before the stack's
        # gigabytes are fetched.
        python = (
            fetch_interpreter(req.profile, req.target, downloader, reporter)
            if with_python
            else None
        )
        reporter.status(f"fetching {len(lock.packages)} files ...")
        told = early.fetched if early is not None else None
        wheelhouse = fetch(lock, req.profile, downloader, reporter, request.compile, told)
        return replace(wheelhouse, interpreter=python)

    def refetch(damaged: Sequence[Damaged]) -> Wheelhouse:
        for d in damaged:  # only files of the cache: a damaged one is never used again
            if d.entry.source and Path(d.entry.source).is_relative_to(downloader.cache.root):
                Path(d.entry.source).unlink(missing_ok=True)
        return fetch_all()

    memo = DigestMemo(downloader.cache.root / "tarballs")  # digests of tarballs written before
    # The tarball's files as locked are written into it as their downloads end.
    early = early_tar(
        lock,
        request.output,
        request.compress,
        crossing,
        reporter,
        lambda sha256: downloader.cache.lookup(sha256) is not None,
    )
    try:
        wheelhouse = fetch_all(early)
        reporter.status("writing the bundle ...")
        bundle, delta = assemble(
            req.profile,
            lock,
            wheelhouse,
            request.output,
            request.compress,
            reporter,
            refetch,
            memo,
            crossing,
            early,
        )
    finally:
        if early is not None:
            early.close()
    return BuildResult(bundle, lock, source, wheelhouse, tuple(notes), delta)
