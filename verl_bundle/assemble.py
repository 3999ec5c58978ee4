"""The assemble stage: one tarball with wheels, sources, bootstrap, manifest, checksums and
install.sh, streamed from the cache (no second copy on disk), written under a temporary name and
renamed only when complete."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
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
from verl_bundle.errors import AssembleError
from verl_bundle.lock import BOOTSTRAP_PHASE, Lock, dumps, group_by_phase
from verl_bundle.profile import Profile
from verl_bundle.progress import Reporter
from verl_bundle.resources import airgap_dir, data_dir
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


def render_install(context: dict[str, Any]) -> str:
    # A shell script, not HTML: values are quoted for the shell with the `sh` filter instead.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    return env.get_template("install.sh.j2").render(**context)


def _airgap_entries() -> list[Entry]:
    """The standard-library server code, as lib/verl_bundle/airgap/*.py."""
    entries = [_entry(f"{layout.LIB}/verl_bundle/__init__.py", b'"""verl-bundle server side."""\n')]
    for path in sorted(airgap_dir().glob("*.py")):
        entries.append(_entry(f"{layout.LIB}/verl_bundle/airgap/{path.name}", path.read_bytes()))
    return entries


def plan(
    profile: Profile, lock: Lock, wheelhouse: Wheelhouse
) -> tuple[str, list[Entry], dict[str, Any]]:
    """Everything the bundle will hold, with hashes, before a byte of the tar is written."""
    name = bundle_name(lock)
    by_name = {a.package.name: a for a in wheelhouse.artifacts}
    payload = [
        Entry(f"{_folder(a)}/{a.filename}", a.sha256, a.size, source=a.path)
        for a in sorted(wheelhouse.artifacts, key=lambda a: (_folder(a), a.filename))
    ]
    phases = _requirements(lock, profile, by_name)
    generated: list[Entry] = []
    phase_docs: list[dict[str, Any]] = []
    for phase, req_path, members in phases:
        text = "".join(_requirement_line(a) + "\n" for a in members)
        generated.append(_entry(req_path, text.encode()))
        builds = []
        for a in members:
            build = profile.source_build(a.package.name) if a.package.kind == "sdist" else None
            if build is not None:
                builds.append(
                    {
                        "package": a.package.name,
                        "env": dict(build.env),
                        "max_jobs": {
                            "gib_per_job": build.max_jobs.gib_per_job,
                            "limit": build.max_jobs.limit,
                        },
                        "needs_cuda": build.needs_cuda,
                    }
                )
        phase_docs.append(
            {
                "name": phase,
                "requirements": req_path,
                "packages": [f"{a.package.name}=={_file_version(a)}" for a in members],
                "source_builds": builds,
            }
        )
    # For install.sh: each phase's build environment and MAX_JOBS policy as shell words.
    shell_phases = [
        {
            **doc,
            "env_words": " ".join(
                shlex.quote(f"{k}={v}") for b in doc["source_builds"] for k, v in b["env"].items()
            ),
            "jobs_words": " ".join(
                f"{b['max_jobs']['gib_per_job']} {b['max_jobs']['limit'] or 0}"
                for b in doc["source_builds"]
            ),
        }
        for doc in phase_docs
    ]
    bootstrap = [
        f"{layout.BOOTSTRAP}/{a.filename}"
        for a in by_name.values()
        if a.package.phase == BOOTSTRAP_PHASE
    ]
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
    manifest: dict[str, Any] = {
        "format": layout.MANIFEST_FORMAT,
        "name": name,
        "created_by": f"verl-bundle {__version__}",
        "created": lock.created,
        "profile": {
            "name": profile.name,
            "description": profile.description,
            "sha256": profile.sha256,
            "notes": list(profile.notes),
        },
        "target": {
            "python": lock.target.python_version,
            "python_tag": lock.target.python_tag,
            "platform": lock.target.platform,
            "arch": lock.target.arch,
            "glibc": f"{glibc_needed[0]}.{glibc_needed[1]}" if glibc_needed else None,
            "cuda": lock.cuda,
        },
        "toolchain": {
            "nvcc": profile.toolchain.nvcc,
            "gcc": profile.toolchain.gcc,
            "driver": profile.toolchain.driver,
            "driver_compat": profile.toolchain.driver_compat,
        },
        "checks": {
            "imports": list(profile.checks.imports),
            "torch_version": profile.checks.torch_version,
            "torch_cuda": profile.checks.torch_cuda,
            "flash_attn_wheel": flash.filename
            if flash and flash.filename.endswith(".whl")
            else None,
        },
        "bootstrap": bootstrap,
        "phases": phase_docs,
        "installed_size": sum(_installed_size(a) for a in wheelhouse.artifacts),
        "files": [
            {
                "path": e.arcname,
                "name": a.package.name,
                "version": _file_version(a),
                "sha256": a.sha256,
                "size": a.size,
                "location": a.package.location,
                "url": a.package.file.url,
                "phase": a.package.phase,
                "kind": _manifest_kind(a),
                **(
                    {"built_from": {"file": a.built_from.filename, "sha256": a.built_from.sha256}}
                    if a.built_from
                    else {}
                ),
            }
            for e, a in zip(
                payload,
                sorted(wheelhouse.artifacts, key=lambda a: (_folder(a), a.filename)),
                strict=True,
            )
        ],
    }
    context = {
        "name": name,
        "version": __version__,
        "profile": profile.name,
        "python_version": lock.target.python_version,
        "python_tag": lock.target.python_tag,
        "platform": lock.target.platform,
        "cuda": lock.cuda,
        "bootstrap_pip": next((b for b in bootstrap if b.split("/")[-1].startswith("pip-")), ""),
        "bootstrap_uv": next((b for b in bootstrap if b.split("/")[-1].startswith("uv-")), ""),
        "phases": shell_phases,
    }
    generated.insert(0, _entry(layout.INSTALL, render_install(context).encode()))
    generated.append(_entry("doctor", _doctor_script().encode()))
    manifest["generated"] = [
        {"path": e.arcname, "sha256": e.sha256, "size": e.size} for e in generated
    ]
    manifest_entry = _entry(layout.MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    everything = [manifest_entry, *generated, *payload]
    sums = "".join(
        f"{e.sha256}  {e.arcname}\n" for e in sorted(everything, key=lambda e: e.arcname)
    )
    return name, [_entry(layout.SUMS, sums.encode()), *everything], manifest


def _manifest_kind(a: Artifact) -> str:
    if a.package.role == "bootstrap":
        return "bootstrap"
    if a.package.kind == "sdist":
        return "sdist"
    if a.package.role == "build-dep":
        return "build-dep"
    return "wheel"


def _doctor_script() -> str:
    return (
        "#!/bin/sh\n"
        "# Check this server before installing: ./doctor [--json] [--require-gpu]\n"
        'here=$(cd "$(dirname "$0")" && pwd)\n'
        'PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$here/lib${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" '
        '-m verl_bundle.airgap doctor --bundle "$here" "$@"\n'
    )


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
