"""Wheels made on the online host from sources that are not an index's files: a source tree (a
checkout or a fork, dirty or not), a git revision, or a wheel or sdist file given by path.

A tree (sources/tree.py lists and hashes it; a git revision is first written out as one by
sources/git.py) is copied and built by its own build system (`uv build --wheel --no-sources`:
the tree's `[tool.uv.sources]` never reach the network); the wheel is cached by the tree's hash
and stored in the download cache by its own, so that the fetch stage finds it like any other
file. What the wheel leaves out of the tree, or a mirror of the commit, is said in a note.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name, parse_wheel_filename

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.credentials import Redactor, redact_url
from verl_bundle.errors import HostBuildError, UsageError
from verl_bundle.net.cache import Cache
from verl_bundle.profile.sources import Git, Release, SdistFile, SourceSpec, Tree, WheelFile
from verl_bundle.progress import Reporter
from verl_bundle.sources.git import GitReader
from verl_bundle.sources.hostbuild import (
    BuiltWheel,
    build_pure_wheel,
    is_pure,
    place_normalized,
)
from verl_bundle.sources.hostbuild import source_date_epoch as default_epoch
from verl_bundle.sources.tree import TreeState, copy_tree, tree_sha256, tree_state
from verl_bundle.uvcmd import host_python, run_uv

# The tree's own project files a stack may be read from (resolve/uvlock.py).
PROJECT_FILES = ("pyproject.toml", "uv.lock")


@dataclass(frozen=True)
class BuiltSource:
    """A wheel made here from a source, stored in the download cache under its sha256."""

    name: str  # canonical
    version: str
    wheel: BuiltWheel
    source: mf.Source
    requires: tuple[str, ...]  # the wheel's Requires-Dist, for the conflict check
    notes: tuple[str, ...] = ()
    # The tree's own pyproject.toml and uv.lock, when it has them: upstream's lock is a stack
    # (resolve/uvlock.py). Empty for a wheel or an sdist file.
    project: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.wheel.path.as_uri()


class SourceBuilder:
    """Makes one wheel per source; `mirrors` maps a package name to a git URL or path that
    serves its repository instead of the upstream URL (`--mirror NAME=URL`)."""

    def __init__(
        self,
        cache: Cache,
        index_url: str | None,
        redact: Redactor,
        reporter: Reporter,
        mirrors: Mapping[str, str] | None = None,
    ) -> None:
        self.cache = cache
        self.index_url = index_url
        self.redact = redact
        self.reporter = reporter
        self.mirrors: dict[str, str] = {canonicalize_name(k): v for k, v in (mirrors or {}).items()}

    def make(self, name: str, spec: SourceSpec) -> BuiltSource:
        name = canonicalize_name(name)
        if isinstance(spec, Release):
            raise UsageError(f"{name} {spec.version}: a release comes from the index, not built")
        self.cache.root.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, WheelFile):
            return self._wheel_file(name, spec.path)
        if isinstance(spec, SdistFile):
            return self._sdist_file(name, spec.path)
        if isinstance(spec, Tree):
            state = tree_state(spec.path, self.redact)
            source = mf.Source(
                "tree", str(spec.path), commit=state.commit, dirty=state.dirty, tree_sha256=""
            )
            return self._tree(name, spec.path, state, source, ())
        return self._git(name, spec)

    # -- files ---------------------------------------------------------------------------------

    def _wheel_file(self, name: str, path: Path) -> BuiltSource:
        try:
            dist, version, _, _ = parse_wheel_filename(path.name)
        except ValueError:
            raise UsageError(f"{path}: not a wheel file name (NAME-VERSION-TAGS.whl)") from None
        _same_name(name, str(dist), path)
        wheel = self._store(path)
        source = mf.Source("wheel", str(path))
        return BuiltSource(name, str(version), wheel, source, _requires(wheel.path))

    def _sdist_file(self, name: str, path: Path) -> BuiltSource:
        self.reporter.status(f"building {path.name} into a wheel on this host")
        sha = sha256_file(path)
        built = build_pure_wheel(
            name, path, path.name, sha, self.cache, self.index_url, self.redact
        )
        dist, version, _, _ = parse_wheel_filename(built.filename)
        _same_name(name, str(dist), path)
        wheel = self._store(built.path)
        source = mf.Source("sdist", str(path), tree_sha256="")
        return BuiltSource(name, str(version), wheel, source, _requires(wheel.path))

    def _store(self, path: Path) -> BuiltWheel:
        """The wheel in the download cache's blob store, where the fetch stage looks it up by
        hash; the wheel returned is `path` (uv takes it by its file name)."""
        sha = sha256_file(path)
        if self.cache.lookup(sha) is None:
            self.cache.store(_adopted(path, self.cache.root), sha)
        return BuiltWheel(path, path.name, sha, path.stat().st_size)

    # -- trees ---------------------------------------------------------------------------------

    def _tree(
        self,
        name: str,
        root: Path,
        state: TreeState,
        source: mf.Source,
        absent: Sequence[str],
    ) -> BuiltSource:
        digest = tree_sha256(root, state.files)
        source = dataclasses.replace(source, tree_sha256=digest)
        cutoff = self._tools_of(state)
        # One wheel per tree and build tools: the same tree built with the tools of another day
        # is another wheel.
        key = (
            digest if cutoff is None else hashlib.sha256(f"{digest} {cutoff}".encode()).hexdigest()
        )
        out = self.cache.built(key)
        existing = sorted(out.glob("*.whl")) if out.is_dir() else []
        if len(existing) == 1:
            final = existing[0]
        else:
            self.reporter.status(f"building {name} from {source.describe()} on this host")
            final = self._build_tree(name, root, state, out, cutoff)
        dist, version, _, _ = parse_wheel_filename(final.name)
        _same_name(name, str(dist), root)
        notes = _left_out_of_wheel(name, root, state.files, final)
        notes += _absent_note(name, source, absent, final)
        wheel = self._store(final)
        project = {f: (root / f).read_bytes() for f in PROJECT_FILES if (root / f).is_file()}
        return BuiltSource(
            name, str(version), wheel, source, _requires(final), tuple(notes), project
        )

    def _tools_of(self, state: TreeState) -> str | None:
        """The upload-date cut-off for a commit's build tools: its own time, where the default
        index gives upload times (no mirror), so that it builds again to the same wheel later."""
        if state.epoch is None or self.index_url is not None:
            return None
        when = dt.datetime.fromtimestamp(state.epoch + 1, dt.timezone.utc)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _build_tree(
        self, name: str, root: Path, state: TreeState, out: Path, cutoff: str | None
    ) -> Path:
        epoch = state.epoch if state.epoch is not None else default_epoch()
        with tempfile.TemporaryDirectory(
            prefix="source-build-", dir=self.cache.root, ignore_cleanup_errors=True
        ) as tmp:
            work = Path(tmp)
            src = work / "src"
            copy_tree(root, state.files, src)
            args = [
                "build",
                "--wheel",
                "--no-sources",  # the tree's [tool.uv.sources] would send uv to its git hosts
                "--out-dir",
                str(work / "dist"),
                "--python",
                host_python(),
                str(src),
            ]
            if cutoff is not None:
                args[2:2] = ["--exclude-newer", cutoff]
            extra = {"UV_DEFAULT_INDEX": self.index_url} if self.index_url else {}
            extra["SOURCE_DATE_EPOCH"] = str(epoch)
            run = run_uv(args, work, self.redact, extra_env=extra)
            dist = work / "dist"
            wheels = sorted(dist.glob("*.whl")) if dist.is_dir() else []
            if run.returncode != 0 or len(wheels) != 1:
                tail = " | ".join(run.stderr.strip().splitlines()[-6:]) or "no wheel was made"
                raise HostBuildError(
                    f"{name}: building a wheel from {root} with its own build system failed: "
                    f"{tail}. Check that the tree builds (`uv build --wheel` there)"
                )
            wheel = wheels[0]
            if not is_pure(wheel):
                raise HostBuildError(
                    f"{name}: {root} builds a platform-specific wheel ({wheel.name}); only "
                    "pure-Python sources are built on the online host: give its wheel for the "
                    "target (a .whl file) or use the released version"
                )
            return place_normalized(wheel, work, out, epoch)

    # -- git -----------------------------------------------------------------------------------

    def _git(self, name: str, spec: Git) -> BuiltSource:
        given = self.mirrors.get(name)
        fetch_from = given or spec.url
        git = GitReader(self.cache.root, self.redact, self.reporter)
        repo, commit = git.locate(name, fetch_from, spec.rev, spec.clean)
        epoch = git.commit_time(name, repo, commit, fetch_from)
        with tempfile.TemporaryDirectory(
            prefix="git-tree-", dir=self.cache.root, ignore_cleanup_errors=True
        ) as tmp:
            root = Path(tmp) / "tree"
            files, absent = git.write_tree(name, repo, commit, root, fetch_from)
            state = TreeState(tuple(files), commit, False, epoch)
            note = ""
            if absent:
                shown = ", ".join(absent[:3]) + (
                    f" and {len(absent) - 3} more" if absent[3:] else ""
                )
                note = f"less {shown} (missing from the mirror)"
            source = mf.Source(
                "git", spec.clean, commit=commit, rev=spec.asked or spec.rev, note=note
            )
            made = self._tree(name, root, state, source, absent)
        if given:
            served = f"note: {name}: {spec.describe()} read from the mirror {redact_url(given)}"
            made = dataclasses.replace(made, notes=(*made.notes, served))
        return made


# -- the download cache -------------------------------------------------------------------------


def _adopted(path: Path, root: Path) -> Path:
    """`path` under a hidden new name in the cache `root`, for `Cache.store` to rename. A wheel
    the cache itself holds (built here, under root) is hard-linked: the cache never writes a
    file in place, so both names keep the same bytes, written once. Anything else (the user's
    own wheel, which a rebuild may rewrite in place), or a link the filesystem refuses, is
    copied."""
    fd, tmp = tempfile.mkstemp(prefix=".adopt-", dir=root)
    os.close(fd)
    if path.resolve().is_relative_to(root.resolve()):
        os.unlink(tmp)
        try:
            os.link(path, tmp)
            return Path(tmp)
        except OSError:
            pass  # another filesystem, or one without hard links: copied below
    shutil.copyfile(path, tmp)
    return Path(tmp)


# -- what the wheel says about itself --------------------------------------------------------------


def _same_name(name: str, dist: str, where: Path) -> None:
    if canonicalize_name(dist) != name:
        raise UsageError(
            f"{where} builds {canonicalize_name(dist)}, not {name}; give {name}'s source"
        )


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def _requires(wheel: Path) -> tuple[str, ...]:
    """The wheel's Requires-Dist lines (METADATA)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise HostBuildError(f"{wheel.name}: no METADATA in the wheel")
        text = zf.read(meta).decode("utf-8", "replace")
    return tuple(HeaderParser().parsestr(text).get_all("Requires-Dist") or ())


