"""Real package files and a real package index over HTTP on 127.0.0.1, for tests.

Wheels and sdists are built with zipfile/tarfile (METADATA, WHEEL, RECORD), so pip and uv
accept them. The server speaks PEP 503 HTML (and PEP 691 JSON with PEP 700 upload times when
asked to), serves files with Range support, and can inject the failures a real network has:
5xx answers, truncated bodies, altered bytes, required credentials.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import io
import json
import random
import re
import ssl
import tarfile
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name)


def _metadata(
    name: str,
    version: str,
    requires: list[str],
    requires_python: str | None,
    more: tuple[str, ...] = (),
) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    lines += [f"Requires-Dist: {r}" for r in requires]
    lines += more  # further fields, e.g. a licence: "License-Expression: MIT"
    return "\n".join(lines) + "\n"


def installed_files(name: str) -> tuple[str, list[str], dict[str, bytes]]:
    """(version, requirements, files) of a distribution installed in this test environment: its
    Python files and package data, unchanged; compiled extensions and bytecode left out (the
    packages used have a pure-Python fallback), and its dist-info made anew by the builder."""
    from importlib import metadata

    dist = metadata.distribution(name)
    files: dict[str, bytes] = {}
    for f in dist.files or []:
        parts = f.parts
        if ".." in parts or "__pycache__" in parts or parts[0].endswith((".dist-info", ".data")):
            continue
        if f.suffix in (".pyc", ".so", ".pyd"):
            continue
        files[str(f)] = Path(str(dist.locate_file(f))).read_bytes()
    return dist.version, list(dist.requires or []), files


def build_wheel(
    directory: Path,
    name: str,
    version: str,
    *,
    tag: str = "py3-none-any",
    requires: list[str] | None = None,
    requires_python: str | None = None,
    modules: dict[str, str] | None = None,
    payload_bytes: int = 0,
    metadata: tuple[str, ...] = (),
    compiled_like: bool = False,
    data: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Write a minimal valid wheel; `modules` maps a top-level module name to its source;
    `metadata`: more METADATA lines ("License-Expression: MIT"); `data` maps other archive
    paths (e.g. `<dist>.data/scripts/NAME`, a package's data file) to their content.

    The payload is incompressible filler in one stored member; with `compiled_like`, it is
    `payload_bytes` of bytes shaped like compiled libraries instead (they deflate about 1.9x
    and inflate about as fast as a real CUDA wheel's .so files do), in members of at most
    PART bytes, every member deflated as real wheels are."""
    dist = _dist(name)
    filename = f"{dist}-{version}-{tag}.whl"
    path = directory / filename
    directory.mkdir(parents=True, exist_ok=True)
    info = f"{dist}-{version}.dist-info"
    files: dict[str, bytes] = {}
    sources = modules if modules is not None else {dist.lower(): f"__version__ = {version!r}\n"}
    for mod, src in sources.items():
        files[f"{mod}/__init__.py"] = src.encode()
    for arcname, content in (data or {}).items():
        files[arcname] = content.encode() if isinstance(content, str) else content
    if payload_bytes and not compiled_like:
        # Incompressible filler so that size-dependent behaviour (streaming, resume) is real.
        seed = hashlib.sha256(filename.encode()).digest()
        blocks = [
            hashlib.sha256(seed + i.to_bytes(8, "big")).digest()
            for i in range(payload_bytes // 32 + 1)
        ]
        files[f"{dist.lower()}_payload.bin"] = b"".join(blocks)[:payload_bytes]
    files[f"{info}/METADATA"] = _metadata(
        name, version, requires or [], requires_python, metadata
    ).encode()
    root_is_purelib = "true" if tag.endswith("none-any") else "false"
    wheel_tags = "".join(f"Tag: {t}\n" for t in _expand_tag(tag))
    files[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: verl-bundle-tests\nRoot-Is-Purelib: {root_is_purelib}\n"
        + wheel_tags
    ).encode()
    record_lines = []

    def add(zf: zipfile.ZipFile, arcname: str, blob: bytes) -> None:
        zinfo = zipfile.ZipInfo(arcname, date_time=(2024, 1, 1, 0, 0, 0))
        zinfo.external_attr = 0o644 << 16
        zinfo.compress_type = zf.compression
        zf.writestr(zinfo, blob)
        digest = base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
        record_lines.append(f"{arcname},sha256={digest},{len(blob)}")

    method = zipfile.ZIP_DEFLATED if compiled_like else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method, compresslevel=1 if compiled_like else None) as zf:
        for arcname, blob in files.items():
            add(zf, arcname, blob)
        if compiled_like:  # written part by part: a GB-sized payload never sits in memory
            for i, part in enumerate(_compiled_like(filename, payload_bytes)):
                add(zf, f"{dist.lower()}/lib/part{i:04d}.so", part)
        record_lines.append(f"{info}/RECORD,,")
        add(zf, f"{info}/RECORD", ("\n".join(record_lines) + "\n").encode())
    return path


