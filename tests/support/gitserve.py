"""Real git repositories for tests: a source tree committed (fixed author and dates, so the
commit is the same on every run), its bare clone, and a real `git daemon` serving it over
git:// on 127.0.0.1.

The daemon runs as inetd runs it (`git daemon --inetd`, one process per connection on the
accepted socket): the listening socket is ours, bound to port 0 before anyone connects, so no
port is guessed and nothing waits for a daemon to come up.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from pathlib import Path

_WHEN = "2026-03-27T00:00:00Z"


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="test",
        GIT_AUTHOR_EMAIL="test@127.0.0.1",
        GIT_COMMITTER_NAME="test",
        GIT_COMMITTER_EMAIL="test@127.0.0.1",
        GIT_AUTHOR_DATE=_WHEN,
        GIT_COMMITTER_DATE=_WHEN,
        GIT_CONFIG_NOSYSTEM="1",
        HOME=str(Path(os.environ.get("TMPDIR", "/tmp")) / "git-home"),
    )
    return env


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=git_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def commit_tree(tree: Path, message: str = "the tree") -> str:
    """`tree` made a git checkout with everything in it committed; returns the commit."""
    if not (tree / ".git").exists():
        git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "--allow-empty", "-m", message)
    return git(tree, "rev-parse", "HEAD")


def bare_clone(tree: Path, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", "--bare", "--no-local", str(tree), str(dest))
    return dest


class GitDaemon:
    """git:// on 127.0.0.1 for every repository below `base`."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self._procs: list[subprocess.Popen[bytes]] = []
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> GitDaemon:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed: the daemon is stopped
            with conn:
                proc = subprocess.Popen(
                    [
                        "git",
                        "daemon",
                        "--inetd",
                        "--export-all",
                        "--informative-errors",
                        f"--base-path={self.base}",
                    ],
                    stdin=conn.fileno(),
                    stdout=conn.fileno(),
                    stderr=subprocess.DEVNULL,
                    env=git_env(),
                )
            with self._guard:
                self._procs.append(proc)

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):  # wakes accept() above (closing alone does not)
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=30)
        with self._guard:
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
