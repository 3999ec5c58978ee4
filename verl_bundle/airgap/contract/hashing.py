"""sha256 of files and streams, one helper for the online host and the server.

Standard library only (it travels in every bundle). Reads are large (1 MiB) because hashlib
releases the GIL on big buffers, so several files hash in parallel on several cores.
"""

from __future__ import annotations

import hashlib
from typing import IO, Iterable

CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes in memory."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: object, chunk: int = CHUNK) -> str:
    """Hex sha256 of a file's content, read in large chunks (`path` is a str or os.PathLike)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:  # type: ignore[call-overload]
        update_from(digest, fh, chunk)
    return digest.hexdigest()


def update_from(digest: hashlib._Hash, fh: IO[bytes], chunk: int = CHUNK) -> int:
    """Feed everything left in `fh` to `digest`; returns the number of bytes read."""
    total = 0
    while True:
        data = fh.read(chunk)
        if not data:
            return total
        digest.update(data)
        total += len(data)


class StreamHash:
    """sha256 and length of bytes seen so far, for data that arrives in pieces (a download, a
    tar member); `reset` starts over (a server that ignored a Range request)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0

    def update(self, data: bytes) -> None:
        self.digest.update(data)
        self.size += len(data)

    def update_all(self, chunks: Iterable[bytes]) -> None:
        for data in chunks:
            self.update(data)

    def reset(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


class HashingReader:
    """Wraps a binary file: every byte read through it is hashed and counted, so a file is
    hashed in the same pass that copies or parses it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.stream = StreamHash()

    @property
    def size(self) -> int:
        return self.stream.size

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.stream.update(data)
        return data

    def hexdigest(self) -> str:
        return self.stream.hexdigest()

    def drain(self, chunk: int = CHUNK) -> bool:
        """Read to the end; True when anything but zero padding was left unread."""
        leftover = False
        while True:
            data = self.read(chunk)
            if not data:
                return leftover
            leftover = leftover or data.strip(b"\0") != b""