PART = 32 << 20  # the largest member of a compiled-like payload
# Twelve byte values, evenly: about 3.6 bits of entropy a byte, all literals for deflate, as
# machine code and CUDA fatbins mostly are to it (a real torch wheel: 2.1x, inflated at
# 150-190 MB/s here; this filler: 1.9x at deflate level 1, 150-190 MB/s).
_NARROW = bytes((i % 12) * 17 for i in range(256))


def _compiled_like(filename: str, size: int) -> Iterator[bytes]:
    """`size` bytes in parts of at most PART, the same for the same file name."""
    rng = random.Random(hashlib.sha256(filename.encode()).digest())  # noqa: S311 - filler
    while size > 0:
        step = min(PART, size)
        yield rng.randbytes(step).translate(_NARROW)
        size -= step


def _expand_tag(tag: str) -> list[str]:
    py, abi, plat = tag.split("-")
    return [
        f"{p}-{a}-{pl}" for p in py.split(".") for a in abi.split(".") for pl in plat.split(".")
    ]


# An in-tree PEP 517 backend: builds a pure wheel from the sdist's own files with no
# build requirements, so that uv and pip can build it offline. `extra_import` lets an sdist
# behave like flash-attn's setup.py, which imports torch before it can do anything.
_BACKEND = """
import base64, hashlib, os, random, time, zipfile
NAME = {name!r}
# Like many real backends: entries in no fixed order, stamped with the time of the build.
UNSTABLE = {unstable!r}
VERSION = {version!r}
REQUIRES = {requires!r}
TAG = {tag!r}
# Like setuptools' find_packages: a directory without __init__.py is left out of the wheel.
PACKAGES_ONLY = {packages_only!r}
{extra_import}

def _dist():
    return NAME.replace("-", "_").replace(".", "_")

def _meta():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + VERSION]
    lines += ["Requires-Dist: " + r for r in REQUIRES]
    return "\\n".join(lines) + "\\n"

def get_requires_for_build_wheel(config_settings=None):
    return []

def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = _dist() + "-" + VERSION + ".dist-info"
    os.makedirs(os.path.join(metadata_directory, info))
    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as f:
        f.write(_meta())
    return info

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = _dist()
    info = dist + "-" + VERSION + ".dist-info"
    name = dist + "-" + VERSION + "-" + TAG + ".whl"
    files = {{}}
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(here, "src")
    for root, _, names in os.walk(pkg):
        if PACKAGES_ONLY and root != pkg and "__init__.py" not in names:
            continue
        for n in sorted(names):
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                files[os.path.relpath(full, pkg).replace(os.sep, "/")] = f.read()
    files[info + "/METADATA"] = _meta().encode()
    purelib = "true" if TAG.endswith("none-any") else "false"
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\\nGenerator: test-backend\\nRoot-Is-Purelib: "
                              + purelib + "\\nTag: " + TAG + "\\n").encode()
    record = []
    for arc, data in files.items():
        d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(arc + ",sha256=" + d + "," + str(len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\\n".join(record) + "\\n").encode()
    items = list(files.items())
    if UNSTABLE:
        random.shuffle(items)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for arc, data in items:
            if UNSTABLE:
                when = time.localtime(time.time() - random.randint(0, 10 ** 7))[:6]
                zf.writestr(zipfile.ZipInfo(arc, date_time=when), data)
            else:
                zf.writestr(arc, data)
    return name

def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("not needed")
"""


