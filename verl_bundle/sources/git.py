"""A git revision as a source tree: read in place from a mirror on this host (a bare repository
or a checkout, given as a path or file:// URL), or fetched from any URL git takes (https, git://
from a git daemon, file://) into a cache repository; its tree is written out blob by blob, so
that a mirror missing an object outside the package still builds, and the paths it lacks are
returned for the builder to judge."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

from verl_bundle.credentials import Redactor, redact_url
from verl_bundle.errors import HostBuildError, UsageError
from verl_bundle.progress import Reporter
from verl_bundle.sources.tree import GIT_TIMEOUT, git_env, run_git, safe_relpath


class GitReader:
    """Commits of the repositories sources name, read from local mirrors in place or fetched
    into `cache_root/git/`, one bare repository per source URL."""

    def __init__(self, cache_root: Path, redact: Redactor, reporter: Reporter) -> None:
        self.cache_root = cache_root
        self.redact = redact
        self.reporter = reporter

    def locate(self, name: str, url: str, rev: str, key: str) -> tuple[Path, str]:
        """The git directory holding `rev` of `url` and the commit it names; `key` (the
        source's URL without credentials) names the cache repository of a fetched one."""
        local = _local_repository(url)
        if local is not None:
            repo = self._open_local(name, local, url)
            return repo, self._rev_parse(name, repo, rev or "HEAD", url)
        repo = self.cache_root / "git" / hashlib.sha256(key.encode()).hexdigest()
        return repo, self._fetch(name, repo, url, rev)

    def commit_time(self, name: str, repo: Path, commit: str, shown: str) -> int | None:
        """The commit's time (seconds since the epoch), for SOURCE_DATE_EPOCH."""
        text = self._git_out(name, repo, ["show", "-s", "--format=%ct", commit], shown)
        return int(text.strip() or 0) or None

    def write_tree(
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
            if kind == "blob" and safe_relpath(path):
                entries.append((mode, sha, path))
        root.mkdir(parents=True)
        written: list[str] = []
        absent: list[str] = []
        proc = subprocess.Popen(
            ["git", f"--git-dir={repo}", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=git_env(),
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

    def _git_run(
        self, repo: Path, args: list[str], cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        where = [] if cwd is not None else [f"--git-dir={repo}"]
        try:
            return run_git([*where, *args], cwd)
        except FileNotFoundError:
            raise HostBuildError(
                "git is not installed on this host; install it to build from a git source"
            ) from None
        except subprocess.TimeoutExpired:
            raise HostBuildError(
                f"git {args[0]} did not finish in {GIT_TIMEOUT} s; is the git host or the "
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


def _local_repository(url: str) -> Path | None:
    """A mirror on this host (a path or a file:// URL): read in place, never copied."""
    if url.startswith("file:"):
        return Path(unquote(urlsplit(url).path))
    if "://" not in url and (url.startswith(("/", ".", "~"))):
        return Path(url).expanduser().absolute()
    return None
