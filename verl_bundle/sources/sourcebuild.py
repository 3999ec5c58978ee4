"""Wheels made on the online host from sources that are not an index's files: a source tree (a
checkout or a fork, dirty or not), a git revision, or a wheel or sdist file given by path.

A tree is copied (a git checkout's tracked and untracked, not ignored, files; otherwise
everything but VCS and build leftovers), hashed over its paths, modes and contents, and built
by its own build system (`uv build --wheel --no-sources`: the tree's `[tool.uv.sources]` never
reach the network); the wheel is cached by that hash and stored in the download cache by its
own, so that the fetch stage finds it like any other file. A git revision is read from a local
mirror (a bare repository or a checkout, given as a path or file:// URL) without copying it, or
fetched from any URL git takes (https, git:// from a git daemon, file://) into a cache
repository; its tree is written out blob by blob, so that a mirror missing an object outside
the package still builds, with a note saying what was left out.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name, parse_wheel_filename

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.credentials import Redactor, redact_url
from verl_bundle.errors import HostBuildError, UsageError
from verl_bundle.net.cache import Cache
from verl_bundle.profile.sources import Git, Release, SdistFile, SourceSpec, Tree, WheelFile
from verl_bundle.progress import Reporter
from verl_bundle.sources.hostbuild import (
    BuiltWheel,
    build_pure_wheel,
    is_pure,
    place_normalized,
)
from verl_bundle.sources.hostbuild import source_date_epoch as default_epoch
from verl_bundle.uvcmd import host_python, run_uv

# Left out of a tree that is not a git checkout: VCS data and what builds leave behind.
_SKIP_DIRS = {".git", ".hg", ".svn", "build", "dist", "__pycache__", ".venv", ".tox", ".eggs"}
_GIT_TIMEOUT = 900
PROJECT_FILES = (
    "pyproject.toml",
    "uv.lock",
)  # a first fetch of a large repository over a slow link


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


@dataclass(frozen=True)
class _TreeState:
    files: tuple[str, ...]  # POSIX paths relative to the tree
    commit: str = ""
    dirty: bool = False
    epoch: int | None = None  # the commit's time, for SOURCE_DATE_EPOCH


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
        state: _TreeState,
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

    def _tools_of(self, state: _TreeState) -> str | None:
        """The upload-date cut-off for a commit's build tools: its own time, where the default
        index gives upload times (no mirror), so that it builds again to the same wheel later."""
        if state.epoch is None or self.index_url is not None:
            return None
        when = dt.datetime.fromtimestamp(state.epoch + 1, dt.timezone.utc)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _build_tree(
        self, name: str, root: Path, state: _TreeState, out: Path, cutoff: str | None
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
        local = _local_repository(fetch_from)
        if local is not None:
            repo = self._open_local(name, local, fetch_from)
            commit = self._rev_parse(name, repo, spec.rev or "HEAD", fetch_from)
        else:
            repo = self.cache.root / "git" / hashlib.sha256(spec.clean.encode()).hexdigest()
            commit = self._fetch(name, repo, fetch_from, spec.rev)
        epoch_text = self._git_out(name, repo, ["show", "-s", "--format=%ct", commit], fetch_from)
        with tempfile.TemporaryDirectory(
            prefix="git-tree-", dir=self.cache.root, ignore_cleanup_errors=True
        ) as tmp:
            root = Path(tmp) / "tree"
            files, absent = self._write_tree(name, repo, commit, root, fetch_from)
            state = _TreeState(tuple(files), commit, False, int(epoch_text.strip() or 0) or None)
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

    def _open_local(self, name: str, path: Path, shown: str) -> Path:
        if not path.exists():
            raise UsageError(
                f"{name}: the git mirror {redact_url(shown)} does not exist; give "
                f"--mirror {name}=PATH, a clone of the repository (bare or not)"
            )
        out = self._git_out(name, path, ["rev-parse", "--absolute-git-dir"], shown, cwd=path)
        return Path(out.strip())

    def _rev_parse(self, name: str, repo: Path, rev: str, shown: str) -> str:
        run = self._git_run(repo, ["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"])
        if run.returncode != 0 or not run.stdout.strip():
            raise UsageError(
                f"{name}: revision {rev!r} is not in {redact_url(shown)}; fetch it into the "
                "mirror (git fetch) or give another revision"
            )
        return run.stdout.strip()

    def _fetch(self, name: str, repo: Path, url: str, rev: str) -> str:
        if not (repo / "HEAD").is_file():
            repo.mkdir(parents=True, exist_ok=True)
            self._git_out(name, repo, ["init", "--quiet", "--bare", str(repo)], url, cwd=repo)
        self.reporter.status(f"fetching {name} {rev or 'HEAD'} from {redact_url(url)}")
        abbreviated = len(rev) < 40 and all(c in "0123456789abcdef" for c in rev) and rev != ""
        if not abbreviated:
            # One commit, no history: what a build needs (a git daemon serves any commit).
            run = self._git_run(repo, ["fetch", "--quiet", "--depth", "1", url, rev or "HEAD"])
            if run.returncode == 0:
                return self._rev_parse(name, repo, "FETCH_HEAD", url)
        run = self._git_run(
            repo,
            [
                "fetch",
                "--quiet",
                url,
                "+refs/heads/*:refs/src/heads/*",
                "+refs/tags/*:refs/src/tags/*",
            ],
        )
        if run.returncode != 0:
            tail = self.redact(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "")
            raise HostBuildError(
                f"{name}: git could not fetch {redact_url(url)}: {tail}; behind a firewall, give "
                f"--mirror {name}=URL (a file:// path to a clone, or a git daemon's git:// URL)"
            )
        return self._rev_parse(name, repo, rev or "HEAD", url)

    def _write_tree(
        self, name: str, repo: Path, commit: str, root: Path, shown: str
    ) -> tuple[list[str], list[str]]:
        """The commit's tree written under `root` (blobs and links; submodules are not part of
        it, as in `git archive`); returns the files written and those whose blob is missing."""
        listing = self._git_out(name, repo, ["ls-tree", "-r", "-z", "--full-tree", commit], shown)
        entries: list[tuple[str, str, str]] = []
        for item in listing.split("\0"):
            if not item:
                continue
            meta, _, path = item.partition("\t")
            mode, kind, sha = meta.split()
            if kind == "blob" and _safe_relpath(path):
                entries.append((mode, sha, path))
        root.mkdir(parents=True)
        written: list[str] = []
        absent: list[str] = []
        proc = subprocess.Popen(
            ["git", f"--git-dir={repo}", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_git_env(),
        )
        if proc.stdin is None or proc.stdout is None:  # pragma: no cover - PIPE gives both
            raise HostBuildError(f"{name}: could not talk to git cat-file")
        stdin, stdout = proc.stdin, proc.stdout
        wanted = "".join(f"{sha}\n" for _, sha, _ in entries).encode()

        def feed() -> None:
            # From a thread: git answers while it reads, and both pipes are finite.
            try:
                stdin.write(wanted)
            finally:
                stdin.close()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            for mode, _, path in entries:
                header = stdout.readline().decode().split()
                if len(header) < 3 or header[1] == "missing":
                    absent.append(path)
                    continue
                data = stdout.read(int(header[2]))
                stdout.read(1)  # the newline after each object
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if mode == "120000":
                    os.symlink(data.decode(), target)
                else:
                    target.write_bytes(data)
                    target.chmod(0o755 if mode == "100755" else 0o644)
                written.append(path)
        finally:
            stdout.close()
            proc.wait()
            feeder.join()
        return written, absent

    def _git_run(
        self, repo: Path, args: list[str], cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        base = ["git"] if cwd is not None else ["git", f"--git-dir={repo}"]
        try:
            return subprocess.run(
                [*base, *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=_GIT_TIMEOUT,
                env=_git_env(),
                check=False,
            )
        except FileNotFoundError:
            raise HostBuildError(
                "git is not installed on this host; install it to build from a git source"
            ) from None
        except subprocess.TimeoutExpired:
            raise HostBuildError(
                f"git {args[0]} did not finish in {_GIT_TIMEOUT} s; is the git host or the "
                "mirror reachable?"
            ) from None

    def _git_out(
        self, name: str, repo: Path, args: list[str], shown: str, cwd: Path | None = None
    ) -> str:
        run = self._git_run(repo, args, cwd)
        if run.returncode != 0:
            tail = self.redact(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "")
            raise HostBuildError(
                f"{name}: git {args[0]} on {redact_url(shown)} failed: {tail}; check that it is "
                "a git repository with that revision"
            )
        return run.stdout


# -- the tree: its files, its hash, its copy -----------------------------------------------------


def tree_state(root: Path, redact: Redactor | None = None) -> _TreeState:
    """The tree's files; for a git checkout, its commit and whether it differs from it."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    inside = _git_plain(root, ["rev-parse", "--is-inside-work-tree"])
    if inside is not None and inside.strip() == "true":
        listed = _git_plain(root, ["ls-files", "-z", "-co", "--exclude-standard"]) or ""
        files = sorted(
            p for p in set(listed.split("\0")) if p and _is_file(root / p) and _safe_relpath(p)
        )
        commit = (_git_plain(root, ["rev-parse", "--verify", "--quiet", "HEAD"]) or "").strip()
        status = _git_plain(root, ["status", "--porcelain", "--untracked-files=normal", "--", "."])
        epoch = _git_plain(root, ["show", "-s", "--format=%ct", "HEAD"]) if commit else None
        dirty = bool(status and status.strip()) or not commit
        # A dirty tree is not its commit: no commit time stands for its content.
        when = int(epoch.strip()) if epoch and epoch.strip().isdigit() and not dirty else None
        return _TreeState(tuple(files), commit, dirty, when)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")
        )
        rel = Path(dirpath).relative_to(root)
        for f in filenames:
            found.append((rel / f).as_posix())
    return _TreeState(tuple(sorted(found)))


