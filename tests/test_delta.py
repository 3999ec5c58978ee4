"""Delta bundles: `build --base OLD` leaves out what OLD has; the server completes the delta from
the old bundle's directory (airgap/install/base.py), each file checked by hash, and it installs
the same state as the full bundle. Two real bundles of the toy stack differ in one pin."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import Stack, shared_build
from support.airgap import extract, install_into, resign
from support.crossing import NAME, Pair, result, verl_bundle
from support.shared import Value

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.install import base as completion
from verl_bundle.airgap.verify.bundle import verify, verify_dir

EINOPS = "wheels/einops-1.1.0-py3-none-any.whl"


def build_delta(stack: Stack, pair: Pair, out: Path, base: Path, *extra: str) -> dict[str, object]:
    proc = verl_bundle(
        *stack.args("build", out, pair.cache, "--profile", str(pair.new_profile)),
        "--base",
        str(base),
        "--json",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    return result(proc)


@pytest.fixture(scope="module")
def delta(
    pinned_pair: Pair, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, object]]:
    """B built as a delta over A, once per run (read-only): its tarball and build JSON."""

    def build(stack: Stack, out: Path) -> Value:
        return build_delta(stack, pinned_pair, out, pinned_pair.old)

    doc = shared_build(tmp_path_factory, "delta.delta", build)
    assert isinstance(doc, dict)
    return Path(str(doc["bundle"])), doc


def sums(path: Path) -> dict[str, str]:
    return {line.split()[1]: line.split()[0] for line in path.read_text().splitlines()}


def payload(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as tf:
        names = [m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile()]
    return [n for n in names if n.startswith((mf.WHEELS, mf.SOURCES, mf.BOOTSTRAP))]


def test_the_delta_holds_the_one_changed_file_and_lists_the_rest(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]]
) -> None:
    tarball, doc = delta
    assert tarball.name == f"{NAME}-delta.tar"
    assert payload(tarball) == [EINOPS]
    full = payload(pinned_pair.new)
    figures = doc["delta"]
    assert isinstance(figures, dict)
    assert figures["carried_files"] == 1 and figures["payload_files"] == len(full)
    assert figures["size"] == tarball.stat().st_size < pinned_pair.new.stat().st_size
    # the full figure is the full bundle's tarball (whose manifest has no list of omitted files)
    assert 0 <= int(str(figures["full_size"])) - pinned_pair.new.stat().st_size < 16384
    root = extract(tarball, tarball.parent / "x")
    m = mf.load(str(root))
    assert m.delta is not None and m.delta.base == NAME
    assert sorted(m.delta.omitted) == sorted(p for p in full if p != EINOPS)
    old_manifest = extract(pinned_pair.old, tarball.parent / "old") / mf.MANIFEST
    assert m.delta.base_manifest == hashlib.sha256(old_manifest.read_bytes()).hexdigest()
    # SHA256SUMS lists the full bundle: every file the full one lists (the lock was made again
    # for the delta, so its time, and what lists it, differ), the payload by the same hashes
    full_root = extract(pinned_pair.new, tarball.parent / "full")
    ours = sums(root / mf.SUMS)
    theirs = sums(full_root / mf.SUMS)
    assert set(ours) == set(theirs)
    assert {p: ours[p] for p in full} == {p: theirs[p] for p in full}


def test_build_says_what_the_delta_carries(stack: Stack, pinned_pair: Pair, tmp_path: Path) -> None:
    proc = verl_bundle(
        *stack.args(
            "build", tmp_path / "out", pinned_pair.cache, "--profile", str(pinned_pair.new_profile)
        ),
        "--base",
        str(extract(pinned_pair.old, tmp_path / "old")),  # an extracted directory works too
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("delta:"))
    files = len(payload(pinned_pair.new))
    assert line.startswith(f"delta: 1 of {files} files, ")
    assert "(full bundle " in line and NAME in line
    assert proc.stdout.strip().splitlines()[-1].endswith(f"{NAME}-delta.tar")


def test_host_verify_takes_the_delta_as_intact(delta: tuple[Path, dict[str, object]]) -> None:
    proc = verl_bundle("verify", str(delta[0]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "left to the base" in proc.stderr


def test_the_servers_verify_is_the_hosts_on_a_delta_tarball(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]]
) -> None:
    """One verify (airgap/verify/check.py) on both sides: the server's takes a delta's tarball
    as intact too (it used to call every file left to the base missing), with the same count."""
    tarball = delta[0]
    host = verl_bundle("verify", "--json", str(tarball))
    assert host.returncode == 0, host.stdout + host.stderr
    server = subprocess.run(
        [sys.executable, "-I", "-m", "verl_bundle.airgap", "verify", "--json", str(tarball)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert server.returncode == 0, server.stdout + server.stderr
    checked = result(host)["checked"]
    on_server = json.loads(server.stdout)["result"]
    assert on_server["checked"] == checked and on_server["problems"] == []
    # the files left to the base are not counted as checked, on either side
    with tarfile.open(tarball) as tf:
        top = tf.getmembers()[0].name.split("/")[0]
        manifest = tf.extractfile(f"{top}/{mf.MANIFEST}")
        assert manifest is not None
        m = mf.loads(manifest.read().decode())
    assert m.delta is not None and m.delta.omitted
    assert checked == verify(str(pinned_pair.new)).checked - len(m.delta.omitted)


def test_delta_and_old_directory_install_what_the_full_bundle_installs(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]], tmp_path: Path, home: Path
) -> None:
    old = extract(pinned_pair.old, tmp_path / "old")
    root = extract(delta[0], tmp_path / "new")
    # Without --base, a delta says what it needs in one line and installs nothing.
    alone = install_into(root, home, tmp_path / "venv-delta")
    assert alone.returncode == 2, alone.stdout + alone.stderr
    assert "this bundle is a delta" in alone.stderr and "give --base OLD_DIR" in alone.stderr
    assert not (tmp_path / "venv-delta").exists()
    a = install_into(root, home, tmp_path / "venv-delta", "--base", str(old))
    assert a.returncode == 0, a.stdout[-3000:] + a.stderr[-3000:]
    assert f"file(s) from {old}" in a.stdout and "each checked against the manifest" in a.stdout
    report = verify_dir(str(root))
    assert report.ok, [p.line() for p in report.problems]
    full = extract(pinned_pair.new, tmp_path / "full")
    b = install_into(full, home, tmp_path / "venv-full")
    assert b.returncode == 0, b.stderr[-3000:]
    assert installed(tmp_path / "venv-delta") == installed(tmp_path / "venv-full")
    assert "einops-1.1.0.dist-info" in installed(tmp_path / "venv-delta")


def installed(prefix: Path) -> list[str]:
    site = next(prefix.glob("lib/python3*/site-packages"))
    return sorted(p.name for p in site.glob("*.dist-info"))


def test_a_damaged_base_file_is_named_and_nothing_is_placed(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    old = extract(pinned_pair.old, tmp_path / "old")
    victim = next((old / "wheels").glob("torch-*.whl"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    root = extract(delta[0], tmp_path / "new")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    home = tmp_path / "home"
    home.mkdir()
    done = install_into(root, home, tmp_path / "venv", "--base", str(old))
    assert done.returncode == 3
    line = done.stderr.strip().splitlines()[0]
    assert f"wheels/{victim.name} (damaged in the base: {victim} has sha256" in line
    assert "nothing was installed" in line
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert not (tmp_path / "venv").exists()


def test_a_file_in_neither_place_is_named_and_a_flat_wheel_directory_serves(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    old = extract(pinned_pair.old, tmp_path / "old")
    flat = tmp_path / "wheels-kept"
    flat.mkdir()
    for folder in (mf.WHEELS, mf.SOURCES, mf.BOOTSTRAP):
        for f in (old / folder).glob("*"):
            shutil.copy(f, flat)
    gone = next(flat.glob("verl-*.whl"))
    gone.unlink()
    root = extract(delta[0], tmp_path / "new")
    home = tmp_path / "home"
    home.mkdir()
    done = install_into(root, home, tmp_path / "venv", "--base", str(flat))
    assert done.returncode == 3
    assert (
        f"1 file(s) of this delta are in neither the delta nor {flat}: wheels/{gone.name};"
        in done.stderr
    )
    shutil.copy(old / mf.WHEELS / gone.name, flat)
    done = install_into(root, home, tmp_path / "venv", "--base", str(flat))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert verify_dir(str(root)).ok
    # a second run finds everything in place and takes nothing
    again = install_into(root, home, tmp_path / "venv", "--base", str(flat))
    assert again.returncode == 0 and "took 0 file(s)" in again.stdout
    assert json.loads((root / mf.MANIFEST).read_text())["delta"]["base"] == NAME


def kept_wheels(old: Path, flat: Path) -> Path:
    """The old bundle as a flat directory of its wheels (documented: OLD_DIR may be that)."""
    flat.mkdir()
    for folder in (mf.WHEELS, mf.SOURCES, mf.BOOTSTRAP):
        for f in (old / folder).glob("*"):
            shutil.copy(f, flat)
    return flat


@pytest.mark.parametrize("planted", ["fifo", "dev-zero"])
def test_a_fifo_or_a_link_to_dev_zero_under_a_needed_name_is_refused_at_once(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]], tmp_path: Path, planted: str
) -> None:
    """Opened without following a link and without blocking, its type and size checked before
    a byte is read: neither hangs the install (a subprocess timeout fails the test) nor the
    dry run, which checks the base as the real run does."""
    import os

    flat = kept_wheels(extract(pinned_pair.old, tmp_path / "old"), tmp_path / "kept")
    victim = next(flat.glob("torch-*.whl"))
    victim.unlink()
    if planted == "fifo":
        os.mkfifo(victim)
        why = "not a regular file (a regular file of"
    else:
        victim.symlink_to("/dev/zero")
        why = "a symbolic link, not the file itself"
    root = extract(delta[0], tmp_path / "new")
    home = tmp_path / "home"
    home.mkdir()
    for dry in ((), ("--dry-run",)):
        done = install_into(root, home, tmp_path / "venv", "--base", str(flat), *dry, timeout=120)
        assert done.returncode == 3, done.stdout[-2000:] + done.stderr
        assert f"wheels/{victim.name} (damaged in the base: {victim}: {why}" in done.stderr
        assert len([ln for ln in done.stderr.splitlines() if "install.sh:" in ln]) == 1
        assert not (tmp_path / "venv").exists()


def test_the_dry_run_checks_base_as_the_real_run_does(
    pinned_pair: Pair, delta: tuple[Path, dict[str, object]], tmp_path: Path, home: Path
) -> None:
    old = extract(pinned_pair.old, tmp_path / "old")
    root = extract(delta[0], tmp_path / "new")
    venv = tmp_path / "venv"
    nowhere = install_into(root, home, venv, "--base", "/nonexistent", "--dry-run")
    assert nowhere.returncode == 3, nowhere.stdout + nowhere.stderr
    assert "--base /nonexistent: no such directory" in nowhere.stderr
    wrong = install_into(root, home, venv, "--base", str(home), "--dry-run")
    assert wrong.returncode == 3 and "in neither the delta nor" in wrong.stderr
    full = extract(pinned_pair.new, tmp_path / "full")
    not_delta = install_into(full, home, venv, "--base", str(old), "--dry-run")
    assert not_delta.returncode == 2 and "this bundle is a full one" in not_delta.stderr
    good = install_into(root, home, venv, "--base", str(old), "--dry-run")
    assert good.returncode == 0, good.stdout + good.stderr
    omitted = len(mf.load(str(root)).omitted_files())
    assert f"  base:    {omitted} file(s) from {old}, each checked by its sha256" in good.stdout
    assert not venv.exists()
    assert not any(p.name.startswith(".") and "partial" in p.name for p in root.rglob("*"))


def test_bytes_the_base_holds_under_another_name_are_carried_and_the_delta_completes(
    stack: Stack, pinned_pair: Pair, tmp_path: Path
) -> None:
    """The host leaves to the base only what install.sh --base finds there: a file of the same
    name, sha256 and size (airgap/verify/delta.py, the one rule). A base that holds a wheel's
    bytes under another name does not have that wheel for the server, so the delta carries it
    and completes; left out by its hash alone, the delta could never be installed."""
    old = extract(pinned_pair.old, tmp_path / "old")
    doc = json.loads((old / mf.MANIFEST).read_text())
    entry = next(f for f in doc["files"] if f["kind"] == "wheel" and "einops" not in f["path"])
    kept = entry["path"]
    folder, name = kept.rsplit("/", 1)
    entry["path"] = f"{folder}/renamed-{name}"
    (old / kept).rename(old / entry["path"])
    (old / mf.MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
    resign(old)
    built = build_delta(stack, pinned_pair, tmp_path / "out", old)
    tarball = Path(str(built["bundle"]))
    assert sorted(payload(tarball)) == sorted([EINOPS, kept])
    root = extract(tarball, tmp_path / "new")
    m = mf.load(str(root))
    assert m.delta is not None and kept not in m.delta.omitted
    taken, already = completion.plan(m, str(root), str(old))  # the server's own completion
    assert already == 0 and sorted(t.path for t in taken) == sorted(m.delta.omitted)
