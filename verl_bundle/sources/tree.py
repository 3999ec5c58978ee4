"""A source tree as the builder sees it: its files (a git checkout's tracked and untracked, not
ignored, files; otherwise everything but VCS and build leftovers), the commit it stands on and
whether it differs from it, a hash over its paths, modes and contents, and its copy for a build
that must never write into the user's tree."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.credentials import Redactor
from verl_bundle.errors import UsageError

# Left out of a tree that is not a git checkout: VCS data and what builds leave behind.
_SKIP_DIRS = {".git", ".hg", ".svn", "build", "dist", "__pycache__", ".venv", ".tox", ".eggs"}
GIT_TIMEOUT = 900  # a first fetch of a large repository over a slow link


@dataclass(frozen=True)
class TreeState:
    files: tuple[str, ...]  # POSIX paths relative to the tree
    commit: str = ""
    dirty: bool = False
    epoch: int | None = None  # the commit's time, for SOURCE_DATE_EPOCH


def tree_state(root: Path, redact: Redactor | None = None) -> TreeState:
    """The tree's files; for a git checkout, its commit and whether it differs from it."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    inside = _git_plain(root, ["rev-parse", "--is-inside-work-tree"])
    if inside is not None and inside.strip() == "true":
        listed = _git_plain(root, ["ls-files", "-z", "-co", "--exclude-standard"]) or ""
        files = sorted(
            p for p in set(listed.split("\0")) if p and _is_file(root / p) and safe_relpath(p)
        )
        commit = (_git_plain(root, ["rev-parse", "--verify", "--quiet", "HEAD"]) or "").strip()
        status = _git_plain(root, ["status", "--porcelain", "--untracked-files=normal", "--", "."])
        epoch = _git_plain(root, ["show", "-s", "--format=%ct", "HEAD"]) if commit else None
        dirty = bool(status and status.strip()) or not commit
        # A dirty tree is not its commit: no commit time stands for its content.
        when = int(epoch.strip()) if epoch and epoch.strip().isdigit() and not dirty else None
        return TreeState(tuple(files), commit, dirty, when)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")
        )
        rel = Path(dirpath).relative_to(root)
        for f in filenames:
            found.append((rel / f).as_posix())
    return TreeState(tuple(sorted(found)))


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


def copy_tree(root: Path, files: Iterable[str], dest: Path) -> None:
    """The listed files (links as links) into `dest`: the build never writes into the tree."""
    for rel in files:
        src, out = root / rel, dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), out)
        else:
            shutil.copy2(src, out)


def safe_relpath(rel: str) -> bool:
    """Whether `rel` (a path a listing gave) stays inside the tree."""
    parts = PurePosixPath(rel).parts
    return bool(parts) and not PurePosixPath(rel).is_absolute() and ".." not in parts


def git_env() -> dict[str, str]:
    """This process's environment for git: no inherited GIT_* settings, never a prompt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password
    return env


def _is_file(path: Path) -> bool:
    return path.is_symlink() or path.is_file()


def run_git(args: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """git with `args` (in `cwd`), its output captured as text, within GIT_TIMEOUT and with
    `git_env()`; FileNotFoundError (no git) and TimeoutExpired are the caller's to judge."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
        env=git_env(),
        check=False,
    )


def _git_plain(cwd: Path, args: list[str]) -> str | None:
    try:
        run = run_git(args, cwd)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return run.stdout if run.returncode == 0 else None