def _packages(names: Sequence[str]) -> set[str]:
    """The wheel's top-level package directories."""
    return {
        n.split("/", 1)[0]
        for n in names
        if "/" in n and not n.split("/", 1)[0].endswith((".dist-info", ".data"))
    }


def _left_out_of_wheel(name: str, root: Path, files: Sequence[str], wheel: Path) -> list[str]:
    """One line when Python files of the tree's packages are not in the wheel its build made
    (setuptools' find_packages skips a directory without __init__.py, silently)."""
    names = _wheel_names(wheel)
    inside = set(names)
    missing: list[str] = []
    packages = _packages(names)
    # The distribution's own package (verl/), where there is one: a wheel that also carries
    # tests/ and scripts/ (verl's does) is not judged by those.
    own = {p for p in packages if canonicalize_name(p) == name}
    for pkg in sorted(own or packages):
        for prefix in (f"{pkg}/", f"src/{pkg}/"):
            missing += [
                rel
                for rel in files
                if rel.startswith(prefix)
                and rel.endswith(".py")
                and rel.removeprefix("src/") not in inside
            ]
    if not missing:
        return []
    bare = sorted(
        {
            str(PurePosixPath(m).parent)
            for m in missing
            if not (root / PurePosixPath(m).parent / "__init__.py").exists()
        }
    )
    why = (
        f" ({', '.join(bare[:3])} {'has' if len(bare) == 1 else 'have'} no __init__.py: "
        "setuptools' find_packages leaves such a directory out; add one, or list the package "
        "in the build configuration)"
        if bare
        else " (the build configuration leaves them out)"
    )
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if missing[5:] else "")
    return [
        f"note: {name}: {len(missing)} Python file{'s' if len(missing) != 1 else ''} of your tree "
        f"{'are' if len(missing) != 1 else 'is'} not in the wheel its build made: {shown}{why}"
    ]


def _absent_note(name: str, source: mf.Source, absent: Sequence[str], wheel: Path) -> list[str]:
    """Objects a mirror lacks: fine outside the wheel's packages (a PDF beside the code), a
    refusal inside them (the wheel would be missing code)."""
    if not absent:
        return []
    packages = _packages(_wheel_names(wheel))
    inside = [
        p
        for p in absent
        if p.split("/", 1)[0] in packages or p.startswith(tuple(f"src/{k}/" for k in packages))
    ]
    if inside:
        raise HostBuildError(
            f"{name}: the mirror lacks {', '.join(inside[:3])} of commit {source.commit[:12]}, "
            "which the wheel needs; repair the mirror (git fetch from upstream) or give another"
        )
    return [
        f"note: {name} {source.commit[:12]}: {', '.join(absent)} missing from its repository; "
        "left out (outside the wheel's packages; recorded in the lock, the manifest and the "
        "SBOM)"
    ]
