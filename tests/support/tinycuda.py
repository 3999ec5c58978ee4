"""The tiny CUDA extension's index (tests/fixtures/tinycuda as sdists, pip, setuptools, wheel and
uv wheels) served on 127.0.0.1 with this host's CUDA 13 toolkit, and its profile: shared by the
compile test modules."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import clean_environ

from support.airgap import python310
from support.pkgindex import Server
from support.shared import Value, once
from support.stack import UPLOADED, build_uv_wheel, bundled_wheel
from verl_bundle.compile.toolkit import nvcc_release

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tinycuda"

# A real `wheel` wheel for setuptools 65's bdist_wheel (Python's own test data ships one).
WHEEL_WHEELS = sorted(Path.home().glob(".pyenv/versions/3.1*/lib/python3.1*/test/**/wheel-*.whl"))

PROFILE = """
name = "tiny-cu130"
description = "a tiny CUDA extension compiled with nvcc 13"
cuda = "13.0"
python = "3.10"
platform = "manylinux_2_17_x86_64"
requirements = ["tinycuda=={version}"]
bootstrap = ["pip", "uv"]

[[static-metadata]]
name = "tinycuda"
version = "{version}"
requires-dist = []

[[source-builds]]
package = "tinycuda"
build-requires = ["setuptools", "wheel"]
max-jobs = {{ gib-per-job = 1 }}

[[phases]]
name = "tools"
packages = ["*"]

[[phases]]
name = "tinycuda"
packages = ["tinycuda"]

[checks]
imports = ["tinycuda"]

[readiness]
limit = "a test stack: a CUDA extension, no verl"

[toolchain]
nvcc = "13.0"
gcc = ">=6,<16"
"""


def toolkit13() -> Path:
    for home in sorted(Path("/usr/local").glob("cuda-13*")):
        found = nvcc_release(home / "bin" / "nvcc")
        if found and found[0].startswith("13."):
            return home
    pytest.skip("no CUDA 13 toolkit (nvcc) on this host")


def tinycuda_sdist(directory: Path, version: str, broken: bool = False) -> Path:
    """tinycuda-VERSION.tar.gz from the fixture (`broken`: a .cu that does not compile)."""
    base = f"tinycuda-{version}"
    members = {p.name: p.read_bytes() for p in FIXTURE.iterdir() if p.is_file()}
    members["setup.py"] = members["setup.py"].replace(
        b'os.environ.get("TINYCUDA_VERSION", "0.1")', repr(version).encode()
    )
    if broken:
        members["tinycuda.cu"] += b"\nstatic int broken = undeclared_name;\n"
    members["PKG-INFO"] = f"Metadata-Version: 2.1\nName: tinycuda\nVersion: {version}\n".encode()
    path = directory / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mtime, info.mode = len(data), 1704067200, 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


@dataclass
class Tiny:
    server: Server
    cuda_home: Path
    root: Path

    def profile(self, directory: Path, version: str = "0.1") -> Path:
        path = directory / f"tiny-{version}.toml"
        path.write_text(PROFILE.format(version=version))
        return path

    def build(
        self, out: Path, cache: Path, *extra: str, version: str = "0.1"
    ) -> subprocess.CompletedProcess[str]:
        """`python -m verl_bundle build --json` as a real subprocess (as a user runs it)."""
        args = ["build", "--profile", str(self.profile(out.parent, version)), "--python", "3.10"]
        args += ["--mirror", f"pypi={self.server.index_url}", "-o", str(out)]
        args += ["--cache-dir", str(cache), "--cuda-archs", "9.0", *extra, "--json"]
        return subprocess.run(
            [sys.executable, "-m", "verl_bundle", *args],
            capture_output=True,
            text=True,
            timeout=600,
            env=clean_environ(out.parent),
        )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiny]:
    home = toolkit13()
    python310()
    if not WHEEL_WHEELS:
        pytest.skip("no `wheel` wheel on this host (Python's test data)")

    def make(root: Path) -> Value:
        tinycuda_sdist(root, "0.1")
        tinycuda_sdist(root, "0.2", broken=True)
        for prefix in ("pip", "setuptools"):
            shutil.copy(bundled_wheel(prefix), root)
        shutil.copy(WHEEL_WHEELS[-1], root)
        build_uv_wheel(root)
        return str(root)

    # The index's files, made once per run (read-only); this worker's own server over them.
    root = Path(str(once(tmp_path_factory, "compile.tiny", make)))
    server = Server(root, json_api=True, upload_time=UPLOADED).start()
    try:
        yield Tiny(server, home, root)
    finally:
        server.stop()
