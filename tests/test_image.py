"""install.sh --image FILE: the toy stack installed once, compiled and packed with the real
mksquashfs, then mounted read-only with the real squashfuse at the prefix it was installed to:
its python imports the stack with no network and cannot write, and the doctor reports the
mount and the fingerprint the install recorded."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import clean_environ
from support.airgap import READY, extract, install_into, netns_prefix, run_install
from support.cli import run as cli

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def fuse_mounts(tmp: Path) -> None:
    """Skip, saying why, where mksquashfs, squashfuse or FUSE is not available."""
    for tool in ("mksquashfs", "squashfuse", "fusermount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian: squashfs-tools, squashfuse, fuse3)")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse: FUSE is not available here")
    src, point = tmp / "probe-src", tmp / "probe-mnt"
    src.mkdir()
    point.mkdir()
    (src / "x").write_text("x")
    image = tmp / "probe.sqfs"
    subprocess.run(["mksquashfs", str(src), str(image), "-quiet"], check=True)
    mounted = subprocess.run(["squashfuse", str(image), str(point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"squashfuse cannot mount here: {mounted.stderr.strip()}")
    subprocess.run(["fusermount", "-u", str(point)], check=True)


@pytest.fixture
def bundle(built_bundle: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> Path:
    return extract(built_bundle[0], tmp_path / "bundle")


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[list[Path]]:
    """Mount points to unmount at the end, whatever happened."""
    points: list[Path] = []
    yield points
    for point in points:
        subprocess.run(["fusermount", "-u", str(point)], capture_output=True, check=False)


@pytest.mark.timeout(900)  # an install, bytecode and packing on a loaded machine
def test_one_read_only_image_serves_the_installed_stack(
    bundle: Path,
    home: Path,
    tmp_path: Path,
    mounted: list[Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fuse_mounts(tmp_path)
    prefix, image = tmp_path / "opt-verl", tmp_path / "shared" / "verl.sqfs"
    image.parent.mkdir()
    refused = run_install(bundle, home, "--into-env", str(tmp_path), "--image", str(image))
    assert refused.returncode == 2 and "--image packs a venv this installer makes" in refused.stderr
    dry = install_into(bundle, home, prefix, "--dry-run", "--image", str(image))
    assert f"8. image: compile every module (all cores), then mksquashfs {prefix}" in dry.stdout
    assert not image.exists()
    proc = install_into(bundle, home, prefix, "--yes", "--image", str(image))
    out = proc.stdout
    assert proc.returncode == READY, out + proc.stderr
    assert f"squashfuse {image} {prefix}" in out
    # No CPython in this bundle: the image's venv runs this host's, and the output says so.
    assert "outside the image: every node that mounts it needs that interpreter at that path" in out
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    assert (tmp_path / "shared" / "verl.sqfs.sha256").read_text() == f"{digest}  verl.sqfs\n"
    assert not list(image.parent.glob("*.partial"))

    # A node: nothing at the prefix but the image, mounted read-only at the same path.
    prefix.rename(tmp_path / "built")
    prefix.mkdir()
    subprocess.run(["squashfuse", str(image), str(prefix)], check=True)
    mounted.append(prefix)
    code = (
        "import sys, torch, flash_attn, vllm, verl, transformers; "
        "print(sys.prefix, torch.__version__, vllm.__version__, torch.__file__)"
    )
    run = subprocess.run(
        [*netns_prefix(), str(prefix / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        env=clean_environ(home),
    )
    assert run.returncode == 0, run.stderr
    where, torch_version, vllm_version, torch_file = run.stdout.split()
    assert (where, torch_version, vllm_version) == (str(prefix), "2.1.2+cu118", "0.3.1+cu118")
    cached = Path(torch_file).parent / "__pycache__"
    assert any(cached.glob("__init__.cpython-310.pyc"))  # compiled before packing
    with pytest.raises(OSError, match="Read-only file system"):
        (prefix / "written-on-a-node").write_text("x")

    doctor = subprocess.run(
        [sys.executable, "-m", "verl_bundle.airgap", "doctor", "--json", "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        env={**clean_environ(home), "PYTHONPATH": str(REPO)},
    )
    result = json.loads(doctor.stdout)["result"]
    host = result["host"]
    assert host["image"] == "squashfs image (fuse.squashfuse, read-only)"
    assert host["fingerprint"] == host["installed_fingerprint"] is not None
    assert host["changed_since_install"] == []
    # The read-only mount (0 bytes free) is not a disk failure (issue 37): nothing is installed
    # on a node that mounts it.
    disk = next(c for c in result["checks"] if c["id"] == "disk")
    assert disk["status"] == "ok" and "read-only): nothing is installed here" in disk["summary"]

    # Two nodes, each a mount namespace of its own with the image at the prefix: both pass the
    # doctor, and the fleet report reads them as nodes on the image (no --doctor-only needed).
    gathered = tmp_path / "gathered"
    gathered.mkdir()
    script = (
        'squashfuse "$1" "$2" || exit 9; "$3" -m verl_bundle.airgap doctor --json --prefix "$2" '
        '> "$4"; rc=$?; fusermount -u "$2"; exit "$rc"'
    )
    for node in ("n1", "n2"):
        ran = subprocess.run(
            [
                *("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"),
                *(str(image), str(prefix), sys.executable, str(gathered / f"{node}.json")),
            ],
            capture_output=True,
            text=True,
            env={**clean_environ(home), "PYTHONPATH": str(REPO)},
        )
        assert ran.returncode == 0, ran.stderr + (gathered / f"{node}.json").read_text()[-2000:]
    report = cli(["fleet", "report", str(gathered), "--expect", "n1,n2"], capsys)
    assert report.code == 0, report.out + report.err
    assert report.last_line == (
        "fleet: 2 node(s) agree (2 on a read-only image: installed once, its install record "
        "checked on each)"
    )


@pytest.mark.timeout(900)
def test_links_planted_beside_the_image_are_never_followed(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """The image and its sum are written in a private directory beside FILE and renamed into
    place: links planted at the old fixed partial names (FILE.partial, FILE.sha256.partial)
    are never written through, and a link or directory already at FILE is refused at once."""
    fuse_mounts(tmp_path)
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    for name in ("a", "b", "c"):
        (outside / name).write_text(f"precious {name}\n")
    (out / "env.sqfs.partial").symlink_to(outside / "a")
    (out / "env.sqfs.sha256.partial").symlink_to(outside / "b")
    (out / "linked.sqfs").symlink_to(outside / "c")
    image = out / "env.sqfs"

    refused = install_into(
        bundle, home, tmp_path / "never", "--yes", "--image", str(out / "linked.sqfs")
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{out / 'linked.sqfs'} is a symbolic link; the image is renamed" in refused.stderr
    assert not (tmp_path / "never").exists()

    proc = install_into(bundle, home, tmp_path / "venv", "--yes", "--image", str(image))
    assert proc.returncode == READY, proc.stdout[-3000:] + proc.stderr
    for name in ("a", "b", "c"):
        assert (outside / name).read_text() == f"precious {name}\n"
    assert image.is_file() and not image.is_symlink()
    assert image.read_bytes()[:4] == b"hsqs"
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    sums = out / "env.sqfs.sha256"
    assert not sums.is_symlink() and sums.read_text() == f"{digest}  env.sqfs\n"
    assert sorted(p.name for p in out.iterdir()) == [
        "env.sqfs",
        "env.sqfs.partial",
        "env.sqfs.sha256",
        "env.sqfs.sha256.partial",
        "linked.sqfs",
    ]  # nothing left of the private directory


def test_an_existing_directory_as_image_is_refused_before_anything_is_installed(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    adir = tmp_path / "adir"
    adir.mkdir()
    for dry in ((), ("--dry-run",)):
        proc = install_into(bundle, home, tmp_path / "venv", "--yes", "--image", str(adir), *dry)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("install.sh:")]
        assert lines == [
            f"install.sh: --image {adir}: a directory; give the image's file name "
            f"(e.g. {adir / 'verl.sqfs'})"
        ]
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "venv").exists() and list(adir.iterdir()) == []
