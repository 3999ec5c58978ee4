"""Fetching: every file once into a content-addressed cache, hash checked while it streams.

Downloads run in parallel, retry with backoff on connection errors and 5xx answers, and resume
a partial file with an HTTP Range request. A file already in the cache is never downloaded again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import requests

from verl_bundle.credentials import redact_url
from verl_bundle.errors import FetchError
from verl_bundle.net import Http
from verl_bundle.progress import Reporter, Silent

CHUNK = 1 << 20
RETRIES = 4
BACKOFF = 0.25  # seconds, doubled after each failed attempt


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "verl-bundle"


@dataclass(frozen=True)
class Want:
    """One file the bundle needs, as the lock (or a profile artifact) names it."""

    package: str
    filename: str
    url: str
    location: str
    sha256: str | None = None
    size: int | None = None

    def where(self) -> str:
        return f"{self.package}: {redact_url(self.url)} (location {self.location})"


@dataclass(frozen=True)
class Cached:
    want: Want
    path: Path
    sha256: str
    size: int
    downloaded: int  # bytes transferred in this run; 0 for a cache hit


@dataclass(frozen=True)
class Probe:
    available: bool
    size: int | None
    reason: str


class Cache:
    """<root>/sha256/ab/abcdef...: one blob per content hash; partial downloads beside it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def blob(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    def lookup(self, sha256: str) -> Path | None:
        path = self.blob(sha256)
        return path if path.is_file() else None

    def partial(self, key: str) -> Path:
        return self.root / "partial" / f"{key}.part"

    def url_memo(self, url: str) -> Path:
        return self.root / "urls" / hashlib.sha256(url.encode()).hexdigest()

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
        return self.root / "built" / sdist_sha256

    def store(self, tmp: Path, sha256: str) -> Path:
        dest = self.blob(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
        return dest


class _RetryableError(Exception):
    """A failure worth another attempt (connection dropped, 5xx, short body)."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process at a time on a given partial file (two builds sharing a cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Fetcher:
    def __init__(
        self,
        cache: Cache,
        http: Http,
        reporter: Reporter | None = None,
        *,
        jobs: int = 8,
        retries: int = RETRIES,
        backoff: float = BACKOFF,
    ) -> None:
        self.cache = cache
        self.http = http
        self.reporter = reporter or Silent(quiet=True)
        self.jobs = max(1, jobs)
        self.retries = retries
        self.backoff = backoff
        # What this fetcher transferred, for the build summary (lock-time hashing included).
        self.downloaded_files = 0
        self.downloaded_bytes = 0
        self._count_lock = threading.Lock()

    def fetch_all(self, wants: Sequence[Want]) -> list[Cached]:
        """Fetch in parallel; the first failure cancels what has not started and is raised."""
        if not wants:
            return []
        with ThreadPoolExecutor(max_workers=min(self.jobs, len(wants))) as pool:
            futures = [pool.submit(self.fetch, w) for w in wants]
            results: list[Cached] = []
            error: BaseException | None = None
            for fut in futures:
                try:
                    results.append(fut.result())
                except BaseException as exc:
                    if error is None:
                        error = exc
                        for other in futures:
                            other.cancel()
            if error is not None:
                raise error
        return results

    def fetch(self, want: Want) -> Cached:
        if want.sha256:
            hit = self.cache.lookup(want.sha256)
            if hit is not None:
                return Cached(want, hit, want.sha256, hit.stat().st_size, 0)
        else:
            # No published hash (a release asset): the URL gave this content before.
            hit = self.cache.recall(want.url, want.size)
            if hit is not None:
                return Cached(want, hit, hit.name, hit.stat().st_size, 0)
        key = want.sha256 or "url-" + hashlib.sha256(want.url.encode()).hexdigest()
        partial = self.cache.partial(key)
        with _locked(partial):
            if want.sha256:  # another process may have finished it while we waited
                hit = self.cache.lookup(want.sha256)
                if hit is not None:
                    return Cached(want, hit, want.sha256, hit.stat().st_size, 0)
            return self._download(want, partial)

    def _download(self, want: Want, partial: Path) -> Cached:
        handle = self.reporter.start(want.filename, want.size)
        state = _Digest.of(partial)  # a partial file left by an earlier run is hashed once
        if state.size:
            self.reporter.advance(handle, state.size)
        transferred = 0
        try:
            attempt = 0
            while True:
                try:
                    transferred += self._attempt(want, partial, handle, state)
                    break
                except _RetryableError as exc:
                    attempt += 1
                    if attempt > self.retries:
                        raise FetchError(
                            f"{want.where()}: {exc} (gave up after {attempt} attempts); "
                            "check that the location is reachable from this host "
                            "(mirror URL, HTTPS_PROXY) and run again: finished files are cached "
                            "and a partial file resumes"
                        ) from None
                    time.sleep(self.backoff * (2 ** (attempt - 1)))
            digest, size = state.hasher.hexdigest(), state.size
            if want.sha256 and digest != want.sha256:
                partial.unlink(missing_ok=True)
                raise FetchError(
                    f"{want.where()}: sha256 mismatch: expected {want.sha256}, got {digest}; "
                    "the file on the server is not the one locked. If the location now serves a "
                    "different build, re-run `verl-bundle lock`; otherwise the mirror is corrupt"
                )
            if want.size is not None and size != want.size:
                partial.unlink(missing_ok=True)
                raise FetchError(
                    f"{want.where()}: size {size} differs from the locked {want.size}; "
                    "re-run `verl-bundle lock` if the file was replaced upstream"
                )
            path = self.cache.store(partial, digest)
            if not want.sha256:
                self.cache.remember(want.url, digest)
            with self._count_lock:
                self.downloaded_files += 1
                self.downloaded_bytes += transferred
            return Cached(want, path, digest, size, transferred)
        finally:
            self.reporter.done(handle)

    def _attempt(self, want: Want, partial: Path, handle: object, state: _Digest) -> int:
        offset = state.size
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            resp = self.http.get(want.url, stream=True, headers=headers)
        except requests.exceptions.SSLError as exc:
            raise FetchError(
                f"{want.where()}: TLS verification failed ({_short(exc)}); point "
                "REQUESTS_CA_BUNDLE or SSL_CERT_FILE at your organisation's CA bundle"
            ) from None
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise _RetryableError(f"cannot connect: {_short(exc)}") from None
        with resp:
            status = resp.status_code
            if status == 416 and offset:
                # The partial file already holds everything the server has: check it as is.
                return 0
            if status in (404, 410):
                raise FetchError(
                    f"{want.where()}: {status} Not Found; the location does not have this file. "
                    "Check the mirror (--mirror) serves it, or re-run `verl-bundle lock`"
                )
            if status in (401, 403):
                raise FetchError(
                    f"{want.where()}: {status} {resp.reason}; the location wants credentials: "
                    "put them in the mirror URL (https://user:token@host/...)"
                )
            if status == 429 or status >= 500:
                raise _RetryableError(f"{status} {resp.reason}")
            if status >= 400:
                raise FetchError(f"{want.where()}: {status} {resp.reason}")
            resumed = bool(offset) and status == 206
            if resumed:
                start = resp.headers.get("Content-Range", "").split(" ")[-1].split("-")[0]
                resumed = start == str(offset)
            if not resumed and offset:
                # The server ignored the Range header (or answered another range): start over.
                state.reset()
                self.reporter.advance(handle, -offset)
                offset = 0
            written = 0
            try:
                with partial.open("ab" if offset else "wb") as out:
                    for chunk in resp.iter_content(CHUNK):
                        out.write(chunk)
                        state.update(chunk)
                        written += len(chunk)
                        self.reporter.advance(handle, len(chunk))
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                raise _RetryableError(
                    f"connection dropped after {state.size} bytes: {_short(exc)}"
                ) from None
            expected = resp.headers.get("Content-Length")
            if expected is not None and expected.isdigit() and written < int(expected):
                raise _RetryableError(f"connection dropped after {state.size} bytes")
            if want.size is not None and state.size < want.size:
                raise _RetryableError(f"short read: {state.size} of {want.size} bytes")
            return written

    def probe(self, url: str) -> Probe:
        """Is a file there? HEAD, following redirects (GitHub release assets redirect)."""
        try:
            resp = self.http.head(url)
        except requests.RequestException as exc:
            return Probe(False, None, f"unreachable: {_short(exc)}")
        if resp.status_code == 200:
            length = resp.headers.get("Content-Length")
            return Probe(True, int(length) if length and length.isdigit() else None, "ok")
        return Probe(False, None, f"{resp.status_code} {resp.reason}")


class _Digest:
    """sha256 and length of what the partial file holds, updated as bytes arrive."""

    def __init__(self) -> None:
        self.hasher = hashlib.sha256()
        self.size = 0

    @classmethod
    def of(cls, path: Path) -> _Digest:
        state = cls()
        if path.exists():
            with path.open("rb") as fh:
                while chunk := fh.read(CHUNK):
                    state.update(chunk)
        return state

    def update(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        self.size += len(chunk)

    def reset(self) -> None:
        self.hasher = hashlib.sha256()
        self.size = 0


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) < 200 else text[:197] + "..."
