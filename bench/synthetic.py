"""The synthetic stack the benchmarks build: a dozen large wheels shaped like the verl CUDA stack
(torch about 40% of the bytes, every member deflated, libraries that inflate about 1.9x as real
ones do), plus real pip and uv wheels, served from a package index on 127.0.0.1.

The wheels are made once per size with the test suite's own builders
(tests/support/pkgindex.py, tests/support/stack.py) and kept under a cache directory, so a second
benchmark run starts at once.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "verl-bundle-bench"
PYTHON = "3.10"
CP = "cp310-cp310-manylinux_2_17_x86_64"
PURE = "py3-none-any"
UPLOADED = "2024-06-01T00:00:00Z"
# Bump when the shape or the builders change, so that old wheels are not reused.
FORMAT = 2
# What the compiled-like payload deflates by (tests/pkgindex.py): a wheel of N bytes holds about
# N * INFLATES bytes of libraries, as a real CUDA wheel does (torch: 2.1x).
INFLATES = 1.88

# (name, share of the bytes, wheel tag): torch-sized first, then a tail of smaller wheels.
SHAPE: tuple[tuple[str, float, str], ...] = (
    ("bench-torch", 0.40, CP),
    ("bench-triton", 0.15, CP),
    ("bench-vllm", 0.10, CP),
    ("bench-xformers", 0.08, CP),
    ("bench-flash-attn", 0.06, CP),
    ("bench-ray", 0.05, CP),
    ("bench-cupy", 0.04, CP),
    ("bench-transformers", 0.04, PURE),
    ("bench-numpy", 0.03, CP),
    ("bench-tensordict", 0.02, PURE),
    ("bench-sentencepiece", 0.02, CP),
    ("bench-verl", 0.01, PURE),
)
VERSION = "1.0.0"


def _test_module(name: str) -> ModuleType:
    """A module of the test suite's fixtures. tests/ is not a package (pytest puts it on
    sys.path), so it is imported the same way here, at run time."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(name)


_pkgindex = _test_module("support.pkgindex")
_stack = _test_module("support.stack")
_TestServer: Any = _pkgindex.Server


@dataclass(frozen=True)
class Wheel:
    filename: str
    name: str
    version: str
    sha256: str
    size: int

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Stack:
    """The wheels of one size, in `index` (one flat directory, which the index serves)."""

    index: Path
    size: int  # requested bytes of the synthetic wheels
    requirements: tuple[Wheel, ...]  # what the profile asks for
    bootstrap: tuple[Wheel, ...]  # pip and uv

    @property
    def wheels(self) -> tuple[Wheel, ...]:
        return self.requirements + self.bootstrap

    @property
    def total_bytes(self) -> int:
        return sum(w.size for w in self.wheels)

    def digests(self) -> dict[str, str]:
        return {w.filename: w.sha256 for w in self.wheels}

    def describe(self) -> str:
        return (
            f"{len(self.wheels)} wheels, {self.total_bytes / 1e9:.2f} GB "
            f"({len(self.requirements)} synthetic, deflated like compiled libraries, about "
            f"{INFLATES}x; + pip + uv; largest {max(w.size for w in self.wheels) / 1e9:.2f} GB)"
        )

    def write_profile(self, directory: Path, name: str = "bench") -> Path:
        """A user profile (docs/profiles.md, "Profile format") asking for exactly these pins."""
        directory.mkdir(parents=True, exist_ok=True)
        reqs = ", ".join(json.dumps(w.pin) for w in self.requirements)
        path = directory / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\n'
            'description = "synthetic stack for bench/"\n'
            'cuda = "11.8"\n'
            f'python = "{PYTHON}"\n'
            'platform = "manylinux_2_17_x86_64"\n'
            f"requirements = [{reqs}]\n"
            'bootstrap = ["pip", "uv"]\n'
        )
        return path


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _describe(path: Path) -> Wheel:
    name, version = path.name.split("-")[:2]
    return Wheel(path.name, name.replace("_", "-"), version, _sha256(path), path.stat().st_size)


