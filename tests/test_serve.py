"""airgap/serve.py against connections that stall: a request sent halfway is closed after the
per-connection timeout, and past the bound on concurrent handlers a node is answered 503 with
Retry-After instead of a thread of its own. The real server, in this process, on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from verl_bundle.airgap import serve


@contextlib.contextmanager
def serving(
    root: Path, monkeypatch: pytest.MonkeyPatch, timeout: float
) -> Iterator[tuple[str, int]]:
    """The server for `root` with this per-connection timeout and 3 handlers, on a thread."""
    monkeypatch.setattr(
        serve, "TIMEOUT", timeout, raising=False
    )  # without the knob: still run, and fail
    monkeypatch.setattr(serve, "HANDLERS", 3, raising=False)
    (root / "SHA256SUMS").write_text("0" * 64 + "  manifest.json\n")
    server = serve.make_server(str(root), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (a 60 s guard, not a measure)."""
    sock.settimeout(60)
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk


def test_a_half_sent_request_is_closed_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path, monkeypatch, 1.0) as served, socket.create_connection(served) as half:
        half.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # no blank line: never ends
        assert _read_all(half) == b""  # closed by the server, nothing answered


def test_past_the_bound_a_node_is_answered_503_with_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path, monkeypatch, 120.0) as served, contextlib.ExitStack() as idle:
        # Connected first, so accepted first: each holds a handler (the timeout is long here).
        held = [idle.enter_context(socket.create_connection(served)) for _ in range(3)]
        with socket.create_connection(served) as extra:
            answer = _read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"Retry-After: 5\r\n" in answer
        # The connections it holds are served as ever.
        held[0].sendall(b"GET /SHA256SUMS HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _read_all(held[0]).startswith(b"HTTP/1.1 200 ")
