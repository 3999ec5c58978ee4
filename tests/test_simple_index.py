"""The bundle's PEP 503 `simple/` tree (issue 13 #3): written by the assembler, listed in
SHA256SUMS and the manifest, and a working index for real pip and uv when the extracted bundle
is served by `python3 -m http.server` in a network namespace of its own."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import clean_environ
from support.airgap import python310
from support.served import BASE, serving

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.bundle import parse_sums, verify_dir
from verl_bundle.uvcmd import uv_binary

pytestmark = pytest.mark.slow

LINK = re.compile(r'<a href="([^"]+)">([^<]+)</a>')


def links(page: Path) -> list[tuple[str, str]]:
    return LINK.findall(page.read_text())


def test_the_tree_links_every_file_with_its_hash_and_is_listed(
    built_bundle: tuple[Path, Path, dict[str, object]],
) -> None:
    root = built_bundle[1]
    m = mf.load(str(root))
    names = sorted({f.name for f in m.files})
    assert links(root / "simple" / "index.html") == [(f"{n}/", n) for n in names]
    seen = set()
    for name in names:
        page = root / "simple" / name / "index.html"
        for href, text in links(page):
            target, _, fragment = href.partition("#sha256=")
            path = (page.parent / unquote(target)).resolve().relative_to(root.resolve()).as_posix()
            f = next(f for f in m.files if f.path == path)
            assert (f.name, text, fragment) == (name, f.filename, f.sha256)
            assert hashlib.sha256((root / path).read_bytes()).hexdigest() == fragment
            seen.add(path)
    assert seen == {f.path for f in m.files}  # wheels, sources and bootstrap alike
    sums = parse_sums((root / "SHA256SUMS").read_text())
    generated = {g.path for g in m.generated}
    for page in root.glob("simple/**/index.html"):
        rel = page.relative_to(root).as_posix()
        assert rel in generated
        assert sums[rel] == hashlib.sha256(page.read_bytes()).hexdigest()
    assert verify_dir(str(root)).ok


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    proc = subprocess.run(
        [python310(), "-m", "venv", str(tmp_path / "v")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "v"


def _pip_list(venv: Path, env: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        env=env,
    )
    return dict(line.split("==") for line in proc.stdout.split())


def test_pip_and_uv_install_from_the_served_bundle_with_no_other_network(
    built_bundle: tuple[Path, Path, dict[str, object]], venv: Path, tmp_path: Path
) -> None:
    root = built_bundle[1]
    env = clean_environ(tmp_path)
    m = mf.load(str(root))
    # torch (a +cu118 file name) pulls in triton, filelock and typing-extensions; verl pulls in
    # tensordict, ray, transformers and pylatexenc: resolved across the tree's pages.
    wanted = ("torch", "triton", "filelock", "typing-extensions", "verl", "tensordict", "ray")
    want = {f.name: f.version for f in m.files if f.name in wanted}
    assert len(want) == len(wanted)
    pip = f"{venv}/bin/python -m pip install --no-cache-dir --index-url {BASE}/simple/ torch"
    uv = (
        f"{uv_binary()} pip install --python {venv}/bin/python --index-url {BASE}/simple/ "
        "--no-config verl"
    )
    proc = serving(root, f"{pip} && {uv}", env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    have = {mf.canonical(k): v for k, v in _pip_list(venv, env).items()}
    assert {name: have.get(name) for name in want} == want


def test_pip_refuses_a_served_wheel_that_does_not_match_its_link(
    built_bundle: tuple[Path, Path, dict[str, object]], venv: Path, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(built_bundle[1], root)
    m = mf.load(str(root))
    wheel = root / next(f.path for f in m.files if f.name == "einops")
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # still a zip; not the bundled bytes
    env = clean_environ(tmp_path)
    pip = f"{venv}/bin/python -m pip install --no-cache-dir --index-url {BASE}/simple/ einops"
    proc = serving(root, pip, env, tmp_path)
    assert proc.returncode != 0
    assert "hash" in (proc.stdout + proc.stderr).lower()
    assert "einops" not in _pip_list(venv, env)
