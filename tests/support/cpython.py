"""An install_only-shaped CPython archive made from a CPython on this machine, as a fake
python-build-standalone release serves it (python/bin/python3.X, python/lib, python/include).

pyenv's builds link a shared libpython found through an absolute RUNPATH: a moved copy would
quietly load the original's library. The copy's RUNPATHs are rewritten in place to $ORIGIN
(the new string is shorter; the rest of the old one becomes NULs), so it runs from anywhere,
which `runs_moved` proves with the original hidden behind an empty bind mount."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

from support.pkgindex import Server
from support.shared import Value, once
from verl_bundle.interpreter import find_python

if TYPE_CHECKING:
    from conftest import Stack

    from support.stack import StackDirs

# Not needed to create a venv and install wheels into it; they make up most of the stdlib.
DROPPED = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",  # the installer bootstraps pip from the bundle's own wheel
    "lib2to3",
    "pydoc_data",
    "__pycache__",
    "tests",
}
RELEASE = "20240101"


@dataclass(frozen=True)
class Archive:
    path: Path
    filename: str
    version: str  # "3.10.13"
    original: Path  # the installation it was copied from (to hide in the proof)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def archive_name(version: str, arch: str = "x86_64", libc: str = "gnu") -> str:
    return f"cpython-{version}+{RELEASE}-{arch}-unknown-linux-{libc}-install_only.tar.gz"


def _relocate(path: Path, old: bytes, tree: Path) -> None:
    """Point an ELF file's RUNPATH at python/lib relative to itself ($ORIGIN)."""
    data = path.read_bytes()
    if old + b"\0" not in data:
        return
    rel = os.path.relpath(tree / "lib", path.parent)
    new = f"$ORIGIN/{rel}".encode() if rel != "." else b"$ORIGIN"
    assert len(new) <= len(old), (new, old)
    path.write_bytes(data.replace(old + b"\0", new + b"\0" * (len(old) - len(new) + 1)))


def build_install_only(dest: Path, minor: str = "3.10") -> Archive:
    """The archive for this machine's CPython `minor` (pyenv's), relocatable and small."""
    py = find_python(minor)
    assert py is not None, f"no Python {minor} here"
    original = Path(py).resolve().parents[1]
    version = subprocess.run(
        [py, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = dest / "tree" / "python"
    (tree / "bin").mkdir(parents=True)
    shutil.copy2(original / "bin" / f"python{minor}", tree / "bin" / f"python{minor}")
    (tree / "bin" / "python3").symlink_to(f"python{minor}")
    (tree / "lib").mkdir()
    for lib in (original / "lib").glob(f"libpython{minor}*.so*"):
        shutil.copy2(lib, tree / "lib" / lib.name, follow_symlinks=True)

    def ignore(folder: str, names: list[str]) -> set[str]:
        dropped = {n for n in names if n in DROPPED or n.startswith("config-")}
        if Path(folder).name == "site-packages":
            dropped |= set(names)
        return dropped

    shutil.copytree(
        original / "lib" / f"python{minor}", tree / "lib" / f"python{minor}", ignore=ignore
    )
    shutil.copytree(original / "include", tree / "include")
    old = str(original / "lib").encode()
    elf = [
        p
        for p in tree.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and (p.suffix == ".so" or ".so." in p.name or p.parent.name == "bin")
    ]
    if shutil.which("strip"):  # debug symbols are most of libpython's size
        subprocess.run(["strip", "--strip-debug", *map(str, elf)], check=True)
    for path in elf:
        _relocate(path, old, tree)
    filename = archive_name(version)
    out = dest / filename
    with tarfile.open(out, "w:gz", compresslevel=1) as tf:
        tf.add(tree, arcname="python")
    shutil.rmtree(dest / "tree")
    return Archive(out, filename, version, original)


def runs_moved(
    archive: Path, where: Path, original: Path, code: str
) -> subprocess.CompletedProcess[str]:
    """Unpack `archive` at `where` and run `code` with its python while the original
    installation is hidden behind an empty directory (a private mount namespace)."""
    where.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tf:
        tf.extractall(where, filter="tar")
    empty = where / "empty"
    empty.mkdir()
    python = next((where / "python" / "bin").glob("python3.*"))
    script = 'mount --bind "$1" "$2" && exec "$3" -I -c "$4"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(empty), str(original), str(python), code],
        capture_output=True,
        text=True,
        timeout=120,
    )


def patched(
    archive: Archive,
    dest: Path,
    filename: str,
    old: bytes,
    new: bytes,
    *,
    offset: int | None = None,
) -> Path:
    """A copy of `archive` named `filename` whose python binary has `old` replaced by `new`
    (padded with NULs), or the byte at `offset` set to new[0]: a build for another machine
    or libc, shaped like the real thing."""
    work = dest / f"patch-{filename}"
    with tarfile.open(archive.path) as tf:
        tf.extractall(work, filter="tar")
    binary = next((work / "python" / "bin").glob("python3.*"))
    data = bytearray(binary.read_bytes())
    if offset is not None:
        data[offset] = new[0]
    else:
        assert old in data
        start = data.index(old)
        data[start : start + len(old)] = new + b"\0" * (len(old) - len(new))
    binary.write_bytes(bytes(data))
    out = dest / filename
    with tarfile.open(out, "w:gz", compresslevel=1) as tf:
        tf.add(work / "python", arcname="python")
    shutil.rmtree(work)
    return out


# -- the fake release host and a bundle that carries the interpreter ------------------------

ROOT = Path(__file__).resolve().parents[2]
# glibc of this machine's CPython (2.35 for Debian 12's): the target must promise as much.
PLATFORM = "manylinux_2_36_x86_64"


def publish(root: Path, *archives: Path) -> Path:
    """Lay archives out as a python-build-standalone release: RELEASE/FILE and RELEASE/SHA256SUMS."""
    release = root / RELEASE
    release.mkdir(parents=True, exist_ok=True)
    for a in archives:
        shutil.copy2(a, release / a.name)
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
        for p in sorted(release.glob("*.tar.gz"))
    ]
    (release / "SHA256SUMS").write_text("".join(lines))
    return root


