"""Downloads: every file once into the cache, hash checked while it streams.

Downloads run in parallel, retry with backoff on dropped connections and 5xx answers, and resume
a partial file with an HTTP Range request. Ctrl-C stops them between chunks: the workers are
daemon threads that check a stop event, so nobody waits for a running download to finish, and
the partial files stay for the next run to resume.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from verl_bundle.airgap.contract.hashing import StreamHash, sha256_bytes
from verl_bundle.errors import FetchError
from verl_bundle.net.cache import Cache, disk_error, locked
from verl_bundle.net.http import Http, classify, short, shown_url, status_error
from verl_bundle.progress import Reporter, Silent

if TYPE_CHECKING:  # imported where a download starts: a build from the cache skips it
    import requests

CHUNK = 1 << 20
FAST = 8 << 20  # bytes a second from which whole chunks are read (a chunk in 1/8 s or less)
RATE_WINDOW = 0.1  # seconds over which the rate is measured
RETRIES = 4
BACKOFF = 0.25  # seconds, doubled after each failed attempt
T = TypeVar("T")
R = TypeVar("R")


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
        return f"{self.package}: {shown_url(self.url)} (location {self.location})"


@dataclass(frozen=True)
class Cached:
    want: Want
    path: Path
    sha256: str
    size: int
    downloaded: int  # bytes transferred in this run; 0 for a cache hit
    fresh: bool = False  # downloaded (or resumed) and hashed whole in this run


@dataclass(frozen=True)
class Probe:
    available: bool
    size: int | None
    reason: str


class StoppedError(Exception):
    """The run is stopping (Ctrl-C or another download failed): leave the partial file."""


class _RetryableError(Exception):
    """A failure worth another attempt (connection dropped, 5xx, short body)."""


class _StaleResumeError(Exception):
    """Bytes resumed from an earlier run's partial file did not add up: the cache's fault."""


def _arriving(resp: requests.Response) -> Iterator[bytes]:
    """The body as it arrives; content encodings are decoded as requests would.

    On a slow link each piece is whatever the socket has (read1), so the partial file fills as
    bytes come and the stop event is checked often. Once the link has kept up FAST bytes a
    second for a while, pieces are CHUNK bytes read in one call (read): read1 returns one TLS
    record (16 KiB) at a time, and the Python work per record cost more CPU than the hashing
    and decryption together (8 threads at once: about 8 CPU-s per GB against 2.5)."""
    raw = resp.raw
    read1 = getattr(raw, "read1", None)
    if read1 is None:  # pragma: no cover - urllib3 1.x
        yield from resp.iter_content(CHUNK)
        return
    fast = False
    window_start, window_bytes = time.monotonic(), 0
    while data := (
        raw.read(CHUNK, decode_content=True) if fast else read1(CHUNK, decode_content=True)
    ):
        yield data
        window_bytes += len(data)
        now = time.monotonic()
        if now - window_start >= RATE_WINDOW:
            fast = window_bytes >= FAST * (now - window_start)
            window_start, window_bytes = now, 0


class Downloader:
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
        self.stop = threading.Event()
        # What this downloader transferred, for the build summary (lock-time hashing included).
        self.downloaded_files = 0
        self.downloaded_bytes = 0
        self._count_lock = threading.Lock()

    def parallel(self, work: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`work` over `items` on up to `jobs` daemon threads, results in order. The first
        failure, or Ctrl-C in the calling thread, sets the stop event and is raised at once:
        running work notices the event between chunks, and nothing waits for it."""
        if not items:
            return []
        if self.stop.is_set():
            raise StoppedError()
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(items)):
            todo.put(i)
        results: dict[int, R] = {}
        errors: list[BaseException] = []
        finished = threading.Condition()

        def worker() -> None:
            while not self.stop.is_set():
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    got = work(items[i])
                except BaseException as exc:  # handed to the calling thread, raised there
                    with finished:
                        errors.append(exc)
                        finished.notify()
                    return
                with finished:
                    results[i] = got
                    finished.notify()

        for _ in range(min(self.jobs, len(items))):
            threading.Thread(target=worker, daemon=True).start()
        try:
            with finished:
                while len(results) < len(items) and not errors:
                    finished.wait(0.2)  # a timed wait lets Ctrl-C in promptly
        except BaseException:
            self.stop.set()
            raise
        if errors:
            self.stop.set()
            first = next((e for e in errors if not isinstance(e, StoppedError)), errors[0])
            raise first
        return [results[i] for i in range(len(items))]

    def fetch_all(self, wants: Sequence[Want]) -> list[Cached]:
        """Fetch in parallel; the first failure stops the rest and is raised."""
        return self.parallel(self.fetch, wants)

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
        key = want.sha256 or "url-" + sha256_bytes(want.url.encode())
        partial = self.cache.partial(key)
        try:
            with locked(partial):
                if want.sha256:  # another process may have finished it while we waited
                    hit = self.cache.lookup(want.sha256)
                    if hit is not None:
                        return Cached(want, hit, want.sha256, hit.stat().st_size, 0)
                return self._download(want, partial)
        except OSError as exc:
            full = disk_error(exc, Path(exc.filename or partial), want.where())
            if full is None:
                raise
            raise full from None

    def _download(self, want: Want, partial: Path) -> Cached:
        handle = self.reporter.start(want.filename, want.size)
        try:
            try:
                return self._transfer(want, partial, handle, resume=True)
            except _StaleResumeError:
                # What an earlier run left in the partial file is not a prefix of this file
                # (a crash, a disk error): the cache's own fault. Discard it and start over.
                partial.unlink(missing_ok=True)
                self.reporter.note(
                    f"note: {want.filename}: the partial download left by an earlier run "
                    "was damaged; discarded it and downloaded the file again"
                )
                return self._transfer(want, partial, handle, resume=False)
        finally:
            self.reporter.done(handle)

    def _transfer(self, want: Want, partial: Path, handle: object, *, resume: bool) -> Cached:
        state = StreamHash()
        if resume and partial.exists():
            with partial.open("rb") as fh:  # a partial file left by an earlier run
                state.update_all(iter(lambda: fh.read(CHUNK), b""))
            if want.size is not None and state.size > want.size:
                raise _StaleResumeError()
        earlier = state.size
        self.reporter.advance(handle, earlier)
        transferred = 0
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
                if self.stop.wait(self.backoff * (2 ** (attempt - 1))):
                    raise StoppedError() from None
        digest, size = state.hexdigest(), state.size
        if want.sha256 and digest != want.sha256:
            if earlier:
                raise _StaleResumeError()
            partial.unlink(missing_ok=True)
            raise FetchError(
                f"{want.where()}: sha256 mismatch: expected {want.sha256}, got {digest}; "
                "the file on the server is not the one locked. If the location now serves a "
                "different build, re-run `verl-bundle lock`; otherwise the mirror is corrupt"
            )
        if want.size is not None and size != want.size:
            if earlier:
                raise _StaleResumeError()
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
        return Cached(want, path, digest, size, transferred, fresh=True)

    def _attempt(self, want: Want, partial: Path, handle: object, state: StreamHash) -> int:
        import requests
        import urllib3.exceptions

        if self.stop.is_set():
            raise StoppedError()
        offset = state.size
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            resp = self.http.get(want.url, stream=True, headers=headers)
        except requests.RequestException as exc:
            failure = classify(exc)
            if not failure.retryable:
                raise FetchError(failure.message(want.where())) from None
            raise _RetryableError(f"cannot connect: {failure.detail}") from None
        with resp:
            status = resp.status_code
            if status == 416 and offset:
                # The partial file already holds everything the server has: check it as is.
                return 0
            error = status_error(want.where(), resp)
            if error is not None:
                raise error
            if status == 429 or status >= 500:
                raise _RetryableError(f"{status} {resp.reason}")
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
                # Unbuffered: every byte that arrived is in the file when Ctrl-C or a crash
                # stops the run, ready for a Range request next time.
                with partial.open("ab" if offset else "wb", buffering=0) as out:
                    for chunk in _arriving(resp):
                        out.write(chunk)
                        state.update(chunk)
                        written += len(chunk)
                        self.reporter.advance(handle, len(chunk))
                        if self.stop.is_set():
                            raise StoppedError()
            except (
                requests.ConnectionError,
                requests.exceptions.ChunkedEncodingError,
                urllib3.exceptions.ProtocolError,
                urllib3.exceptions.ReadTimeoutError,
            ) as exc:
                raise _RetryableError(
                    f"connection dropped after {state.size} bytes: {short(exc)}"
                ) from None
            expected = resp.headers.get("Content-Length")
            if expected is not None and expected.isdigit() and written < int(expected):
                raise _RetryableError(f"connection dropped after {state.size} bytes")
            if want.size is not None and state.size < want.size:
                raise _RetryableError(f"short read: {state.size} of {want.size} bytes")
            return written

    def probe(self, url: str) -> Probe:
        """Is a file there? HEAD, following redirects (GitHub release assets redirect).
        A TLS failure or refused credentials are raised: they are configuration to fix, not
        a missing file to fall back from."""
        import requests

        where = shown_url(url)
        try:
            resp = self.http.head(url)
        except requests.RequestException as exc:
            failure = classify(exc)
            if failure.kind in ("tls", "url", "proxy"):
                raise FetchError(failure.message(where)) from None
            if failure.kind == "dns":
                return Probe(False, None, f"the host cannot be resolved: {failure.detail}")
            return Probe(False, None, f"unreachable: {failure.detail}")
        error = status_error(where, resp) if resp.status_code in (401, 403) else None
        if error is not None:
            raise error
        if resp.status_code == 200:
            length = resp.headers.get("Content-Length")
            return Probe(True, int(length) if length and length.isdigit() else None, "ok")
        return Probe(False, None, f"{resp.status_code} {resp.reason}")