def tree_sha256(root: Path, files: Iterable[str]) -> str:
    """sha256 over `path NUL mode NUL sha256(content)` lines, in path order: the same files with
    the same contents and modes give the same hash, wherever the tree lies."""
    h = hashlib.sha256()
    for rel in sorted(files):
        path = root / rel
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            mode, digest = "120000", hashlib.sha256(os.readlink(path).encode()).hexdigest()
        else:
            mode = "100755" if info.st_mode & 0o111 else "100644"
            digest = sha256_file(path)
        h.update(f"{rel}\0{mode}\0{digest}\n".encode())
    return h.hexdigest()


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


def copy_tree(root: Path, files: Iterable[str], dest: Path) -> None:
    """The listed files (links as links) into `dest`: the build never writes into the tree."""
    for rel in files:
        src, out = root / rel, dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), out)
        else:
            shutil.copy2(src, out)


def _is_file(path: Path) -> bool:
    return path.is_symlink() or path.is_file()


def _safe_relpath(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return bool(parts) and not PurePosixPath(rel).is_absolute() and ".." not in parts


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password
    return env


def _git_plain(cwd: Path, args: list[str]) -> str | None:
    try:
        run = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT,
            env=_git_env(),
            check=False,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return run.stdout if run.returncode == 0 else None


def _local_repository(url: str) -> Path | None:
    """A mirror on this host (a path or a file:// URL): read in place, never copied."""
    if url.startswith("file:"):
        return Path(unquote(urlsplit(url).path))
    if "://" not in url and (url.startswith(("/", ".", "~"))):
        return Path(url).expanduser().absolute()
    return None


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
