"""The bundled interpreter (`build --with-python`): python-build-standalone's `install_only`
CPython for the target, fetched with its hash like every other file, and checked before it
enters a bundle to be the target's Python X.Y, architecture and libc, to need no newer glibc
than the target's platform tag promises, and to unpack safely (nothing outside python/).

Its location is a profile location like any other, so `--mirror python-build-standalone=URL`
points it at an intranet copy of the release."""

from __future__ import annotations

import posixpath
import re
import struct
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.credentials import split_credentials
from verl_bundle.errors import BundleError, ProfileError
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import classify, shown_url, status_error
from verl_bundle.profile.model import Profile
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter

# python-build-standalone's *-unknown-linux-gnu builds need glibc 2.17 (docs/running.rst,
# "Runtime Requirements"); the archive's own symbol versions are read as well.
GLIBC_FLOOR = (2, 17)
_NAME = re.compile(
    r"^cpython-(?P<version>3\.(?P<minor>\d+)\.\d+)\+(?P<release>[0-9A-Za-z.]+)-"
    r"(?P<arch>[a-z0-9_]+)-unknown-linux-(?P<libc>gnu|musl)[a-z]*-install_only"
    r"(?:_stripped)?\.tar\.gz$"
)
_MACHINES = {62: "x86_64", 183: "aarch64", 3: "i686", 21: "ppc64le", 22: "s390x"}
_GLIBC = re.compile(rb"GLIBC_2\.(\d+)")
PT_INTERP = 3


class InterpreterError(BundleError):
    """The bundled CPython does not fit the bundle, or cannot be had; one line."""


@dataclass(frozen=True)
class BundledPython:
    """The interpreter archive as it goes into the bundle: the cached file and its entry."""

    source: Path  # in the cache
    entry: mf.Interpreter  # as the manifest lists it (its path inside the bundle)
    unpacked: int = 0  # bytes once unpacked on the server


@dataclass(frozen=True)
class ArchiveFacts:
    """What the archive holds, read without running anything from it."""

    python: str  # "3.10", from python/bin/pythonX.Y
    arch: str  # the ELF machine of that binary
    libc: str  # "gnu" (dynamic, ld-linux) or "musl" (ld-musl, or a static binary)
    glibc: tuple[int, int] | None  # the newest GLIBC_2.x symbol version it needs
    unpacked: int  # bytes once unpacked


def fetch_interpreter(
    profile: Profile, target: Target, downloader: Downloader, reporter: Reporter
) -> BundledPython:
    """The target's CPython from the profile's interpreter location, hash checked and
    inspected; InterpreterError (one line) when it cannot be had or does not fit."""
    source = profile.interpreter
    version = source.versions.get(target.python_version)
    if version is None:
        raise ProfileError(
            f"{profile.path}: [interpreter] release {source.release} has no CPython "
            f"{target.python_version} listed (versions: {', '.join(sorted(source.versions))}); "
            f'add versions = {{ "{target.python_version}" = "{target.python_version}.Z" }}'
        )
    glibc = target.glibc
    if glibc is not None and glibc < GLIBC_FLOOR:
        raise InterpreterError(
            f"--with-python: python-build-standalone's CPython needs glibc "
            f"{GLIBC_FLOOR[0]}.{GLIBC_FLOOR[1]}, but the target {target.platform} promises only "
            f"{glibc[0]}.{glibc[1]}; build for manylinux_2_17 or newer, or --no-with-python"
        )
    path = source.path_for(version, target.arch)
    try:
        filename = plain_filename(path.rsplit("/", 1)[-1], "[interpreter] file")
    except UnsafeNameError as exc:
        raise ProfileError(f"{profile.path}: {exc}") from None
    check_name(filename, target)
    loc = profile.location(source.location)
    base = split_credentials(loc.url or "")[0]
    url = f"{base}/{path}"
    where = f"the bundled CPython {filename} (location {source.location})"
    sha256 = source.sha256.get(filename) or _published_sha256(
        downloader, base, source.sums.format(release=source.release), filename, where
    )
    reporter.status(f"fetching CPython {version} ({filename}) ...")
    got = downloader.fetch(Want("python", filename, url, source.location, sha256, None))
    facts = inspect_archive(got.path, filename)
    check_fits(facts, filename, target)
    entry = mf.Interpreter(
        path=f"{mf.INTERPRETER}/{filename}",
        version=version,
        sha256=got.sha256,
        size=got.size,
        arch=facts.arch,
        libc=facts.libc,
        release=source.release,
        location=source.location,
        url=url,
    )
    return BundledPython(got.path, entry, facts.unpacked)


