"""Installing from one served copy: `install.sh --from URL` (and `python3 -m verl_bundle.airgap
install --from URL`), for a cluster whose nodes all read one extracted bundle served as it is
(`python3 -m verl_bundle.airgap serve DIR`, nginx, `python3 -m http.server`) instead of each
getting the tarball.

The node pins the bundle it installs: `--bundle-sha256 H` is the sha256 of the bundle's
SHA256SUMS, which lists every other file (install.sh and manifest.json included), so the pin
binds them all without having to hold its own hash. The install.sh of a checked tarball pins
its own bundle (the SHA256SUMS beside it, when it lists that install.sh). SHA256SUMS is read
first, then manifest.json (bounded), whose sizes bound every other read: a file sent endlessly
is cut at its size and is damaged (exit 3); a body cut short is a broken transfer, resumed
(HTTP Range) and retried, and exit 1 ("run again") when it keeps breaking. Files arrive several
at once into `<work>/.verl-bundle-fetch/parts/<sha256>`, take their name only when their hash
matches, and a rerun continues. Credentials in the URL go only to that URL's host: a redirect
to another host drops them.

The work directory is ours: `--work DIR` must be new, empty, or one this fetch made (it holds
.verl-bundle-fetch/); nothing else is ever deleted. The default is `$TMPDIR/verl-bundle-<uid>/`
(mode 0700, owned by us, not a link; else a fresh mkdtemp) / `served-<host>-<url key>`, stable
so a rerun resumes, locked (flock) against a second fetch into it. Standard library only,
Python 3.8+: install.sh's --from bootstrap fetches this one file (checked against the sha256
install.sh carries) and runs it alone, so nothing of verl_bundle is imported before the
bundle's lib/ is fetched, and nothing of the served copy runs before its install.sh: every name
SHA256SUMS lists is checked here (the rules of contract/names.py, kept in this file) before
anything is fetched, and no file is written outside the work directory.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import http.client
import json
import os
import queue
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

SUMS, MANIFEST = "SHA256SUMS", "manifest.json"
STATE = ".verl-bundle-fetch"  # in a work directory: ours (its lock, its partial files)
EXECUTABLE = ("install.sh", "doctor")
CHUNK = 1 << 20
TIMEOUT = 60  # seconds without a byte before a read gives up
MAX_SUMS = 64 << 20
MAX_UNSTATED = 256 << 20  # a file whose size the manifest does not state (manifest.json itself)
JOBS = 4  # files fetched at once
ATTEMPTS = 4  # per file, resuming each time
DEADLINE = 7200  # seconds for the whole fetch (--deadline)
PROGRESS = 10.0  # seconds between progress lines
EXIT_FAILED, EXIT_USAGE, EXIT_DAMAGED, EXIT_INTERRUPTED = 1, 2, 3, 130
_USE = (
    "give the http:// or https:// URL of an extracted, served bundle, e.g. "
    "http://head:8000/verl-bundle-cu121-cp310-manylinux_2_17_x86_64/"
)
_SUM_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


class TransferError(Exception):
    """Ends the fetch with an exit code and one line. This module runs alone (install.sh
    --from executes it before any of the bundle's lib/ is here), so it cannot import the
    server program's errors.py; its codes are the same table's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class BrokenTransferError(Exception):
    """A transfer that broke off (connection lost, body short): resumed and retried."""


def redact(url: str) -> str:
    """`url` with the secret of its user info masked (`user:****@`, or `****@` for a token)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:****" if colon else "****"
    return parts._replace(netloc=f"{masked}@{host}").geturl()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    try:
        port = parts.port or default
    except ValueError:
        port = -1
    return parts.scheme, (parts.hostname or "").lower(), port


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect, carrying the credentials only to the origin they were given for."""

    max_redirections = 5

    def redirect_request(  # type: ignore[no-untyped-def]
        self, req, fp, code, msg, headers, newurl
    ):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        auth = req.unredirected_hdrs.get("Authorization")
        if new is not None and auth and _origin(newurl) == _origin(req.full_url):
            new.add_unredirected_header("Authorization", auth)
        return new


class Source:
    """The served bundle: its base URL without credentials, and the Authorization header
    made from them (given in the URL as http://user:password@host/...)."""

    def __init__(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise TransferError(EXIT_USAGE, f"--from: {_USE}") from None
        shown = redact(parts._replace(query="", fragment="").geturl())
        self.shown = shown if shown.endswith("/") else shown + "/"  # names a file when joined
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransferError(EXIT_USAGE, f"--from {self.shown}: {_USE}")
        userinfo, at, host = parts.netloc.rpartition("@")
        self.auth = ""
        if at:
            self.auth = "Basic " + base64.b64encode(unquote(userinfo).encode()).decode()
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        self.base = parts._replace(netloc=host, path=path, query="", fragment="").geturl()
        self.opener = urllib.request.build_opener(_Redirects())

    def open(self, rel: str, missing: int, start: int = 0, timeout: float = TIMEOUT) -> Any:
        """The response for bundle path `rel` (from byte `start`: HTTP Range); TransferError
        (`missing`) when the server has no such file, BrokenTransferError when it cannot be reached."""
        where = self.shown + rel
        url = self.base + urllib.request.pathname2url(rel)  # http(s), checked in __init__
        request = urllib.request.Request(url)  # noqa: S310
        if self.auth:
            request.add_unredirected_header("Authorization", self.auth)
        if start:
            request.add_header("Range", f"bytes={start}-")
        try:
            return self.opener.open(request, timeout=max(1.0, timeout))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404:
                raise TransferError(missing, f"{where}: not found (HTTP 404)") from None
            if exc.code in (401, 403):
                raise TransferError(
                    EXIT_USAGE,
                    f"{where}: HTTP {exc.code}; give the server's credentials in the URL "
                    "(http://user:password@host/...)",
                ) from None
            if 300 <= exc.code < 400:
                raise TransferError(
                    EXIT_FAILED,
                    f"{where}: the server redirects in a loop or more than "
                    f"{_Redirects.max_redirections} times (HTTP {exc.code}); serve the bundle "
                    "itself at --from URL",
                ) from None
            if exc.code == 416 and start:
                raise BrokenTransferError(f"{where}: HTTP 416 for bytes {start}-") from None
            if exc.code >= 500:
                raise BrokenTransferError(f"{where}: HTTP {exc.code} {_line(exc.reason)}") from None
            raise TransferError(
                EXIT_FAILED, f"{where}: HTTP {exc.code} {_line(exc.reason)}"
            ) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, str):  # urllib's refusal (e.g. a redirect to ftp://)
                raise TransferError(EXIT_FAILED, f"{where}: {_line(exc.reason)}") from None
            raise BrokenTransferError(_unreachable(self.shown, exc.reason)) from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BrokenTransferError(_unreachable(self.shown, exc)) from None


def _line(value: object) -> str:
    return " ".join(str(value).split())[:300]


def _unreachable(shown: str, reason: object) -> str:
    return (
        f"cannot reach {shown}: {_line(reason)}; is the server up and reachable from this node? "
        "Run again to continue"
    )


def _read_small(source: Source, rel: str, missing: int, limit: int, deadline: float) -> bytes:
    """All of a small file (SHA256SUMS, manifest.json), at most `limit` + 1 bytes read."""
    for attempt in range(ATTEMPTS):
        try:
            with source.open(rel, missing, timeout=min(TIMEOUT, _left(deadline))) as resp:
                return bytes(resp.read(limit + 1))
        except BrokenTransferError as exc:
            last = str(exc)
        except (OSError, http.client.HTTPException) as exc:
            last = f"{source.shown}{rel}: {_line(exc)}"
        _pause(attempt, deadline)
    raise TransferError(EXIT_FAILED, last)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _StoppedError()
    return left


def _pause(attempt: int, deadline: float) -> None:
    if attempt + 1 < ATTEMPTS:
        time.sleep(min(2.0**attempt, max(0.0, deadline - time.monotonic())))


def read_sums(source: Source, deadline: float) -> tuple[bytes, dict[str, str]]:
    """SHA256SUMS as served, and path -> sha256 from it."""
    raw = _read_small(source, SUMS, EXIT_USAGE, MAX_SUMS, deadline)
    sums = {}
    for line in raw.decode("utf-8", "replace").split("\n"):  # as verify.parse_sums reads it
        m = _SUM_LINE.match(line)
        if m:
            sums[m.group(2)] = m.group(1).lower()
    if not sums or len(raw) > MAX_SUMS:
        raise TransferError(
            EXIT_USAGE, f"{source.shown}{SUMS} lists no file: no bundle is served there"
        )
    return raw, sums


def stated_sizes(raw: bytes, sums: dict[str, str]) -> dict[str, int]:
    """path -> size from manifest.json's file lists (files, generated, interpreter), for the
    entries whose sha256 agrees with SHA256SUMS."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise TransferError(
            EXIT_DAMAGED, f"the served bundle is damaged: {MANIFEST} is not JSON"
        ) from None
    sizes: dict[str, int] = {}
    if not isinstance(doc, dict):
        return sizes
    for value in doc.values():
        for entry in value if isinstance(value, list) else [value]:
            if not isinstance(entry, dict):
                continue
            path, size, sha = entry.get("path"), entry.get("size"), entry.get("sha256")
            if (
                isinstance(path, str)
                and isinstance(size, int)
                and not isinstance(size, bool)
                and size >= 0
                and sums.get(path) == sha
            ):
                sizes[path] = size
    return sizes


def _open_regular(path: str) -> int | None:
    """A read descriptor for `path` when it is a regular file and not a link; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _sha256_of(path: str, limit: int | None = None) -> tuple[str | None, int]:
    """(sha256, size) of a regular file; (None, 0) for anything else or one above `limit`."""
    fd = _open_regular(path)
    if fd is None:
        return None, 0
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
            size += len(block)
            if limit is not None and size > limit:
                return None, size
    return digest.hexdigest(), size


class Fetch:
    """One fetch of a served bundle into a work directory we own; counters for progress."""

    def __init__(self, source: Source, work: str, started: float, budget: float) -> None:
        self.source, self.work = source, work
        self.started, self.deadline = started, started + budget
        self.parts = os.path.join(work, STATE, "parts")
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.files = self.bytes = self.done = 0

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.stop.is_set():
            raise _StoppedError()
        return left

    def file(self, rel: str, sha256: str, size: int | None) -> None:
        """Bundle path `rel` into the work directory, checked against `sha256` (and `size`) as
        it streams into parts/<sha256>, renamed to its name only when it matches; a broken
        transfer resumes, ATTEMPTS times."""
        final = os.path.join(self.work, *rel.split("/"))
        if _sha256_of(final, size)[0] == sha256:
            self._count(0)
            return
        if not _within(os.path.dirname(final), self.work):  # a link in the work directory
            raise TransferError(
                EXIT_USAGE,
                f"--work {self.work}: {rel} would be written outside it, through "
                f"{os.path.realpath(os.path.dirname(final))}; nothing was written there. Give "
                "a new --work directory",
            )
        os.makedirs(os.path.dirname(final), exist_ok=True)
        part = os.path.join(self.parts, sha256)
        why = ""
        for attempt in range(ATTEMPTS):
            try:
                got = self._stream(rel, sha256, size, part)
            except BrokenTransferError as exc:
                why = str(exc)
                _pause(attempt, self.deadline)
                continue
            os.replace(part, final)
            self._count(got)
            return
        raise TransferError(
            EXIT_FAILED,
            f"the transfer of {rel} broke {ATTEMPTS} times ({why}); run again to continue: "
            "what arrived is kept",
        )

    def _count(self, got: int) -> None:
        with self.lock:
            self.done += 1
            self.files += got > 0
            self.bytes += got

    def _stream(self, rel: str, sha256: str, size: int | None, part: str) -> int:
        limit = size if size is not None else MAX_UNSTATED
        digest = hashlib.sha256()
        have = 0
        fd = _open_regular(part)
        if fd is not None:  # an earlier attempt's bytes: hashed again, then resumed
            with os.fdopen(fd, "rb") as fh:
                for block in iter(lambda: fh.read(CHUNK), b""):
                    digest.update(block)
                    have += len(block)
            if have > limit:
                digest, have = hashlib.sha256(), 0
        resp = self.source.open(rel, EXIT_DAMAGED, have, min(TIMEOUT, self.left()))
        with resp:
            if have and resp.status != 206:  # the server ignored Range: start again
                digest, have = hashlib.sha256(), 0
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if have else os.O_TRUNC)
            with os.fdopen(os.open(part, flags, 0o644), "wb") as out:
                try:
                    while have <= limit:
                        self.left()
                        # read1: what one receive brings, so a trickling server cannot hold
                        # the read (read(n) waits for all n bytes) past the deadline.
                        block = resp.read1(min(CHUNK, limit + 1 - have))
                        if not block:
                            break
                        digest.update(block)
                        out.write(block)
                        have += len(block)
                        with self.lock:
                            self.bytes += len(block)
                except (http.client.HTTPException, socket.timeout, ConnectionError) as exc:
                    raise BrokenTransferError(
                        f"{self.source.shown}{rel}: {_line(exc) or type(exc).__name__}"
                    ) from None
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
                        raise TransferError(
                            EXIT_FAILED,
                            f"cannot write {part}: {exc.strerror}; free space there "
                            "or give --work on another disk, then run again",
                        ) from None
                    raise BrokenTransferError(f"{self.source.shown}{rel}: {_line(exc)}") from None
        with self.lock:
            self.bytes -= have  # counted again, once, when the file is complete
        if have > limit:
            _remove(part)
            raise TransferError(
                EXIT_DAMAGED,
                f"the served bundle is damaged: {rel} is longer than the {limit} bytes "
                f"{'the manifest states' if size is not None else 'a file may have'}; "
                "nothing was installed. Copy the bundle to the server again",
            )
        if size is not None and have < size:
            raise BrokenTransferError(f"{self.source.shown}{rel}: {have} of {size} bytes arrived")
        if digest.hexdigest() != sha256:
            _remove(part)
            raise TransferError(
                EXIT_DAMAGED,
                f"the served bundle is damaged: {rel} has sha256 {digest.hexdigest()}, "
                f"{SUMS} says {sha256}; nothing was installed. Copy the bundle to the server again",
            )
        return have


