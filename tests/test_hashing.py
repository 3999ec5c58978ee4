"""The one sha256 helper (airgap/contract/hashing.py), used by the host's fetch stage and the server."""

from __future__ import annotations

import hashlib
import io
import subprocess
from pathlib import Path

import pytest

from verl_bundle.airgap.contract.hashing import (
    HashingReader,
    StreamHash,
    sha256_bytes,
    sha256_file,
    update_from,
)

PY38 = Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python3.8"
ROOT = Path(__file__).resolve().parents[1]


def _data(n: int) -> bytes:
    return (bytes(range(251)) * (n // 251 + 1))[:n]


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, (1 << 20) + 5])
def test_sha256_file_matches_hashlib_across_chunk_edges(tmp_path: Path, size: int) -> None:
    data = _data(size)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert sha256_file(str(path), chunk=4096) == hashlib.sha256(data).hexdigest()
    assert sha256_bytes(data) == hashlib.sha256(data).hexdigest()


def test_stream_hash_counts_and_resets() -> None:
    s = StreamHash()
    s.update_all([b"abc", b"def"])
    assert (s.size, s.hexdigest()) == (6, hashlib.sha256(b"abcdef").hexdigest())
    s.reset()
    s.update(b"xyz")
    assert (s.size, s.hexdigest()) == (3, hashlib.sha256(b"xyz").hexdigest())


def test_hashing_reader_hashes_what_is_read_and_drain_sees_non_padding() -> None:
    body = _data(3000)
    reader = HashingReader(io.BytesIO(body + b"\0" * 1024))
    assert reader.read(1000) == body[:1000]
    assert reader.drain(chunk=512) is True  # the rest of body is not zero padding
    assert reader.size == len(body) + 1024
    assert reader.hexdigest() == hashlib.sha256(body + b"\0" * 1024).hexdigest()
    padded = HashingReader(io.BytesIO(b"\0" * 2048))
    assert padded.drain() is False


def test_update_from_returns_bytes_read() -> None:
    h = hashlib.sha256()
    assert update_from(h, io.BytesIO(b"x" * 10), chunk=3) == 10
    assert h.hexdigest() == hashlib.sha256(b"x" * 10).hexdigest()


@pytest.mark.skipif(not PY38.exists(), reason="needs a Python 3.8 under ~/.pyenv")
def test_runs_on_python_38(tmp_path: Path) -> None:
    """The server copy travels in the bundle and runs on the server's python3 (3.8+)."""
    path = tmp_path / "f.bin"
    path.write_bytes(_data(5000))
    code = "import sys; from verl_bundle.airgap.contract.hashing import sha256_file; print(sha256_file(sys.argv[1]))"
    out = subprocess.run(
        [
            str(PY38),
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == hashlib.sha256(_data(5000)).hexdigest()