def check_name(filename: str, target: Target) -> None:
    """The archive's file name says the target's Python X.Y, architecture and glibc."""
    m = _NAME.match(filename)
    if m is None:
        raise InterpreterError(
            f"--with-python: {filename} is not a python-build-standalone install_only archive "
            "(cpython-X.Y.Z+RELEASE-ARCH-unknown-linux-gnu-install_only.tar.gz)"
        )
    fits = (
        f"3.{m['minor']}" == target.python_version
        and m["arch"] == target.arch
        and m["libc"] == "gnu"
    )
    if not fits:
        raise InterpreterError(
            f"--with-python: {filename} is CPython 3.{m['minor']} for {m['arch']}-linux-"
            f"{m['libc']}, but the bundle is for {target.python_tag} on {target.platform} "
            f"({target.arch}, glibc); fix the profile's [interpreter] or the mirror"
        )


def check_fits(facts: ArchiveFacts, filename: str, target: Target) -> None:
    """What the archive holds matches the target: X.Y, ELF machine, glibc (never musl)."""
    wrong = []
    if facts.python != target.python_version:
        wrong.append(f"it holds Python {facts.python}, not {target.python_version}")
    if facts.arch != target.arch:
        wrong.append(f"its python is built for {facts.arch}, not {target.arch}")
    if facts.libc != "gnu":
        wrong.append("its python is linked against musl (or static), not glibc")
    glibc = target.glibc
    if facts.glibc is not None and glibc is not None and facts.glibc > glibc:
        wrong.append(
            f"it needs glibc {facts.glibc[0]}.{facts.glibc[1]}, newer than the "
            f"{glibc[0]}.{glibc[1]} of {target.platform}"
        )
    if wrong:
        raise InterpreterError(
            f"--with-python: {filename} does not fit the bundle: {'; '.join(wrong)}. Use the "
            f"archive for {target.python_tag} {target.arch}-unknown-linux-gnu, or --no-with-python"
        )


def inspect_archive(path: Path, filename: str) -> ArchiveFacts:
    """Read the archive: every member under python/ (no absolute path, no `..`, no link that
    leaves it, no device), python/bin/pythonX.Y an ELF binary, the headers and venv there."""
    try:
        with tarfile.open(path, "r:gz") as tf:
            members = {m.name.rstrip("/"): m for m in tf.getmembers()}
            for m in members.values():
                _check_member(m, filename)
            binaries = [
                n for n in members if re.fullmatch(r"python/bin/python3\.\d+", n) is not None
            ]
            if len(binaries) != 1:
                raise InterpreterError(
                    f"--with-python: {filename} has no python/bin/python3.X (found "
                    f"{len(binaries)}); it is not an install_only archive"
                )
            python = binaries[0].rsplit("python", 1)[-1]
            for needed in (
                f"python/include/python{python}/Python.h",
                f"python/lib/python{python}/venv/__init__.py",
            ):
                if needed not in members:
                    raise InterpreterError(f"--with-python: {filename} has no {needed}")
            binary = _read(tf, members, binaries[0], filename)
            arch, libc = _elf(binary, filename)
            needs = [binary] + [
                _read(tf, members, n, filename)
                for n in members
                if re.fullmatch(r"python/lib/libpython3[^/]*\.so[.0-9]*", n) and members[n].isfile()
            ]
            found = [g for g in map(_glibc, needs) if g is not None]
            glibc = max(found) if found else None
            unpacked = sum(m.size for m in members.values() if m.isfile())
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise InterpreterError(
            f"--with-python: {filename} is not a readable .tar.gz: {exc}"
        ) from None
    return ArchiveFacts(python, arch, libc, glibc, unpacked)