def _within(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _write_new(directory: str, name: str, data: bytes) -> None:
    """`directory`/`name` (our own state directory) written whole: a fresh name opened with
    O_EXCL|O_NOFOLLOW, renamed over `name` (a link planted there is replaced, not followed)."""
    tmp = os.path.join(directory, f".{name}.{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        _remove(tmp)
        raise


class _StoppedError(Exception):
    """The deadline passed, or another file's failure stopped this one."""


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def claim(work: str, made: bool) -> int:
    """Make `work` ours (or check that it is: it holds STATE/), lock it against a second fetch,
    and return the lock's descriptor. A directory with other files and no STATE/ is refused:
    nothing in it is touched."""
    state = os.path.join(work, STATE)
    try:
        os.makedirs(work, mode=0o700, exist_ok=True)
        if not os.path.isdir(state) or os.path.islink(state):
            if os.listdir(work) and not made:
                raise TransferError(
                    EXIT_USAGE,
                    f"--work {work}: not empty and not a directory a fetch made (no {STATE}/ in "
                    "it); give a new or empty directory: nothing in it was touched",
                )
            os.mkdir(state, 0o700)
        os.makedirs(os.path.join(state, "parts"), mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(state, "lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except TransferError:
        raise
    except OSError as exc:
        raise TransferError(
            EXIT_USAGE, f"--work {work}: {exc.strerror or exc}; give a directory you can write"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise TransferError(
            EXIT_FAILED,
            f"another install.sh is fetching into {work}; wait for it to end, or give another "
            "--work",
        ) from None
    return fd


def check_paths(sums: dict[str, str]) -> None:
    """Refuse a list where one path is a file and also a directory of another (a and a/b), or
    that names our own state."""
    for rel in sums:
        parts = rel.split("/")
        if parts[0] == STATE:
            raise TransferError(EXIT_DAMAGED, f"the served bundle is damaged: {SUMS} lists {rel}")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in sums:
                raise TransferError(
                    EXIT_DAMAGED,
                    f"the served bundle is damaged: {SUMS} lists {'/'.join(parts[:i])} both as "
                    f"a file and as the directory of {rel}",
                )


def sweep(work: str, listed: set[str]) -> None:
    """Remove what an earlier fetch of another bundle left in our `work` (it holds STATE/):
    the copy holds exactly what SHA256SUMS lists, as verify requires."""
    for dirpath, dirnames, filenames in os.walk(work, topdown=False):
        if dirpath == work:
            dirnames[:] = [d for d in dirnames if d != STATE]
        rel_dir = os.path.relpath(dirpath, work).replace(os.sep, "/")
        if rel_dir == STATE or rel_dir.startswith(STATE + "/"):
            continue
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, work).replace(os.sep, "/")
            if rel != SUMS and rel not in listed:
                _remove(full)
        for name in dirnames:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(dirpath, name))  # only when empty
    parts = os.path.join(work, STATE, "parts")
    for name in os.listdir(parts):
        _remove(os.path.join(parts, name))


# The rules of contract/names.py, kept here: this file runs before anything of the served copy
# is trusted, so it never imports the copy's own checks (tests/test_served_hostile.py keeps the
# two in agreement on a table of names).
_BAD_CHARS = re.compile(r'[\x00-\x1f\x7f\\:*?"<>|]')


def plain_filename(name: str, where: str) -> str:
    """`name` when it is one plain path component (contract/names.py `plain_filename`)."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or name.startswith("-")
        or _BAD_CHARS.search(name)
        or name != name.strip()
    ):
        raise TransferError(
            EXIT_DAMAGED,
            f"the served bundle is damaged: {where}: {name!r} is not a plain file name",
        )
    return name


def bundle_path(path: str, where: str) -> str:
    """`path` when it is relative and of plain components (contract/names.py `bundle_path`)."""
    if not isinstance(path, str) or not path or path.startswith("/"):
        raise TransferError(
            EXIT_DAMAGED,
            f"the served bundle is damaged: {where}: {path!r} is not a relative path inside "
            "the bundle",
        )
    for part in path.split("/"):
        plain_filename(part, where)
    return path


def _checked_names(sums: dict[str, str]) -> dict[str, str]:
    """`sums` with every path checked by the rules above, before anything is fetched."""
    return {bundle_path(rel, SUMS): sha for rel, sha in sums.items()}


def _pool(job: Fetch, items: list[tuple[str, str, int | None]], say: Callable[[str], None]) -> None:
    """Fetch `items` JOBS at a time; a progress line every PROGRESS seconds; the first error
    stops the others and is raised."""
    todo: queue.Queue[tuple[str, str, int | None]] = queue.Queue()
    for item in items:
        todo.put(item)
    errors: list[BaseException] = []

    def worker() -> None:
        while not job.stop.is_set():
            try:
                rel, sha, size = todo.get_nowait()
            except queue.Empty:
                return
            try:
                job.file(rel, sha, size)
            except BaseException as exc:  # handed to the main thread
                with job.lock:
                    errors.append(exc)
                job.stop.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(JOBS, len(items)))]
    for t in threads:
        t.start()
    total = sum(s or 0 for _, _, s in items)
    began = time.monotonic()
    done_before, bytes_before = job.done, job.bytes  # this pool's own counts are shown
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=max(0.05, min(PROGRESS, job.deadline - time.monotonic())))
                if not t.is_alive():
                    continue
                if time.monotonic() >= job.deadline:
                    job.stop.set()
                    break
                say(
                    f"fetching: {job.done - done_before} of {len(items)} files, "
                    f"{(job.bytes - bytes_before) / 1e6:.1f} of "
                    f"{total / 1e6:.1f} MB ({time.monotonic() - began:.0f} s)"
                )
                break
    except KeyboardInterrupt:
        job.stop.set()
        raise
    real = [e for e in errors if not isinstance(e, _StoppedError)]
    if real:
        raise real[0]
    if errors or job.done < len(items):
        raise _StoppedError()


def fetch(job: Fetch, pin: str | None, say: Callable[[str], None]) -> tuple[int, int]:
    """The served bundle into `job.work` (claimed and locked by the caller); returns (files
    fetched, bytes fetched)."""
    source, work = job.source, job.work
    try:
        raw, sums = read_sums(source, job.deadline)
        got = hashlib.sha256(raw).hexdigest()
        if pin and got != pin:
            raise TransferError(
                EXIT_DAMAGED,
                f"{source.shown}{SUMS} has sha256 {got}, not the {pin} this node is pinned to "
                "(--bundle-sha256): another bundle is served there; nothing was fetched",
            )
        checked = _checked_names(sums)
        check_paths(checked)
        if MANIFEST not in checked:
            raise TransferError(
                EXIT_DAMAGED, f"the served bundle is damaged: {SUMS} lacks {MANIFEST}"
            )
        _write_new(os.path.join(work, STATE), SUMS, raw)
        os.replace(os.path.join(work, STATE, SUMS), os.path.join(work, SUMS))
        job.file(MANIFEST, sums[MANIFEST], None)
        with open(os.path.join(work, MANIFEST), "rb") as fh:
            sizes = stated_sizes(fh.read(), sums)
        rest = sorted(set(checked) - {MANIFEST}, key=lambda r: -sizes.get(r, 0))
        _pool(job, [(rel, checked[rel], sizes.get(rel)) for rel in rest], say)
    except _StoppedError:
        raise TransferError(
            EXIT_FAILED,
            f"gave up after {time.monotonic() - job.started:.0f} s (--deadline): "
            f"{job.done} file(s), {job.bytes / 1e6:.1f} MB arrived from {source.shown}; run "
            "again to continue: what arrived is kept",
        ) from None
    sweep(work, set(checked))
    for name in EXECUTABLE:
        if name in checked:
            os.chmod(os.path.join(work, name), 0o755)  # noqa: S103 - the bundle's entry scripts
    say(f"fetched {job.files} of {len(checked)} files ({job.bytes / 1e6:.1f} MB) into {work}")
    return job.files, job.bytes


OPTIONS = ("--from", "--work", "--events", "--bundle-sha256", "--deadline")


def split_options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(the fetch's options by name, the options passed on to install.sh: --events too)."""
    found: dict[str, str] = {}
    rest: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in OPTIONS:
            if not eq:
                if not args:
                    raise TransferError(EXIT_USAGE, f"{name} needs a value")
                value = args.pop(0)
            found[name] = value
            if name != "--events":
                continue
            arg = f"--events={value}"
        rest.append(arg)
    return found, rest


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"


def _ours(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def default_work(source: Source) -> tuple[str, str]:
    """(the work directory, a note): `$TMPDIR/verl-bundle-<uid>/served-<host>-<url key>`, kept
    between runs so a rerun resumes, inside a directory that is ours (mode 0700, not a link);
    when that one is someone else's, a fresh mkdtemp directory (no resume)."""
    base = os.path.join(tempfile.gettempdir(), f"verl-bundle-{os.getuid()}")
    with contextlib.suppress(OSError):
        os.mkdir(base, 0o700)
    key = hashlib.sha256(source.base.encode()).hexdigest()[:12]
    if _ours(base):
        return os.path.join(base, f"served-{_host()}-{key}"), ""
    fresh = tempfile.mkdtemp(prefix=f"verl-bundle-{_host()}-")
    return fresh, f" ({base} is not a directory of ours with mode 0700: a fresh one, no resume)"


def _emit(events: str | None, **fields: Any) -> None:
    """The fetch's events on --events FILE, as JSON lines (contract/events.py's shape,
    written here: nothing of the served copy is run to write them). The file is appended to
    only when it is a regular file (O_NOFOLLOW: a link there is refused)."""
    if not events:
        return
    docs = [
        {"event": "step", "schema": 1, "time": round(time.time(), 3), "step": "fetch", **fields}
    ]
    if fields.get("status") == "fail":
        code = fields.get("exit_code", EXIT_FAILED)
        message = fields.get("detail", "")
        docs.append(
            {
                "event": "result",
                "schema": 1,
                "time": round(time.time(), 3),
                "ok": False,
                "exit_code": code,
                "message": message,
                "log": None,
            }
        )
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(events, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        os.write(fd, "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8"))
    finally:
        os.close(fd)


def _pin(value: str | None) -> str | None:
    if value is None:
        return None
    if not _HEX64.fullmatch(value):
        raise TransferError(
            EXIT_USAGE,
            f"--bundle-sha256 {value[:80]!r}: give the 64 hex digits of the bundle's SHA256SUMS "
            "sha256 (sha256sum SHA256SUMS in the extracted bundle)",
        )
    return value.lower()


def _seconds(value: str | None) -> float:
    if value is None:
        return float(DEADLINE)
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e9:
        raise TransferError(EXIT_USAGE, f"--deadline {value[:40]!r}: give a number of seconds")
    return seconds


def main(argv: list[str]) -> int:
    """`--from URL [--bundle-sha256 H] [--work DIR] [--deadline S] [install.sh options]` ->
    exit code."""

    def say(text: str) -> None:
        sys.stderr.write(f"install.sh: {text}\n")
        sys.stderr.flush()

    started = time.monotonic()
    events: str | None = None
    lock = -1
    try:
        found, rest = split_options(argv)
        events, url, work = found.get("--events"), found.get("--from"), found.get("--work")
        if url is None:
            raise TransferError(EXIT_USAGE, "--from URL: the URL of a served bundle is missing")
        source = Source(url)
        pin, budget = _pin(found.get("--bundle-sha256")), _seconds(found.get("--deadline"))
        note = ""
        if work:
            chosen = os.path.abspath(work)
        else:
            chosen, note = default_work(source)
        lock = claim(chosen, made=not work)
        pinned = (
            f"pinned to SHA256SUMS {pin[:16]}..."
            if pin
            else "not pinned: give --bundle-sha256 (the sha256 of the bundle's SHA256SUMS) so "
            "that only that bundle is installed"
        )
        say(f"fetching {source.shown} into {chosen}{note}; {pinned}")
        _, total = fetch(Fetch(source, chosen, started, budget), pin, say)
    except TransferError as exc:
        say(exc.message)
        with contextlib.suppress(OSError):  # --events where it cannot be written
            _emit(events, status="fail", detail=exc.message, exit_code=exc.code)
        return exc.code
    except KeyboardInterrupt:
        say("interrupted while fetching; run the same command again to continue")
        return EXIT_INTERRUPTED
    with contextlib.suppress(OSError):
        _emit(
            events,
            status="ok",
            seconds=round(time.monotonic() - started, 3),
            detail=f"{total} bytes from {source.shown}",
        )
    proc = subprocess.Popen(["/bin/sh", os.path.join(chosen, "install.sh"), *rest])
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            continue  # install.sh got the same Ctrl-C: it stops and says how to continue
    if code == 0 and work is None:
        shutil.rmtree(chosen, ignore_errors=True)  # the default copy; --work DIR is kept
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(chosen))  # $TMPDIR/verl-bundle-<uid>, when empty
    os.close(lock)
    return code
