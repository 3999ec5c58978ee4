"""The assemble stage: one tarball with wheels, sources, bootstrap, manifest, checksums and
install.sh, streamed from the cache (no second copy on disk), written under a temporary name and
renamed only when complete."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import queue
import shlex
import shutil
import subprocess
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import jinja2
from packaging.utils import canonicalize_name

from verl_bundle import __version__
from verl_bundle.airgap import layout
from verl_bundle.airgap import manifest as mf
from verl_bundle.errors import AssembleError
from verl_bundle.lock import Lock, dumps, group_by_phase
from verl_bundle.profile import Profile
from verl_bundle.profile import SourceBuild as ProfileSourceBuild
from verl_bundle.progress import Reporter
from verl_bundle.resources import airgap_dir, data_dir
from verl_bundle.target import Target
from verl_bundle.wheelhouse import Artifact, Wheelhouse

Compression = Literal["none", "gz", "zstd"]
SUFFIX: dict[str, str] = {"none": ".tar", "gz": ".tar.gz", "zstd": ".tar.zst"}
CHUNK = 1 << 20
# Files in a bundle get one fixed time, so that the same inputs give the same tarball.
MTIME = int(os.environ.get("SOURCE_DATE_EPOCH", "315619200"))  # 1980-01-02
EXECUTABLE = {layout.INSTALL, "doctor"}


@dataclass(frozen=True)
class Entry:
    """One file of the bundle: bytes made here, or a file streamed from the cache."""

    arcname: str
    sha256: str
    size: int
    data: bytes | None = None
    source: str | None = None


@dataclass(frozen=True)
class Bundle:
    name: str
    path: Path
    sha256: str
    size: int
    files: int
    payload_bytes: int


def bundle_name(lock: Lock) -> str:
    return f"verl-bundle-{lock.profile}-{lock.target.python_tag}-{lock.target.platform}"


def _entry(arcname: str, data: bytes) -> Entry:
    return Entry(arcname, hashlib.sha256(data).hexdigest(), len(data), data=data)


def _folder(a: Artifact) -> str:
    if a.package.role == "bootstrap":
        return layout.BOOTSTRAP
    if a.package.kind == "sdist":
        return layout.SOURCES
    return layout.WHEELS


def _installed_size(a: Artifact) -> int:
    """What the file takes once installed: a wheel's unpacked size; for an sdist built on the
    server, its unpacked size plus room for the build (an estimate)."""
    try:
        if a.filename.endswith(".whl"):
            with zipfile.ZipFile(a.path) as zf:
                return sum(i.file_size for i in zf.infolist())
        with tarfile.open(a.path) as tf:
            return sum(m.size for m in tf.getmembers()) * 4 + (2 << 30)
    except (OSError, zipfile.BadZipFile, tarfile.TarError):
        return a.size * 3


def _requirements(
    lock: Lock, profile: Profile, by_name: dict[str, Artifact]
) -> list[tuple[str, str, list[Artifact]]]:
    """(phase, requirements file, artifacts) per install phase, in profile order."""
    order = [p.name for p in profile.phases]
    out = []
    for i, (phase, members) in enumerate(group_by_phase(lock, order), start=1):
        out.append(
            (
                phase,
                f"{layout.REQUIREMENTS}/{i:02d}-{phase}.txt",
                [by_name[m.name] for m in members],
            )
        )
    return out


def _requirement_line(a: Artifact) -> str:
    # The version is the one in the file name (a local label such as +cu118 included), so that
    # pip matches exactly this file among --find-links.
    return f"{a.package.name}=={_file_version(a)} --hash=sha256:{a.sha256}"


def _file_version(a: Artifact) -> str:
    from packaging.utils import parse_sdist_filename, parse_wheel_filename

    if a.filename.endswith(".whl"):
        return str(parse_wheel_filename(a.filename)[1])
    return str(parse_sdist_filename(a.filename)[1])


def render_install(context: dict[str, Any], template: str = "install.sh.j2") -> str:
    # A shell script, not HTML: values are quoted for the shell with the `sh` filter instead.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    return env.get_template(template).render(**context)


def _airgap_entries() -> list[Entry]:
    """The standard-library server code (modules, subpackages and their data files), as
    lib/verl_bundle/airgap/..."""
    entries = [_entry(f"{layout.LIB}/verl_bundle/__init__.py", b'"""verl-bundle server side."""\n')]
    root = airgap_dir()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and path.suffix in (".py", ".json") and "__pycache__" not in rel:
            entries.append(_entry(f"{layout.LIB}/verl_bundle/airgap/{rel}", path.read_bytes()))
    return entries


def plan(
    profile: Profile, lock: Lock, wheelhouse: Wheelhouse
) -> tuple[str, list[Entry], mf.Manifest]:
    """Everything the bundle will hold, with hashes, before a byte of the tar is written."""
    name = bundle_name(lock)
    by_name = {a.package.name: a for a in wheelhouse.artifacts}
    ordered = sorted(wheelhouse.artifacts, key=lambda a: (_folder(a), a.filename))
    payload = [
        Entry(f"{_folder(a)}/{a.filename}", a.sha256, a.size, source=a.path) for a in ordered
    ]
    generated: list[Entry] = []
    phases: list[mf.Phase] = []
    for phase, req_path, members in _requirements(lock, profile, by_name):
        text = "".join(_requirement_line(a) + "\n" for a in members)
        generated.append(_entry(req_path, text.encode()))
        builds = []
        for a in members:
            build = profile.source_build(a.package.name) if a.package.kind == "sdist" else None
            if build is not None:
                builds.append(source_build_of(build))
        phases.append(
            mf.Phase(
                name=phase,
                requirements=req_path,
                packages=tuple(f"{a.package.name}=={_file_version(a)}" for a in members),
                source_builds=tuple(builds),
            )
        )
    generated.append(_entry(layout.LOCK, dumps(lock).encode()))
    generated += _airgap_entries()
    glibc = [
        lock.target.highest_glibc(a.filename)
        for a in wheelhouse.artifacts
        if a.filename.endswith(".whl")
    ]
    glibc_needed = max((g for g in glibc if g), default=None)
    flash = next(
        (a for a in wheelhouse.artifacts if a.package.name == canonicalize_name("flash-attn")), None
    )
    files = tuple(
        mf.File(
            path=e.arcname,
            name=a.package.name,
            version=_file_version(a),
            sha256=a.sha256,
            size=a.size,
            location=a.package.location,
            url=a.package.file.url,
            phase=a.package.phase,
            kind=_manifest_kind(a),
            built_from=mf.BuiltFrom(a.built_from.filename, a.built_from.sha256)
            if a.built_from
            else None,
        )
        for e, a in zip(payload, ordered, strict=True)
    )
    # install.sh is a shim that finds a Python and hands over to lib/'s installer, which reads
    # everything else from the manifest; README.txt is for the server's admin.
    context = {
        "name": name,
        "version": __version__,
        "profile": profile.name,
        "python_version": lock.target.python_version,
        "python_tag": lock.target.python_tag,
        "platform": lock.target.platform,
        "cuda": lock.cuda,
        "phases": [p.name for p in phases],
    }
    generated.insert(0, _entry(layout.INSTALL, render_install(context).encode()))
    generated.insert(1, _entry(mf.README, render_install(context, "README.txt.j2").encode()))
    generated.append(_entry("doctor", _doctor_script().encode()))
    manifest = mf.Manifest(
        name=name,
        created_by=f"verl-bundle {__version__}",
        created=lock.created,
        profile=profile_info(profile),
        target=target_of(lock.target, lock.cuda, glibc_needed),
        toolchain=toolchain_of(profile),
        checks=mf.Checks(
            imports=tuple(profile.checks.imports),
            torch_version=profile.checks.torch_version,
            torch_cuda=profile.checks.torch_cuda,
            flash_attn_wheel=flash.filename if flash and flash.filename.endswith(".whl") else None,
        ),
        phases=tuple(phases),
        files=files,
        generated=tuple(mf.Generated(e.arcname, e.sha256, e.size) for e in generated),
        installed_size=sum(_installed_size(a) for a in wheelhouse.artifacts),
        readiness=mf.Readiness(**vars(profile.readiness)),
    )
    manifest_entry = _entry(layout.MANIFEST, mf.dumps(manifest).encode())
    everything = [manifest_entry, *generated, *payload]
    sums = "".join(
        f"{e.sha256}  {e.arcname}\n" for e in sorted(everything, key=lambda e: e.arcname)
    )
    return name, [_entry(layout.SUMS, sums.encode()), *everything], manifest


def source_build_of(build: ProfileSourceBuild) -> mf.SourceBuild:
    return mf.SourceBuild(
        package=build.package,
        env=tuple(sorted(dict(build.env).items())),
        max_jobs=mf.MaxJobs(build.max_jobs.gib_per_job, build.max_jobs.limit),
        needs_cuda=build.needs_cuda,
    )


def profile_info(profile: Profile) -> mf.ProfileInfo:
    return mf.ProfileInfo(
        name=profile.name,
        description=profile.description,
        sha256=profile.sha256,
        notes=tuple(profile.notes),
    )


def toolchain_of(profile: Profile) -> mf.Toolchain:
    return mf.Toolchain(
        nvcc=profile.toolchain.nvcc,
        gcc=profile.toolchain.gcc,
        driver=profile.toolchain.driver,
        driver_compat=profile.toolchain.driver_compat,
    )


def target_of(target: Target, cuda: str, glibc: tuple[int, int] | None) -> mf.Target:
    return mf.Target(
        python=target.python_version,
        python_tag=target.python_tag,
        platform=target.platform,
        arch=target.arch,
        glibc=f"{glibc[0]}.{glibc[1]}" if glibc else None,
        cuda=cuda,
    )


def manifest_for_profile(profile: Profile, target: Target) -> mf.Manifest:
    """What a bundle of this profile will need from a server, before it is built (for the
    doctor run without a bundle). The worst case: its declared source builds happen."""
    builds = tuple(source_build_of(b) for b in profile.source_builds)
    return mf.Manifest(
        name=f"profile {profile.name}",
        created_by=f"verl-bundle {__version__}",
        created="",
        profile=profile_info(profile),
        target=target_of(target, profile.cuda, target.glibc),
        toolchain=toolchain_of(profile),
        checks=mf.Checks(),
        phases=(mf.Phase("source-builds", "requirements/source-builds.txt", (), builds),)
        if builds
        else (),
    )


def _manifest_kind(a: Artifact) -> str:
    if a.package.role == "bootstrap":
        return "bootstrap"
    if a.package.kind == "sdist":
        return "sdist"
    if a.package.role == "build-dep":
        return "build-dep"
    return "wheel"


def _doctor_script() -> str:
    return (data_dir("templates") / "doctor.sh").read_text()


class _HashingWriter(io.RawIOBase):
    """Counts and hashes every byte on its way to the file. One long-lived thread does the
    hashing, fed through a bounded queue, so hashing overlaps the copying (hashlib releases the
    GIL on large buffers) and memory stays at most a few chunks."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.hash = hashlib.sha256()
        self.size = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._hash_chunks, daemon=True)
        self._thread.start()
        self._done: str | None = None

    def _hash_chunks(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self.hash.update(chunk)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        buf = bytes(data)
        self.fh.write(buf)
        self.size += len(buf)
        self._queue.put(buf)
        return len(buf)

    def finish(self) -> str:
        """Stop the hashing thread (also after a failure) and return the hex digest."""
        if self._done is None:
            self._queue.put(None)
            self._thread.join()
            self._done = self.hash.hexdigest()
        return self._done


def _header(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size if kind == tarfile.REGTYPE else 0
    info.mode = mode
    info.mtime = MTIME
    info.type = kind
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _write_tar(out: IO[bytes], top: str, entries: list[Entry], reporter: Reporter) -> None:
    """A POSIX (pax) tar written by hand: headers from tarfile, data copied in 1 MiB chunks."""
    dirs: set[str] = {top}
    out.write(_header(top, 0, 0o755, tarfile.DIRTYPE))
    total = sum(e.size for e in entries)
    handle = reporter.start("writing bundle", total)
    try:
        for e in entries:
            parent = e.arcname.rsplit("/", 1)[0] if "/" in e.arcname else ""
            if parent:
                parts = parent.split("/")
                for i in range(1, len(parts) + 1):
                    d = f"{top}/{'/'.join(parts[:i])}"
                    if d not in dirs:
                        dirs.add(d)
                        out.write(_header(d, 0, 0o755, tarfile.DIRTYPE))
            mode = 0o755 if e.arcname in EXECUTABLE else 0o644
            out.write(_header(f"{top}/{e.arcname}", e.size, mode))
            copied = 0
            if e.data is not None:
                out.write(e.data)
                copied = len(e.data)
            else:
                assert e.source is not None  # noqa: S101 - an Entry has data or a source
                with open(e.source, "rb") as src:
                    while chunk := src.read(CHUNK):
                        out.write(chunk)
                        copied += len(chunk)
                        reporter.advance(handle, len(chunk))
            if copied != e.size:
                raise AssembleError(
                    f"{e.arcname}: the cached file changed size while the bundle was written "
                    f"({copied} != {e.size}); run the build again"
                )
            pad = (-copied) % tarfile.BLOCKSIZE
            if pad:
                out.write(b"\0" * pad)
        out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    finally:
        reporter.done(handle)


@contextmanager
def _compressed(raw: IO[bytes], compress: Compression) -> Iterator[IO[bytes]]:
    if compress == "none":
        yield raw
    elif compress == "gz":
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=MTIME) as gz:
            yield gz  # type: ignore[misc]
    else:
        try:
            import zstandard
        except ImportError:
            zstandard = None
        if zstandard is not None:
            with zstandard.ZstdCompressor(level=3, threads=-1).stream_writer(
                raw, closefd=False
            ) as z:
                yield z
        else:
            exe = shutil.which("zstd")
            if exe is None:
                raise AssembleError(
                    "--compress zstd needs the zstd command or `pip install verl-bundle[zstd]`; "
                    "or use --compress gz"
                )
            proc = subprocess.Popen(
                [exe, "-q", "-T0", "-3", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert proc.stdin is not None and proc.stdout is not None  # noqa: S101 - PIPE sets them
            out = proc.stdout

            def pump() -> None:  # compressed bytes go through the hashing writer
                while chunk := out.read(CHUNK):
                    raw.write(chunk)

            copier = threading.Thread(target=pump)
            copier.start()
            try:
                yield proc.stdin
            finally:
                proc.stdin.close()
                copier.join()
                out.close()
                if proc.wait() != 0:
                    raise AssembleError("zstd failed while compressing the bundle")


def write_bundle(
    name: str,
    entries: list[Entry],
    output: Path,
    compress: Compression,
    reporter: Reporter,
) -> Bundle:
    output.mkdir(parents=True, exist_ok=True)
    final = output / f"{name}{SUFFIX[compress]}"
    tmp = output / f".{final.name}.partial-{os.getpid()}"
    writer: _HashingWriter | None = None
    try:
        with tmp.open("wb") as raw:
            writer = _HashingWriter(raw)
            with _compressed(writer, compress) as out:  # type: ignore[arg-type]
                _write_tar(out, name, entries, reporter)
            digest = writer.finish()
        # Not fsync'ed: the rename below already keeps a partial tarball from ever having the
        # final name, and the .sha256 beside it catches a file torn by a power loss.
        sidecar = output / f"{final.name}.sha256"
        side_tmp = output / f".{sidecar.name}.partial-{os.getpid()}"
        side_tmp.write_text(f"{digest}  {final.name}\n")
        os.replace(tmp, final)
        os.replace(side_tmp, sidecar)
    except BaseException:
        if writer is not None:
            writer.finish()
        tmp.unlink(missing_ok=True)
        (output / f".{final.name}.sha256.partial-{os.getpid()}").unlink(missing_ok=True)
        raise
    return Bundle(
        name=name,
        path=final,
        sha256=digest,
        size=writer.size,
        files=len(entries),
        payload_bytes=sum(e.size for e in entries),
    )


def assemble(
    profile: Profile,
    lock: Lock,
    wheelhouse: Wheelhouse,
    output: Path,
    compress: Compression,
    reporter: Reporter,
) -> Bundle:
    name, entries, _ = plan(profile, lock, wheelhouse)
    return write_bundle(name, entries, output, compress, reporter)