def _check_member(m: tarfile.TarInfo, filename: str) -> None:
    name = PurePosixPath(m.name)
    bad = ""
    if name.is_absolute() or ".." in name.parts or name.parts[:1] != ("python",):
        bad = "lies outside python/"
    elif m.isdev() or m.isfifo():
        bad = "is a device or a pipe"
    elif m.issym() or m.islnk():
        # A hard link names an archive member; a symbolic one is relative to its directory.
        here = "" if m.islnk() else posixpath.dirname(m.name)
        resolved = posixpath.normpath(posixpath.join(here, m.linkname))
        if posixpath.isabs(m.linkname) or resolved.split("/")[0] != "python":
            bad = f"links to {m.linkname}, outside python/"
    if bad:
        raise InterpreterError(f"--with-python: {filename}: member {m.name!r} {bad}; refused")


def _read(
    tf: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str, filename: str
) -> bytes:
    """A member's bytes, following symbolic links inside the archive (a few hops)."""
    for _ in range(8):
        m = members.get(name)
        if m is None:
            break
        if m.issym():
            name = str(PurePosixPath(name).parent / m.linkname)
            continue
        handle = tf.extractfile(m)
        if handle is None:
            break
        return handle.read()
    raise InterpreterError(f"--with-python: {filename}: {name} is missing or a broken link")


def _elf(data: bytes, filename: str) -> tuple[str, str]:
    """(machine, libc) of an ELF executable: glibc when its interpreter is ld-linux, musl
    when it is ld-musl or when the binary is static (python-build-standalone's musl builds)."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise InterpreterError(f"--with-python: {filename}: its python is not a 64-bit ELF binary")
    end = "<" if data[5] == 1 else ">"
    (machine,) = struct.unpack_from(end + "H", data, 18)
    (phoff,) = struct.unpack_from(end + "Q", data, 32)
    phentsize, phnum = struct.unpack_from(end + "HH", data, 54)
    interp = b""
    for i in range(phnum):
        at = phoff + i * phentsize
        (ptype,) = struct.unpack_from(end + "I", data, at)
        if ptype == PT_INTERP:
            (offset,) = struct.unpack_from(end + "Q", data, at + 8)
            (size,) = struct.unpack_from(end + "Q", data, at + 32)
            interp = data[offset : offset + size].rstrip(b"\0")
    libc = "gnu" if b"ld-linux" in interp else "musl"
    return _MACHINES.get(machine, f"machine {machine}"), libc


def _glibc(data: bytes) -> tuple[int, int] | None:
    minors = [int(m) for m in _GLIBC.findall(data)]
    return (2, max(minors)) if minors else None


def _published_sha256(
    downloader: Downloader, base: str, sums_path: str, filename: str, where: str
) -> str:
    """The archive's sha256 from the release's SHA256SUMS (`HASH  NAME` lines)."""
    import requests  # only when an interpreter's hash is fetched

    url = f"{base}/{sums_path}"
    try:
        resp = downloader.http.get(url)
    except requests.RequestException as exc:
        raise InterpreterError(classify(exc).message(f"{where}: {shown_url(url)}")) from None
    error = status_error(f"{where}: {shown_url(url)}", resp)
    if error is not None or resp.status_code != 200:
        raise InterpreterError(
            f"{where}: no hash for {filename}: {shown_url(url)} answered {resp.status_code}; "
            "pin it in the profile ([interpreter] sha256 = { FILE = HASH })"
        )
    for line in resp.text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*").rsplit("/", 1)[-1] == filename:
            digest = parts[0].lower()
            if re.fullmatch(r"[0-9a-f]{64}", digest):
                return digest
    raise InterpreterError(
        f"{where}: {shown_url(url)} lists no sha256 for {filename}; pin it in the profile "
        "([interpreter] sha256 = { FILE = HASH })"
    )
