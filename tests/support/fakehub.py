"""A small Hugging Face Hub on 127.0.0.1 for the real huggingface_hub client (via HF_ENDPOINT).

It implements what the client uses to fetch a repository, as read from its source
(huggingface_hub 1.x/2.x: hf_api.repo_info, file_download.get_hf_file_metadata and http_get):
- GET  /api/{models|datasets}/{id}/revision/{rev}[?blobs=True]: id, sha, siblings with size,
  blobId and, for large files, lfs {size, sha256, pointerSize};
- HEAD/GET /{id}/resolve/{rev}/{file} (datasets: /datasets/{id}/resolve/...): X-Repo-Commit,
  ETag (the git blob id, or the sha256 for an LFS file, with X-Linked-Etag/X-Linked-Size),
  Content-Length, and Range requests (206);
- the Hub's error codes: 401 + X-Error-Code RepoNotFound / GatedRepo, 404 + RevisionNotFound or
  EntryNotFound.
Misbehaviours a test switches on: a file served altered, a body cut off once mid-way, a file
that fails with 500. Every request is logged (method, path, Range) for the test to read.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".parquet", ".pt")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    kind: str  # "model" or "dataset"
    repo_id: str
    files: dict[str, bytes]
    commit: str = ""
    revisions: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    unstated: set[str] = field(default_factory=set)  # listed with no size, blob id or LFS hash

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1(usedforsecurity=False)
            for name in sorted(self.files):
                digest.update(name.encode() + b"\0" + self.files[name])
            self.commit = digest.hexdigest()
        self.revisions.setdefault("main", self.commit)
        self.revisions.setdefault(self.commit, self.commit)

    def is_lfs(self, name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def etag(self, name: str) -> str:
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(name) else git_blob_id(data)

    def sibling(self, name: str) -> dict[str, object]:
        data = self.files[name]
        if name in self.unstated:  # a mirror that lists the file and nothing about it
            return {"rfilename": name}
        entry: dict[str, object] = {
            "rfilename": name,
            "size": len(data),
            "blobId": git_blob_id(data),
        }
        if self.is_lfs(name):
            entry["blobId"] = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()
            entry["lfs"] = {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "pointerSize": 134,
            }
        return entry


class FakeHub:
    """Start with `with FakeHub() as hub:`; `hub.url` is the HF_ENDPOINT."""

    def __init__(self, token: str = "hf_secret_token_for_tests") -> None:  # noqa: S107 - test data
        self.token = token
        self.repos: dict[tuple[str, str], Repo] = {}
        self.log: list[tuple[str, str, str]] = []
        self.altered: set[str] = set()  # file names served with one byte changed
        self.cut_once: set[str] = set()  # file names whose first GET stops at 7/8
        self.failing: set[str] = set()  # file names that answer 500
        self.auth_seen: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    def add(self, repo: Repo) -> Repo:
        self.repos[(repo.kind, repo.repo_id)] = repo
        return repo

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, head=True)

            def do_GET(self) -> None:
                hub._serve(self, head=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def requests(self, method: str, suffix: str) -> list[tuple[str, str, str]]:
        return [r for r in self.log if r[0] == method and r[1].endswith(suffix)]

    # -- serving ---------------------------------------------------------------------------------

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _find(self, h: BaseHTTPRequestHandler, kind: str, repo_id: str) -> Repo | None:
        repo = self.repos.get((kind, repo_id))
        auth = h.headers.get("Authorization", "")
        self.auth_seen.append(auth)
        if repo is None:
            self._error(h, 401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and auth != f"Bearer {self.token}":
            self._error(h, 401, "GatedRepo", f"Access to {kind} {repo_id} is restricted")
            return None
        return repo

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        self.log.append((h.command, path, h.headers.get("Range", "")))
        parts = path.strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) >= 6 and parts[-2] == "revision":
            kind = {"models": "model", "datasets": "dataset"}.get(parts[1], "")
            repo = self._find(h, kind, "/".join(parts[2:-2]))
            if repo is not None:
                self._info(h, repo, parts[-1])
            return
        kind = "model"
        if parts[:1] == ["datasets"]:
            kind, parts = "dataset", parts[1:]
        if "resolve" not in parts:
            self._error(h, 404, "EntryNotFound", f"no such endpoint {path}")
            return
        i = parts.index("resolve")
        repo = self._find(h, kind, "/".join(parts[:i]))
        if repo is not None:
            self._file(h, repo, parts[i + 1], "/".join(parts[i + 2 :]), head)

    def _info(self, h: BaseHTTPRequestHandler, repo: Repo, revision: str) -> None:
        commit = repo.revisions.get(revision)
        if commit is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        doc = {
            "id": repo.repo_id,
            "_id": repo.repo_id,
            "sha": commit,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "siblings": [repo.sibling(n) for n in sorted(repo.files)],
        }
        body = json.dumps(doc).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _file(
        self, h: BaseHTTPRequestHandler, repo: Repo, revision: str, name: str, head: bool
    ) -> None:
        commit = repo.revisions.get(revision)
        if commit is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        if name not in repo.files:
            self._error(h, 404, "EntryNotFound", f"{name} does not exist")
            return
        if name in self.failing and not head:
            self._error(h, 500, "", "Internal Error")
            return
        data = repo.files[name]
        if name in self.altered:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        wanted = h.headers.get("Range", "")
        if wanted.startswith("bytes=") and not head:
            start = int(wanted[6:].split("-")[0])
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", commit)
        if repo.is_lfs(name):
            h.send_header("X-Linked-Etag", f'"{repo.etag(name)}"')
            h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("ETag", f'"{repo.etag(name)}"')
        h.send_header("Accept-Ranges", "bytes")
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(data) - start))
        h.end_headers()
        if head:
            return
        body = data[start:]
        if name in self.cut_once:
            self.cut_once.discard(name)
            h.wfile.write(body[: len(body) * 7 // 8])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(body)


# -- a tiny real model and a tiny gsm8k-shaped dataset ---------------------------------------------


def safetensors_bytes(tensors: dict[str, tuple[list[int], list[float]]]) -> bytes:
    """The safetensors format by hand: 8-byte little-endian header length, JSON header, data."""
    import struct

    header: dict[str, object] = {}
    blob = b""
    for name, (shape, values) in tensors.items():
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [len(blob), len(blob) + len(data)],
        }
        blob += data
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + blob


def tiny_model(weights: int = 48) -> dict[str, bytes]:
    """config.json (gpt2, one layer), a WordLevel tokenizer saved by `tokenizers`, weights in
    safetensors, and a duplicate .bin that the default rule must skip."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "[PAD]": 1, "1": 2, "+": 3, "=": 4, "2": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))  # noqa: S106 - not a password
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    config = {
        "model_type": "gpt2",
        "vocab_size": 6,
        "n_positions": 16,
        "n_embd": 8,
        "n_layer": 1,
        "n_head": 2,
    }
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
        "pad_token": "[PAD]",
    }
    return {
        "config.json": json.dumps(config).encode(),
        "tokenizer.json": tok.to_str().encode(),
        "tokenizer_config.json": json.dumps(tok_config).encode(),
        "model.safetensors": safetensors_bytes(
            {"wte.weight": ([weights // 8, 8], [0.25] * weights)}
        ),
        "pytorch_model.bin": b"a duplicate weight format the default rule skips",
    }


GSM8K_TRAIN = [
    {"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"},
    {"question": "What is 10 times 100?", "answer": "10 * 100 = 1000\n#### 1,000"},
]
GSM8K_TEST = [{"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}]


def parquet_bytes(rows: list[dict[str, object]]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def tiny_gsm8k() -> dict[str, bytes]:
    """The layout of openai/gsm8k on the Hub: main/{train,test}-00000-of-00001.parquet."""
    return {
        "README.md": b"# a tiny gsm8k\n",
        "main/train-00000-of-00001.parquet": parquet_bytes(GSM8K_TRAIN),  # type: ignore[arg-type]
        "main/test-00000-of-00001.parquet": parquet_bytes(GSM8K_TEST),  # type: ignore[arg-type]
    }
