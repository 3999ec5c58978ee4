"""The download cache: one blob per content hash, partial downloads (`.part`) beside them,
a lock per partial file so that two builds sharing a cache never write the same file."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from verl_bundle.airgap.contract.hashing import sha256_bytes
from verl_bundle.errors import FetchError

# Writing failed because the disk (or a quota, or RLIMIT_FSIZE) is full, not because of the file.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


# Cache paths are made from hashes (and "url-" + a hash): nothing else may become a path here.
_KEY = re.compile(r"(url-)?[0-9a-f]{64}")


def _key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise FetchError(
            f"{key!r} is not a sha256 hex digest; the lock or the index gave a bad hash "
            "(make a new lock with `verl-bundle lock`)"
        )
    return key


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "verl-bundle"


def disk_error(exc: OSError, path: Path, what: str) -> FetchError | None:
    """One line for a write that failed because space ran out, naming the path being written;
    None for other OS errors (they are reported as they are)."""
    if exc.errno not in _FULL:
        return None
    reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    return FetchError(
        f"{what}: writing {path} failed: {reason}; free space on that disk or point "
        "--cache-dir at one with room (finished files stay cached, a partial file resumes)"
    )


class Cache:
    """<root>/sha256/ab/abcdef...: one blob per content hash; partial downloads beside it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def blob(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / _key(sha256)

    def lookup(self, sha256: str) -> Path | None:
        path = self.blob(sha256)
        return path if path.is_file() else None

    def partial(self, key: str) -> Path:
        return self.root / "partial" / f"{_key(key)}.part"

    def url_memo(self, url: str) -> Path:
        return self.root / "urls" / sha256_bytes(url.encode())

    def remember(self, url: str, sha256: str) -> None:
        """Note which content a URL gave, for files whose hash nobody published."""
        memo = self.url_memo(url)
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(sha256)
        os.replace(tmp, memo)

    def recall(self, url: str, size: int | None) -> Path | None:
        """The cached blob a URL gave before, if it is still there and (when the server says
        so) still the same size."""
        memo = self.url_memo(url)
        if not memo.is_file():
            return None
        blob = self.lookup(memo.read_text().strip())
        if blob is None or (size is not None and blob.stat().st_size != size):
            return None
        return blob

    def built(self, sdist_sha256: str) -> Path:
        """The folder holding the wheel built on this host from the sdist with that hash."""
        return self.root / "built" / _key(sdist_sha256)

    def checked(self, sha256: str, whole: bool = True) -> Path:
        """A marker: the blob with this hash passed the wheel check, whole or its structure
        (integrity.py)."""
        return self.root / "checked" / (_key(sha256) + ("" if whole else ".structure"))

    def store(self, tmp: Path, sha256: str) -> Path:
        dest = self.blob(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
        return dest

    def evict(self, path: Path, sha256: str, url: str | None = None) -> None:
        """Remove a bad file (a blob, or a wheel built here) and whatever points at it, so the
        next run fetches or builds it again."""
        path.unlink(missing_ok=True)
        self.checked(sha256).unlink(missing_ok=True)
        self.checked(sha256, whole=False).unlink(missing_ok=True)
        if url is not None:
            self.url_memo(url).unlink(missing_ok=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One process at a time on a given partial file (two builds sharing a cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
