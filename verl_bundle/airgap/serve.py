"""`python3 -m verl_bundle.airgap serve DIR`: the zero-setup server for one served copy, what
`install.sh --from URL` fetches from. Python's threaded HTTP server with a real backlog (1024
pending connections, where `python3 -m http.server` keeps 5), one thread per connection,
keep-alive, and HTTP Range (`bytes=N-`), so a node resumes a broken transfer instead of
starting the file again. It serves DIR read-only and nothing outside it (no path through a
symbolic link that leaves DIR). For hundreds of nodes, nginx or a parallel filesystem serve
better (docs/server.md). A connection that sends nothing (or stops reading) for TIMEOUT seconds
is closed, and at most HANDLERS connections are served at once: past that a node is answered
503 with Retry-After (its fetch retries), so idle or half-sent requests cannot hold a thread
each without bound. Standard library only, Python 3.8+."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO

from verl_bundle.airgap.errors import UsageError

BACKLOG = 1024
SUMS = "SHA256SUMS"
TIMEOUT = 60.0  # seconds a connection may stay silent (a stalled request line, header or read)
HANDLERS = 256  # connections served at once; more are answered 503 + Retry-After
RETRY_AFTER = 5  # seconds, in that answer
_BUSY = (
    "HTTP/1.1 503 Service Unavailable\r\n"
    f"Retry-After: {RETRY_AFTER}\r\n"
    "Content-Length: 0\r\n"
    "Connection: close\r\n\r\n"
).encode("ascii")


class _Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a node fetches many files over one connection

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a request line per file per node is noise; errors reach the node

    def translate_path(self, path: str) -> str:
        full = super().translate_path(path)
        root = os.path.realpath(self.directory)
        real = os.path.realpath(full)
        if real != root and not real.startswith(root + os.sep):
            return os.path.join(root, ".outside-the-served-directory", "none")  # a 404
        return full

    def send_head(self) -> BinaryIO | None:
        ask = self.headers.get("Range", "")
        m = re.fullmatch(r"bytes=(\d+)-", ask.strip())
        path = self.translate_path(self.path)
        if not m or not os.path.isfile(path):
            return super().send_head()
        try:
            fh = open(path, "rb")  # noqa: SIM115 - handed to the server, which closes it
        except OSError:
            self.send_error(404, "File not found")
            return None
        size = os.fstat(fh.fileno()).st_size
        start = int(m.group(1))
        if start >= size:
            fh.close()
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        fh.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return fh


class BundleServer(http.server.ThreadingHTTPServer):
    request_queue_size = BACKLOG
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args: Any, handlers: int = HANDLERS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(handlers)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while a slot is free; else 503 and close, here."""
        if not self.slots.acquire(blocking=False):
            self._busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _busy(self, request: socket.socket) -> None:
        try:
            request.settimeout(1.0)  # a small answer into an empty buffer: never blocks long
            request.sendall(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A node that went away or stalled past TIMEOUT is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@dataclass(frozen=True)
class Served:
    """A bundle under the served directory: its URL path and its pin (sha256 of SHA256SUMS)."""

    path: str
    pin: str


def bundles(root: str) -> list[Served]:
    """The bundles DIR serves: DIR itself or its subdirectories that hold SHA256SUMS."""
    found = []
    for rel in ["", *sorted(os.listdir(root))]:
        sums = os.path.join(root, rel, SUMS)
        if os.path.isfile(sums) and not os.path.islink(sums):
            with open(sums, "rb") as fh:
                pin = hashlib.sha256(fh.read()).hexdigest()
            found.append(Served(f"{rel}/" if rel else "", pin))
    return found


def make_server(root: str, bind: str, port: int) -> BundleServer:
    """The server for `root` at bind:port (port 0: any free one); UsageError in one line when
    the directory or the address cannot be used."""
    if not os.path.isdir(root):
        raise UsageError(f"serve: {root}: no such directory; give the directory above the bundle")

    class Handler(_Handler):
        timeout = TIMEOUT  # read now: a test may lower the module's value first

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=root, **kwargs)

    try:
        return BundleServer((bind, port), Handler, handlers=HANDLERS)
    except OSError as exc:
        raise UsageError(
            f"serve: cannot listen on {bind}:{port}: {exc.strerror or exc}; give another --port"
        ) from None
