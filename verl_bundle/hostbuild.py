"""Pure-Python sdists (antlr4-python3-runtime, pylatexenc, ...) become wheels on the online host,
so the server builds nothing but the profile's declared source builds."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from verl_bundle.airgap.hashing import sha256_file
from verl_bundle.credentials import Redactor
from verl_bundle.errors import HostBuildError
from verl_bundle.fetch import Cache
from verl_bundle.uvcmd import host_python, run_uv


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    filename: str
    sha256: str
    size: int


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
    out = cache.built(sdist_sha256)
    existing = sorted(out.glob("*.whl")) if out.is_dir() else []
    if len(existing) == 1:
        return _describe(existing[0])
    cache.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="host-build-", dir=cache.root) as tmp:
        work = Path(tmp)
        src = work / sdist_filename
        shutil.copyfile(sdist, src)
        args = ["build", "--wheel", "--out-dir", str(work / "dist"), "--python", host_python()]
        args.append(str(src))
        # The mirror (credentials and all) goes through the environment, not the command line,
        # where other users of this host could read it.
        extra = {"UV_DEFAULT_INDEX": index_url} if index_url else {}
        run = run_uv(args, work, redact, extra_env=extra)
        wheels = sorted((work / "dist").glob("*.whl")) if (work / "dist").is_dir() else []
        if run.returncode != 0 or len(wheels) != 1:
            tail = " | ".join(run.stderr.strip().splitlines()[-6:])
            raise HostBuildError(
                f"{package}: building a wheel from {sdist_filename} on this host failed: {tail}. "
                "If the package compiles code, declare it under [[source-builds]] in the profile"
            )
        wheel = wheels[0]
        tags = parse_wheel_filename(wheel.name)[3]
        if not all(t.abi == "none" and t.platform == "any" for t in tags):
            raise HostBuildError(
                f"{package}: {sdist_filename} builds a platform-specific wheel ({wheel.name}), so it "
                "cannot be built on the online host; declare it under [[source-builds]] in the "
                "profile so the server compiles it"
            )
        out.mkdir(parents=True, exist_ok=True)
        final = out / wheel.name
        os.replace(wheel, final)
    return _describe(final)


def _describe(path: Path) -> BuiltWheel:
    return BuiltWheel(path, path.name, sha256_file(path), path.stat().st_size)