def python_profile(dest: Path, version: str, extra: str = "bundled = true\n") -> Path:
    """cu118-legacy with an [interpreter] table naming the fake release."""
    text = (ROOT / "profiles" / "cu118-legacy.toml").read_text()
    text = text.replace('name = "cu118-legacy"', 'name = "cu118-py"')
    table = f'\n[interpreter]\nrelease = "{RELEASE}"\nversions = {{ "3.10" = "{version}" }}\n'
    path = dest / "cu118-py.toml"
    dest.mkdir(parents=True, exist_ok=True)
    path.write_text(text + table + extra)
    return path


class PythonBundle(NamedTuple):
    """The bundle that carries the interpreter: its tarball, its extracted directory, the build's
    JSON, and the release host's URL it was built from (its `--mirror`)."""

    tarball: Path
    root: Path
    doc: dict[str, object]
    release_url: str


@pytest.fixture(scope="session")
def cpython_archive(tmp_path_factory: pytest.TempPathFactory) -> Archive:
    """Built once a run (support/shared.py): a few seconds and about 9 MB. Read-only."""
    if find_python("3.10") is None:
        pytest.skip("no Python 3.10 on this machine (pyenv install 3.10)")

    def build(where: Path) -> Value:
        archive = build_install_only(where)
        return {k: str(v) for k, v in vars(archive).items()}

    doc = once(tmp_path_factory, "cpython", build)
    assert isinstance(doc, dict)
    return Archive(
        Path(str(doc["path"])),
        str(doc["filename"]),
        str(doc["version"]),
        Path(str(doc["original"])),
    )


@contextlib.contextmanager
def releases(root: Path, archive: Archive) -> Iterator[Server]:
    """A fake python-build-standalone release host over `archive`, published in `root`."""
    server = Server(publish(root, archive.path)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def release_host(
    cpython_archive: Archive, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """This worker's release host (its request log is its own)."""
    with releases(tmp_path_factory.mktemp("releases"), cpython_archive) as server:
        yield server


@pytest.fixture(scope="session")
def python_bundle(
    stack_dirs: StackDirs, cpython_archive: Archive, tmp_path_factory: pytest.TempPathFactory
) -> PythonBundle:
    """One bundle that carries the interpreter, built once a run from servers of its own (its
    release host's URL kept with it). Read-only."""
    from conftest import build_bundle, shared_build

    def build(stack: Stack, tmp: Path) -> Value:
        profile = python_profile(tmp, cpython_archive.version)
        with releases(tmp / "releases", cpython_archive) as host:
            doc = build_bundle(
                stack,
                tmp / "out",
                tmp / "cache",
                "--profile",
                str(profile),
                "--platform",
                PLATFORM,
                "--mirror",
                f"python-build-standalone={host.url}",
            )
        tarball = Path(str(doc["bundle"]))
        with tarfile.open(tarball) as tf:
            tf.extractall(tmp / "x", filter="data")
            top = tf.getmembers()[0].name.split("/")[0]
        return {"doc": doc, "root": str(tmp / "x" / top), "release_url": host.url}

    built = shared_build(tmp_path_factory, "pybundle", build)
    assert isinstance(built, dict) and isinstance(built["doc"], dict)
    doc = built["doc"]
    return PythonBundle(
        Path(str(doc["bundle"])), Path(str(built["root"])), doc, str(built["release_url"])
    )