def build_sdist(
    directory: Path,
    name: str,
    version: str,
    *,
    requires: list[str] | None = None,
    modules: dict[str, str] | None = None,
    extra_import: str = "",
    wheel_tag: str = "py3-none-any",
    unstable: bool = False,
    files: dict[str, bytes] | None = None,
) -> Path:
    """Write an sdist (`.tar.gz`) whose in-tree backend builds a wheel with no downloads
    (`unstable`: in random entry order with the build's time stamps, as many backends do);
    `files`: more of the package's files, by their path in the wheel."""
    dist = _dist(name)
    base = f"{dist}-{version}"
    path = directory / f"{base}.tar.gz"
    directory.mkdir(parents=True, exist_ok=True)
    members = _source_members(
        name,
        version,
        requires=requires,
        modules=modules,
        extra_import=extra_import,
        wheel_tag=wheel_tag,
        unstable=unstable,
        files=files,
    )
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for arcname, data in members.items():
            ti = tarfile.TarInfo(f"{base}/{arcname}")
            ti.size = len(data)
            ti.mtime = 1704067200
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return path


def write_source_tree(
    directory: Path,
    name: str,
    version: str,
    *,
    requires: list[str] | None = None,
    modules: dict[str, str] | None = None,
    files: dict[str, bytes] | None = None,
    packages_only: bool = True,
    pyproject_extra: str = "",
) -> Path:
    """A source tree (a checkout) of `name`, built by its in-tree backend with no downloads:
    what `build_sdist` packs, unpacked; `packages_only` leaves directories without
    __init__.py out of the wheel, as setuptools' find_packages does; `pyproject_extra` is
    appended to its pyproject.toml (a `[tool.uv.sources]` table, say)."""
    members = _source_members(
        name,
        version,
        requires=requires,
        modules=modules,
        files=files,
        packages_only=packages_only,
        pyproject_extra=pyproject_extra,
    )
    for arcname, data in members.items():
        if arcname == "PKG-INFO":
            continue  # a checkout has none
        target = directory / arcname
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return directory


def _source_members(
    name: str,
    version: str,
    *,
    requires: list[str] | None = None,
    modules: dict[str, str] | None = None,
    extra_import: str = "",
    wheel_tag: str = "py3-none-any",
    unstable: bool = False,
    files: dict[str, bytes] | None = None,
    packages_only: bool = False,
    pyproject_extra: str = "",
) -> dict[str, bytes]:
    dist = _dist(name)
    sources = modules if modules is not None else {dist.lower(): f"__version__ = {version!r}\n"}
    members: dict[str, bytes] = {
        "pyproject.toml": textwrap.dedent(
            """\
            [build-system]
            requires = []
            build-backend = "test_backend"
            backend-path = ["."]
            """
        ).encode()
        + pyproject_extra.encode(),
        "test_backend.py": _BACKEND.format(
            name=name,
            version=version,
            requires=requires or [],
            tag=wheel_tag,
            extra_import=extra_import,
            unstable=unstable,
            packages_only=packages_only,
        ).encode(),
        "PKG-INFO": _metadata(name, version, requires or [], None).encode(),
    }
    for mod, src in sources.items():
        members[f"src/{mod}/__init__.py"] = src.encode()
    for rel, content in (files or {}).items():
        members[f"src/{rel}"] = content
    return members


