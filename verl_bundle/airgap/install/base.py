"""Completing a delta bundle from its base (install.sh --base OLD_DIR).

A delta (build --base OLD) carries the new manifest, SHA256SUMS, lib/, install.sh and only the
files its base lacked; its manifest lists the others under `delta.omitted`. Before anything is
installed, each omitted file is found in OLD_DIR (the extracted old bundle, or a directory of
its wheels), checked against the sha256 the new manifest names, and linked (or copied, across
file systems) into the delta's directory under a hidden name, renamed when complete. The
directory is then the full bundle, and installs exactly as one. A file in neither place, or
damaged in OLD_DIR, stops it in one line before anything is linked.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.hashing import CHUNK
from verl_bundle.airgap.errors import DamagedError

DEPTH = 3  # how deep OLD_DIR is searched for a file by its name


class BaseError(DamagedError):
    """The delta cannot be completed from OLD_DIR (exit 3, as a file of the bundle that is
    missing or does not match); the message is one line."""


@dataclass(frozen=True)
class Taken:
    """A file of the delta taken from OLD_DIR: its bundle path and where it was found."""

    path: str
    source: str
    size: int


@dataclass(frozen=True)
class Completed:
    taken: tuple[Taken, ...]
    linked: int  # hard links; the rest were copied
    already: int  # present from an earlier run


def _names(base_dir: str) -> dict[str, list[str]]:
    """File name -> paths under OLD_DIR, at most DEPTH folders down (a wheel directory, or an
    extracted bundle with its wheels/, sources/, bootstrap/)."""
    found: dict[str, list[str]] = {}
    top = os.path.abspath(base_dir)
    for folder, dirs, files in os.walk(top):
        rel = os.path.relpath(folder, top)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        keep = [] if depth >= DEPTH else [d for d in dirs if d not in ("lib", "__pycache__")]
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


def plan(m: mf.Manifest, bundle_dir: str, base_dir: str) -> tuple[list[Taken], int]:
    """Where each omitted file comes from; BaseError naming every file missing from both (or
    damaged in OLD_DIR). Also (taken, how many are in the delta's directory already)."""
    root = mf.find_root(bundle_dir)
    if m.delta is None:
        return [], 0
    if not os.path.isdir(base_dir):
        raise BaseError(f"--base {base_dir}: no such directory (give the extracted old bundle)")
    needed = [f for f in m.omitted_files() if not _present(root, f)]
    already = len(m.omitted_files()) - len(needed)
    old_root = mf.find_root(base_dir)
    names = _names(base_dir)
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda f: _match(f, _candidates(f, old_root, names)), needed))
    taken, problems = [], []
    for f, (source, damaged) in zip(needed, results):
        if source is not None:
            taken.append(Taken(f.path, source, f.size))
        elif damaged is not None:
            problems.append(f"{f.path} (damaged in the base: {damaged})")
        else:
            problems.append(f.path)
    if problems:
        raise BaseError(
            f"{len(problems)} file(s) of this delta are in neither the delta nor {base_dir}: "
            f"{', '.join(problems)}; nothing was installed. Give --base the extracted "
            f"{m.delta.base} (or copy the full bundle)"
        )
    return taken, already


def _present(root: str, f: mf.File) -> bool:
    """Linked or copied by an earlier run (only complete files get the final name); the
    installer still checks its hash with every other file."""
    path = os.path.join(root, *f.path.split("/"))
    return os.path.isfile(path) and os.path.getsize(path) == f.size


def complete(m: mf.Manifest, bundle_dir: str, base_dir: str) -> Completed:
    """Take every file the delta omits from OLD_DIR into its directory (see the module's
    docstring); BaseError before anything is placed when one cannot be found."""
    taken, already = plan(m, bundle_dir, base_dir)
    return place(bundle_dir, taken, already)


def place(bundle_dir: str, taken: list[Taken], already: int) -> Completed:
    """Link (or copy, across file systems) each planned file into the delta's directory under
    a hidden name, renamed when complete (confined.Confined.link_in: no link there followed)."""
    root = mf.find_root(bundle_dir)
    linked = 0
    try:
        bundle = Confined(root)
    except OSError as exc:
        raise BaseError(f"cannot write into {root}: {exc.strerror or exc}") from None
    with bundle:
        for t in taken:
            try:
                linked += bundle.link_in(t.source, t.path)
            except OSError as exc:
                raise BaseError(
                    f"cannot place {t.path} from {t.source} into {root}: {exc.strerror or exc}"
                ) from None
    return Completed(tuple(taken), linked, already)
