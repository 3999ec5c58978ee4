"""Installing from one served copy (issue 13 #3): `install.sh --from URL` and the Python
installer's `install --from URL`, against an extracted bundle served by `python3 -m
http.server` in a network namespace of its own (its loopback is the only network)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, clean_environ
from support.airgap import python310, resign
from support.served import BASE, serving

from verl_bundle.airgap.contract import manifest as mf

pytestmark = pytest.mark.slow

SECRET = "s3cret-pass"  # noqa: S105 - must never be shown


@pytest.fixture
def bundle(built_bundle: tuple[Path, Path, dict[str, object]]) -> Path:
    return built_bundle[1]  # served read-only


def _env(tmp: Path) -> dict[str, str]:
    env = clean_environ(tmp)
    env["HOME"] = str(tmp)
    return env


def _alone(bundle: Path, tmp: Path) -> Path:
    """install.sh on its own, as a node gets it from the served bundle."""
    shim = tmp / "dl" / "install.sh"
    shim.parent.mkdir()
    shutil.copy(bundle / "install.sh", shim)
    return shim


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("install.sh: fetch")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_install_sh_alone_installs_the_served_bundle_and_keeps_its_work_copy(
    bundle: Path, tmp_path: Path
) -> None:
    shim = _alone(bundle, tmp_path)
    prefix, work = tmp_path / "prefix", tmp_path / "work"
    url = f"http://node:{SECRET}@127.0.0.1:8000/"  # http.server ignores the credentials
    install = (
        f"sh {shim} --from {url} --work {work} --prefix {prefix} --python {python310()} --yes "
        f"--events {tmp_path / 'events.jsonl'}"
    )
    doctor = f"{work}/doctor --json --prefix {prefix} --python {python310()} > {tmp_path}/d.json"
    proc = serving(bundle, f"{install} && {doctor}", _env(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert "node:****@127.0.0.1" in proc.stderr
    assert (prefix / ".verl-bundle" / "fingerprint").is_file()
    assert json.loads((tmp_path / "d.json").read_text())["command"] == "doctor"
    # The copy is the bundle, file for file, and --work keeps it.
    listed = set(mf.load(str(bundle)).hashes()) | {"SHA256SUMS", "manifest.json"}
    copied = {p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()}
    assert {c for c in copied if not c.startswith(".verl-bundle-fetch/")} == listed
    assert {c for c in copied if c.startswith(".verl-bundle-fetch/")} == {".verl-bundle-fetch/lock"}
    steps = [
        json.loads(line)
        for line in (tmp_path / "events.jsonl").read_text().splitlines()
        if '"step"' in line and '"start"' not in line
    ]
    assert [e["step"] for e in steps][:2] == ["fetch", "verify"]
    assert steps[0]["status"] == "ok"


def test_the_python_installer_takes_the_same_option_and_a_rerun_fetches_nothing(
    bundle: Path, tmp_path: Path
) -> None:
    env = {**_env(tmp_path), "PYTHONPATH": str(ROOT)}
    work = tmp_path / "work"
    cmd = (
        f"{sys.executable} -m verl_bundle.airgap install --from {BASE}/ --work {work} "
        f"--prefix {tmp_path / 'p'} --python {python310()} --dry-run"
    )
    proc = serving(bundle, f"{cmd} && {cmd}", env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Plan for " in proc.stdout and f"bundle:  {work}" in proc.stdout
    fetched = [line for line in proc.stderr.splitlines() if "install.sh: fetched" in line]
    total = len(mf.load(str(bundle)).hashes()) + 1  # and manifest.json
    assert fetched[0].startswith(f"install.sh: fetched {total} of {total} files")
    assert fetched[1].startswith(f"install.sh: fetched 0 of {total} files")


def test_without_work_the_copy_goes_after_a_successful_run(bundle: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    cmd = f"sh {bundle / 'install.sh'} --from {BASE} --prefix {tmp_path / 'p'} --dry-run"
    proc = serving(bundle, f"{cmd} --python {python310()}", env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    ("url", "code", "says"),
    [
        ("ftp://head/b/", 2, "--from needs the http:// or https:// URL"),
        ("http://127.0.0.1:9/b/", 1, "cannot fetch http://127.0.0.1:9/b/lib/"),
        (f"{BASE}/no-such-bundle/", 1, "HTTP Error 404"),
    ],
)
def test_a_bad_url_an_unreachable_host_or_a_404_is_one_line(
    bundle: Path, tmp_path: Path, url: str, code: int, says: str
) -> None:
    shim = _alone(bundle, tmp_path)
    cmd = f"sh {shim} --from {url} --prefix {tmp_path / 'p'} --python {python310()}"
    proc = serving(bundle, cmd, _env(tmp_path), tmp_path)
    assert proc.returncode == code
    assert says in _one_line(proc)
    assert not (tmp_path / "p").exists()


def test_the_python_installer_says_the_same_in_one_line(bundle: Path, tmp_path: Path) -> None:
    env = {**_env(tmp_path), "PYTHONPATH": str(ROOT)}
    cmd = f"{sys.executable} -m verl_bundle.airgap install --from"
    proc = serving(
        bundle,
        f"{cmd} {BASE}/no-such-bundle/ --work {tmp_path / 'w'}; echo rc=$?; "
        f"{cmd} http://u:{SECRET}@127.0.0.1:9/b/ --work {tmp_path / 'w'}; echo rc=$?; "
        f"{cmd} ftp://head/b; echo rc=$?",
        env,
        tmp_path,
    )
    assert proc.stdout.split() == ["rc=2", "rc=1", "rc=2"]
    lines = proc.stderr.splitlines()
    assert [line for line in lines if "fetching" not in line] == [
        f"install.sh: {BASE}/no-such-bundle/SHA256SUMS: not found (HTTP 404)",
        "install.sh: cannot reach http://u:****@127.0.0.1:9/b/: [Errno 111] Connection refused; "
        "is the server up and reachable from this node? Run again to continue",
        "install.sh: --from ftp://head/b/: give the http:// or https:// URL of an extracted, "
        "served bundle, e.g. "
        "http://head:8000/verl-bundle-cu121-cp310-manylinux_2_17_x86_64/",
    ]


def test_a_served_file_that_does_not_match_its_hash_is_damaged_and_never_kept(
    bundle: Path, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(bundle, root)
    m = mf.load(str(root))
    bad = next(f.path for f in m.files if f.name == "einops")
    data = bytearray((root / bad).read_bytes())
    data[-1] ^= 1  # the same size, another hash
    (root / bad).write_bytes(bytes(data))
    work = tmp_path / "work"
    cmd = f"sh {root / 'install.sh'} --from {BASE}/ --work {work} --prefix {tmp_path / 'p'}"
    proc = serving(root, cmd, _env(tmp_path), tmp_path)
    assert proc.returncode == 3
    line = _one_line(proc)
    assert line.startswith(f"install.sh: the served bundle is damaged: {bad} has sha256 ")
    assert not (work / bad).exists() and not (work / f"{bad}.part").exists()
    assert not (tmp_path / "p").exists()


def test_an_install_sh_from_another_bundle_refuses_its_fetcher(
    bundle: Path, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(bundle, root)
    served = root / "lib" / "verl_bundle" / "airgap" / "verify" / "served.py"
    served.write_text(served.read_text() + "\n# another release\n")
    resign(root)  # a consistent bundle, made with another fetcher
    cmd = f"sh {_alone(bundle, tmp_path)} --from {BASE}/ --prefix {tmp_path / 'p'}"
    proc = serving(root, cmd, _env(tmp_path), tmp_path)
    assert proc.returncode == 3
    assert "is not the fetcher this install.sh was made with" in _one_line(proc)


def test_the_install_sh_of_a_checked_bundle_installs_only_that_bundle(
    bundle: Path, tmp_path: Path
) -> None:
    """A served copy whose install.sh, manifest and SHA256SUMS were all replaced, consistently:
    the install.sh of the node's own checked bundle pins its SHA256SUMS; install.sh alone takes
    the admin's --bundle-sha256."""
    import hashlib

    pin = hashlib.sha256((bundle / "SHA256SUMS").read_bytes()).hexdigest()
    root = tmp_path / "served"
    shutil.copytree(bundle, root)
    (root / "install.sh").write_text((root / "install.sh").read_text() + "touch owned\n")
    resign(root)
    alone = f"sh {_alone(bundle, tmp_path)} --from {BASE}/ --bundle-sha256 {pin}"
    own = f"sh {bundle / 'install.sh'} --from {BASE}/"
    for cmd in (own, alone):
        proc = serving(root, f"{cmd} --prefix {tmp_path / 'p'}", _env(tmp_path), tmp_path)
        assert proc.returncode == 3, proc.stderr
        assert f"not the {pin} this node is pinned to (--bundle-sha256)" in _one_line(proc)
        assert not (tmp_path / "owned").exists() and not (tmp_path / "p").exists()
