"""Pure-Python sdists (antlr4-python3-runtime, pylatexenc, ...) become wheels on the online host,
so the server builds nothing but the profile's declared source builds.

The wheels are reproducible: the same sdist gives the same bytes on any host and any day
(SOURCE_DATE_EPOCH for the backend, then entries rewritten in sorted order with fixed
timestamps and modes), so two cold builds of one lock give the same bundle.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.credentials import Redactor
from verl_bundle.errors import HostBuildError, LockError
from verl_bundle.net.cache import Cache
from verl_bundle.uvcmd import host_python, run_uv

# 1980-01-01T00:00:00Z, the earliest time a zip entry can hold: used when SOURCE_DATE_EPOCH is unset.
DEFAULT_EPOCH = 315532800


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    filename: str
    sha256: str
    size: int


def source_date_epoch() -> int:
    """SOURCE_DATE_EPOCH when the environment sets one (a number), else 1980-01-01."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    return max(int(value), DEFAULT_EPOCH) if value.isdigit() else DEFAULT_EPOCH


def build_pure_wheel(
    package: str,
    sdist: Path,
    sdist_filename: str,
    sdist_sha256: str,
    cache: Cache,
    index_url: str | None,
    redact: Redactor,
) -> BuiltWheel:
    """Build once per sdist hash; the wheel is cached beside the downloads."""
    try:
        plain_filename(sdist_filename, f"the lock's file for {package}")
    except UnsafeNameError as exc:
        raise LockError(f"{exc}; make a new lock with `verl-bundle lock`") from None
    out = cache.built(sdist_sha256)
    existing = sorted(out.glob("*.whl")) if out.is_dir() else []
    if len(existing) == 1:
        return _describe(existing[0])
    cache.root.mkdir(parents=True, exist_ok=True)
    epoch = source_date_epoch()
    # ignore_cleanup_errors: after Ctrl-C the interpreter may remove this directory at exit while
    # the interrupted build's last process still writes into it; that must not be a traceback.
    with tempfile.TemporaryDirectory(
        prefix="host-build-", dir=cache.root, ignore_cleanup_errors=True
    ) as tmp:
        work = Path(tmp)
        src = work / sdist_filename
        shutil.copyfile(sdist, src)
        args = ["build", "--wheel", "--out-dir", str(work / "dist"), "--python", host_python()]
        args.append(str(src))
        # The mirror (credentials and all) goes through the environment, not the command line,
        # where other users of this host could read it.
        extra = {"UV_DEFAULT_INDEX": index_url} if index_url else {}
        extra["SOURCE_DATE_EPOCH"] = str(epoch)
        run = run_uv(args, work, redact, extra_env=extra)
        wheels = sorted((work / "dist").glob("*.whl")) if (work / "dist").is_dir() else []
        if run.returncode != 0 or len(wheels) != 1:
            tail = " | ".join(run.stderr.strip().splitlines()[-6:])
            raise HostBuildError(
                f"{package}: building a wheel from {sdist_filename} on this host failed: {tail}. "
                "If the package compiles code, declare it under [[source-builds]] in the profile"
            )
        wheel = wheels[0]
        if not is_pure(wheel):
            raise HostBuildError(
                f"{package}: {sdist_filename} builds a platform-specific wheel ({wheel.name}), so it "
                "cannot be built on the online host; declare it under [[source-builds]] in the "
                "profile so the server compiles it"
            )
        final = place_normalized(wheel, work, out, epoch)
    return _describe(final)


def is_pure(wheel: Path) -> bool:
    """Every tag of the wheel is none-any: it runs on any target, so the host may build it."""
    return all(t.abi == "none" and t.platform == "any" for t in parse_wheel_filename(wheel.name)[3])


def place_normalized(wheel: Path, work: Path, out: Path, epoch: int) -> Path:
    """The built wheel made reproducible (normalize_wheel) in `work`, then moved into `out` under
    its own name in one rename, so `out` never holds a half-written wheel."""
    fixed = work / "fixed.whl"
    normalize_wheel(wheel, fixed, epoch)
    out.mkdir(parents=True, exist_ok=True)
    final = out / wheel.name
    os.replace(fixed, final)
    return final


def normalize_wheel(src: Path, dest: Path, epoch: int) -> None:
    """Rewrite a wheel with its entries sorted (RECORD last, as the spec wants), one timestamp,
    plain modes and one compression, so the bytes depend on the content alone. The content,
    and so RECORD, is unchanged."""
    stamp = time.gmtime(max(epoch, DEFAULT_EPOCH))[:6]
    with zipfile.ZipFile(src) as zin:
        infos = [i for i in zin.infolist() if not i.is_dir()]
        records = [i for i in infos if i.filename.endswith(".dist-info/RECORD")]
        ordered = sorted((i for i in infos if i not in records), key=lambda i: i.filename)
        with zipfile.ZipFile(dest, "w") as zout:
            for info in [*ordered, *records]:
                entry = zipfile.ZipInfo(info.filename, date_time=stamp)
                executable = (info.external_attr >> 16) & 0o111
                entry.external_attr = (0o755 if executable else 0o644) << 16
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.create_system = 3  # Unix, whatever the host: the modes above are Unix modes
                zout.writestr(entry, zin.read(info), compresslevel=6)


def _describe(path: Path) -> BuiltWheel:
    return BuiltWheel(path, path.name, sha256_file(path), path.stat().st_size)
