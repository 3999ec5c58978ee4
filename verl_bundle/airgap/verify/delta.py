"""A delta bundle (build --base OLD), both sides of it: which payload files a delta leaves to its
base, and how the server finds each of them in the old bundle's directory.

One rule, so that the host never leaves out a file the server cannot find: a payload file is
left to the base when the base's manifest lists a file of the same name with the same sha256
and size, which is what `install.sh --base OLD_DIR` looks for (at the same bundle path, else by
that name up to DEPTH folders down: the extracted old bundle, or a directory of its wheels) and
checks, byte for byte, before anything is placed. Files the manifest lists under
`delta.omitted` are not in the delta's tarball, so every verify takes them as left to the base,
not as missing. Standard library only, Python 3.8+ (the host's plan calls it too).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Sequence, Tuple

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import CHUNK

DEPTH = 3  # how deep OLD_DIR is searched for a file by its name
SKIPPED = ("lib", "__pycache__")  # never searched in OLD_DIR: the old server program
Payload = Tuple[str, str, int]  # (bundle path, sha256, size) of a file the delta would carry


def _filename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def left_to_base(base: Iterable[mf.File], payload: Iterable[Payload]) -> list[str]:
    """The bundle paths of `payload` that a delta over the base whose manifest lists `base`
    leaves out: the same file name, sha256 and size (see the module's docstring)."""
    have = {(f.filename, f.sha256, f.size) for f in base}
    return [path for path, sha256, size in payload if (_filename(path), sha256, size) in have]


def left_out(m: mf.Manifest) -> frozenset[str]:
    """The bundle paths a delta's tarball does not hold (none for a full bundle): a verify of
    the delta alone must not call them missing."""
    return frozenset(f.path for f in m.omitted_files())


def index(base_dir: str) -> dict[str, list[str]]:
    """File name -> paths under OLD_DIR, at most DEPTH folders down (a wheel directory, or an
    extracted bundle with its wheels/, sources/, bootstrap/)."""
    found: dict[str, list[str]] = {}
    top = os.path.abspath(base_dir)
    for folder, dirs, files in os.walk(top):
        rel = os.path.relpath(folder, top)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        keep = [] if depth >= DEPTH else [d for d in dirs if d not in SKIPPED]
        dirs[:] = keep
        for name in files:
            found.setdefault(name, []).append(os.path.join(folder, name))
    return found


def _candidates(f: mf.File, root: str, names: dict[str, list[str]]) -> list[str]:
    same = os.path.join(root, *f.path.split("/"))
    out = [same] if os.path.isfile(same) else []
    return out + [p for p in names.get(f.filename, []) if p != same]


def _open_exact(path: str, size: int) -> int:
    """A read descriptor of `path` when it is a regular file (not a link, a FIFO or a device)
    of exactly `size` bytes; OSError otherwise, before a byte is read (a FIFO or /dev/zero
    under a wheel's name never blocks or streams endlessly)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    if st.st_size != size:
        os.close(fd)
        raise OSError(errno.EINVAL, f"{st.st_size} bytes, not {size}")
    os.set_blocking(fd, True)
    return fd


def _hash_fd(fd: int, size: int) -> str:
    """sha256 of at most `size` bytes read from `fd` (closed)."""
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        left = size
        while left > 0:
            block = fh.read(min(CHUNK, left))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def _match(f: mf.File, paths: list[str]) -> tuple[str | None, str | None]:
    """(the first path whose bytes are f's, or None; a line on a damaged one)."""
    damaged = None
    for path in paths:
        try:
            fd = _open_exact(path, f.size)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                damaged = f"{path}: a symbolic link, not the file itself"
            elif exc.errno == errno.EINVAL:
                damaged = f"{path}: {exc.strerror} (a regular file of {f.size} bytes is needed)"
            else:
                damaged = f"{path}: cannot read it ({exc.strerror or exc})"
            continue
        try:
            got = _hash_fd(fd, f.size)
        except OSError as exc:
            damaged = f"{path}: cannot read it ({exc.strerror or exc})"
            continue
        if got == f.sha256:
            return path, None
        damaged = f"{path} has sha256 {got}, not {f.sha256}"
    return None, damaged


def find(needed: Sequence[mf.File], base_dir: str) -> tuple[list[tuple[mf.File, str]], list[str]]:
    """Each file of `needed` found in OLD_DIR and checked against its sha256 and size (on a few
    threads: they are whole wheels): ([(file, where it is)], [a problem per file found in no
    place, or damaged there])."""
    old_root = mf.find_root(base_dir)
    names = index(base_dir)
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda f: _match(f, _candidates(f, old_root, names)), needed))
    found, problems = [], []
    for f, (source, damaged) in zip(needed, results):
        if source is not None:
            found.append((f, source))
        elif damaged is not None:
            problems.append(f"{f.path} (damaged in the base: {damaged})")
        else:
            problems.append(f.path)
    return found, problems