def stack(size: int, cache: Path = DEFAULT_CACHE, log: Any = None) -> Stack:
    """The stack of `size` bytes, made on first use and reused afterwards."""
    home = cache / f"stack-v{FORMAT}-{size}"
    record = home / "stack.json"
    if record.is_file():
        doc = json.loads(record.read_text())
        index = home / "index"
        return Stack(
            index,
            size,
            tuple(Wheel(**w) for w in doc["requirements"]),
            tuple(Wheel(**w) for w in doc["bootstrap"]),
        )
    if home.exists():
        shutil.rmtree(home)
    work = home / "index.partial"
    work.mkdir(parents=True)
    if log is not None:
        print(f"making the synthetic {size / 1e9:.2f} GB stack in {home} (once) ...", file=log)
    reqs = []
    for name, share, tag in SHAPE:
        # Deflated members shaped like compiled libraries, as real CUDA wheels hold: checking
        # a wheel whole inflates it, the cost that dominates that check on a real stack.
        path = _pkgindex.build_wheel(
            work,
            name,
            VERSION,
            tag=tag,
            payload_bytes=int(size * share * INFLATES),
            compiled_like=True,
        )
        reqs.append(_describe(Path(path)))
    pip = _describe(Path(shutil.copy(_stack.bundled_wheel("pip"), work)))
    uv = _describe(Path(_stack.build_uv_wheel(work)))
    os.replace(work, home / "index")
    result = Stack(home / "index", size, tuple(reqs), (pip, uv))
    record.write_text(
        json.dumps(
            {
                "requirements": [w.__dict__ for w in result.requirements],
                "bootstrap": [w.__dict__ for w in result.bootstrap],
            },
            indent=1,
        )
    )
    return result


def warm_page_cache(paths: list[Path]) -> None:
    """Read files once so that no contender pays for the first read from disk."""
    for path in paths:
        with path.open("rb") as fh:
            while fh.read(8 << 20):
                pass


class FastIndex(_TestServer):  # type: ignore[misc]  # a run-time import (see _test_module)
    """The test suite's PEP 503/691 index, with the two things it does per request that a real
    index does not: it hashes every file of a project for each page (here the hashes are known),
    and it reads a whole file into memory to answer a Range request (here files are sent from
    disk with sendfile, suffix ranges included). Counts the bytes it sends."""

    def __init__(self, root: Path, digests: Mapping[str, str]) -> None:
        self.digests = dict(digests)
        self.bytes_sent = 0
        self.file_requests_seen = 0
        self._count = threading.Lock()
        super().__init__(root, json_api=True, upload_time=UPLOADED)

    def reset_counters(self) -> None:
        with self._count:
            self.bytes_sent = 0
            self.file_requests_seen = 0

    def _digest(self, p: Path) -> str:
        return self.digests.get(p.name) or _sha256(p)

    def _project_html(self, project: str) -> bytes:
        import html

        links = [
            f'<a href="{html.escape(self._file_url(p))}#sha256={self._digest(p)}">'
            f"{html.escape(p.name)}</a><br/>"
            for p in self._files_for(project)
        ]
        return ("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()

    def _project_json(self, project: str) -> bytes:
        files = [
            {
                "filename": p.name,
                "url": self._file_url(p),
                "hashes": {"sha256": self._digest(p)},
                "size": p.stat().st_size,
                "upload-time": self.upload_time,
            }
            for p in self._files_for(project)
        ]
        doc = {"meta": {"api-version": "1.1"}, "name": project, "files": files, "versions": []}
        return json.dumps(doc).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        index = self

        class Handler(base):  # type: ignore[misc,valid-type]  # base is the test server's
            def _serve_file(self, rel: str) -> None:
                target = (index.root / rel).resolve()
                if index.root.resolve() not in target.parents or not target.is_file():
                    self._send(404, b"not found")
                    return
                size = target.stat().st_size
                start, end, partial = 0, size - 1, False
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", (self.headers.get("Range") or "").strip())
                if m and (m.group(1) or m.group(2)):
                    partial = True
                    if not m.group(1):  # a suffix range: the last N bytes (zip directories)
                        start = max(0, size - int(m.group(2)))
                    else:
                        start = int(m.group(1))
                        end = min(end, int(m.group(2))) if m.group(2) else end
                    if start >= size:
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                count = end - start + 1
                self.send_response(206 if partial else 200)
                if partial:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.send_header("Content-Length", str(count))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                if self.command == "HEAD":
                    return
                sent = 0
                with (
                    target.open("rb") as fh,
                    contextlib.suppress(BrokenPipeError, ConnectionResetError),
                ):
                    sent = self.connection.sendfile(fh, start, count)
                with index._count:
                    index.bytes_sent += sent
                    index.file_requests_seen += 1

        return Handler


@contextlib.contextmanager
def serving(stack: Stack) -> Iterator[FastIndex]:
    server = FastIndex(stack.index, stack.digests()).start()
    try:
        yield server
    finally:
        server.stop()
