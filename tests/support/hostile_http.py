"""A hostile served copy: a real threaded HTTP server on a loopback address that serves a
directory as `python3 -m http.server` does (with HTTP Range), except for the paths a test
gives a behaviour: a redirect elsewhere, a body sent endlessly, cut short or trickled. It
records every request's path and headers, so a test can see what reached it."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote

Behaviour = Callable[["Handler", str], None]  # (the handler, the path after the prefix)


class Handler(http.server.BaseHTTPRequestHandler):
    server: Hostile
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        rel = unquote(self.path.split("?")[0]).lstrip("/")
        with self.server.lock:
            self.server.seen.append((rel, dict(self.headers.items())))
        if self.server.need_auth and self.headers.get("Authorization") != self.server.need_auth:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        for prefix, behaviour in self.server.behaviours.items():
            if rel.startswith(prefix):
                behaviour(self, rel[len(prefix) :])
                return
        self.plain(rel)

    def plain(self, rel: str) -> None:
        path = self.server.root / rel
        if not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = path.read_bytes()
        start = 0
        ask = self.headers.get("Range", "")
        if ask.startswith("bytes=") and ask.endswith("-"):
            start = int(ask[6:-1])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])

    # -- behaviours --------------------------------------------------------------------------

    def redirect(self, to: str) -> None:
        self.send_response(302)
        self.send_header("Location", to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def endless(self) -> None:
        """200 with no length, and bytes until the client hangs up (counted)."""
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        block = b"\0" * 65536
        try:
            while True:
                self.wfile.write(block)
                with self.server.lock:
                    self.server.sent += len(block)
        except OSError:
            return

    def short(self, rel: str) -> None:
        """The full length promised, half the body sent, then the connection closed."""
        data = (self.server.root / rel).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def trickle(self, rel: str) -> None:
        """One byte every 0.2 s."""
        data = (self.server.root / rel).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return


class Hostile(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        super().__init__((host, 0), Handler)
        self.root = root
        self.behaviours: dict[str, Behaviour] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.need_auth = ""
        self.sent = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"


def hostile(root: Path, host: str = "127.0.0.1") -> Iterator[Hostile]:
    """A started Hostile server (a generator for a pytest fixture: shut down after)."""
    server = Hostile(root, host)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