class _QuietServer(ThreadingHTTPServer):
    """Clients hanging up mid-answer (a resume test, a cancelled download) are normal here;
    the stock server would print a traceback into the output the tests read."""

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@dataclass
class Faults:
    """Failures the server injects, keyed by file name."""

    fail_5xx: dict[str, int] = field(default_factory=dict)  # name -> remaining 503 answers
    truncate_once: dict[str, int] = field(default_factory=dict)  # name -> bytes sent, then cut
    corrupt: set[str] = field(default_factory=set)  # name -> one byte flipped in the body
    missing: set[str] = field(default_factory=set)  # name -> 404
    # name -> (bytes per piece, seconds between pieces): a slow link, for Ctrl-C tests
    slow: dict[str, tuple[int, float]] = field(default_factory=dict)
    # project -> (content type, body): a page served instead of the real one (hostile pages)
    pages: dict[str, tuple[str, bytes]] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


class Server:
    """A threaded HTTP server on 127.0.0.1 serving a PEP 503/691 index and plain files."""

    def __init__(
        self,
        root: Path,
        *,
        json_api: bool = False,
        upload_time: str | None = None,
        credentials: tuple[str, str] | None = None,
        redirect_files: bool = False,
        tls: tuple[Path, Path] | None = None,
        publish_hashes: bool = True,
    ) -> None:
        self.root = root
        self.publish_hashes = publish_hashes  # False: an index whose pages give no sha256
        self.json_api = json_api
        self.upload_time = upload_time
        self.credentials = credentials
        self.redirect_files = redirect_files
        self.faults = Faults()
        self.requests: list[Request] = []
        self.upload_times: dict[str, str] = {}
        self._lock = threading.Lock()
        handler = self._handler_class()
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple"

    def start(self) -> Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def file_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if not r.path.startswith("/simple")]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- index pages --------------------------------------------------------------------

    def _files_for(self, project: str) -> list[Path]:
        files = sorted(p for p in self.root.rglob("*") if p.is_file())
        out = []
        for p in files:
            stem = p.name
            m = re.match(r"^(.+?)-\d", stem)
            if m and normalize(m.group(1)) == project:
                out.append(p)
        return out

    def _projects(self) -> list[str]:
        names = set()
        for p in self.root.rglob("*"):
            m = re.match(r"^(.+?)-\d", p.name)
            if p.is_file() and m:
                names.add(normalize(m.group(1)))
        return sorted(names)

    def _file_url(self, p: Path) -> str:
        rel = p.relative_to(self.root).as_posix()
        return f"/files/{rel}"

    def _project_html(self, project: str) -> bytes:
        links = []
        for p in self._files_for(project):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            fragment = f"#sha256={digest}" if self.publish_hashes else ""
            links.append(
                f'<a href="{html.escape(self._file_url(p))}{fragment}">{html.escape(p.name)}</a><br/>'
            )
        body = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        return body.encode()

    def _project_json(self, project: str) -> bytes:
        files = []
        for p in self._files_for(project):
            entry: dict[str, object] = {
                "filename": p.name,
                "url": self._file_url(p),
                "hashes": {"sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                if self.publish_hashes
                else {},
                "size": p.stat().st_size,
            }
            when = self.upload_times.get(p.name, self.upload_time)
            if when:
                entry["upload-time"] = when
            files.append(entry)
        doc = {"meta": {"api-version": "1.1"}, "name": project, "files": files, "versions": []}
        return json.dumps(doc).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "text/html") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                with server._lock:
                    server.requests.append(
                        Request(
                            self.command,
                            path,
                            self.headers.get("Range"),
                            self.headers.get("Authorization"),
                        )
                    )
                if server.credentials is not None:
                    user, password = server.credentials
                    token = base64.b64encode(f"{user}:{password}".encode()).decode()
                    if self.headers.get("Authorization") != f"Basic {token}":
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="test"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                if path.rstrip("/") == "/simple":
                    items = "".join(
                        f'<a href="/simple/{p}/">{p}</a><br/>' for p in server._projects()
                    )
                    self._send(200, f"<html><body>{items}</body></html>".encode())
                    return
                m = re.fullmatch(r"/simple/([^/]+)/?", path)
                if m:
                    project = normalize(m.group(1))
                    with server._lock:
                        forged = server.faults.pages.get(project)
                    if forged is not None:
                        self._send(200, forged[1], forged[0])
                        return
                    if not server._files_for(project):
                        self._send(404, b"not found")
                        return
                    accept = self.headers.get("Accept", "")
                    if server.json_api and "application/vnd.pypi.simple.v1+json" in accept:
                        self._send(
                            200,
                            server._project_json(project),
                            "application/vnd.pypi.simple.v1+json",
                        )
                    else:
                        self._send(200, server._project_html(project))
                    return
                if path.startswith("/redirect/"):
                    self.send_response(302)
                    self.send_header("Location", "/files/" + path[len("/redirect/") :])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path.startswith("/files/"):
                    self._serve_file(path[len("/files/") :])
                    return
                # A file host path (GitHub release shape): /v{version}/{filename}
                target = server.root / path.lstrip("/")
                if target.is_file():
                    if server.redirect_files:
                        self.send_response(302)
                        self.send_header("Location", "/files/" + path.lstrip("/"))
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self._serve_file(path.lstrip("/"))
                    return
                self._send(404, b"not found")

            def _serve_file(self, rel: str) -> None:
                target = (server.root / rel).resolve()
                if server.root.resolve() not in target.parents or not target.is_file():
                    self._send(404, b"not found")
                    return
                name = target.name
                faults = server.faults
                with server._lock:
                    if name in faults.missing:
                        self._send(404, b"not found")
                        return
                    if faults.fail_5xx.get(name, 0) > 0:
                        faults.fail_5xx[name] -= 1
                        self._send(503, b"try later")
                        return
                    cut = faults.truncate_once.pop(name, None)
                    slow = faults.slow.get(name)
                data = target.read_bytes()
                if name in faults.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                    if m:
                        start = int(m.group(1))
                        end = int(m.group(2)) if m.group(2) else len(data) - 1
                        if start >= len(data):
                            self.send_response(416)
                            self.send_header("Content-Range", f"bytes */{len(data)}")
                            self.send_header("Content-Length", "0")
                            self.end_headers()
                            return
                        body = data[start : end + 1]
                        self.send_response(206)
                        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                        self.send_header("Content-Length", str(len(body)))
                        self.send_header("Accept-Ranges", "bytes")
                        self.send_header("Content-Type", "application/octet-stream")
                        self.end_headers()
                        if self.command != "HEAD":
                            self.wfile.write(body)
                        return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                if self.command == "HEAD":
                    return
                if slow is not None:
                    self._trickle(name, data, *slow)
                    return
                if cut is not None:
                    self.wfile.write(data[:cut])
                    self.wfile.flush()
                    # Drop the connection mid-body, as a flaky proxy does.
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(2)
                    return
                self.wfile.write(data)

            def _trickle(self, name: str, data: bytes, piece: int, pause: float) -> None:
                """Send `piece` bytes, wait `pause` seconds, and so on, until the client
                hangs up or the fault is cleared (then the rest goes at once)."""
                sent = 0
                with contextlib.suppress(OSError):
                    while sent < len(data):
                        with server._lock:
                            still_slow = name in server.faults.slow
                        step = piece if still_slow else len(data) - sent
                        self.wfile.write(data[sent : sent + step])
                        self.wfile.flush()
                        sent += step
                        if still_slow:
                            time.sleep(pause)

        return Handler


__all__ = ["Server", "build_sdist", "build_wheel", "normalize", "write_source_tree"]


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate for 127.0.0.1 it signed, made with the openssl
    command: (ca.pem for clients, cert.pem and key.pem for the server)."""
    import subprocess

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    csr, cert, key = directory / "server.csr", directory / "cert.pem", directory / "key.pem"
    ext = directory / "server.ext"
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    ext.write_text(
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(ext),
        "-out",
        str(cert),
    )
    return ca, cert, key
