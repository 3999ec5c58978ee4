"""`verl-bundle slurm install` writes an sbatch script that a real Slurm (tests/slurm.py: two
slurmd on this machine) runs end to end: the tarball sbcast to each node, the install under
`unshare -n` into a separate prefix per node, the doctor's JSON gathered for the fleet report."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from airgap import netns_prefix, python310
from cli import run
from slurm import NODES, Slurm, started


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    with started(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def test_the_script_is_written_and_names_its_submit_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = tmp_path / "b.tar"
    (tmp_path / "verl-bundle-x").mkdir()
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(tmp_path), "verl-bundle-x"], check=True)
    out = tmp_path / "job.sbatch"
    r = run(
        ["slurm", "install", str(tarball), "--nodes", "3", "-o", str(out), "--prefix", "/opt/v-%n"],
        capsys,
    )
    assert r.code == 0 and r.last_line == f"sbatch {out}"
    text = out.read_text()
    assert "#SBATCH --nodes=3" in text and "sbcast --force" in text
    assert "NAME=verl-bundle-x" in text and "PREFIX=/opt/v-%n" in text
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=0" in text
    assert subprocess.run(["bash", "-n", str(out)], check=False).returncode == 0
    lint(out)
    shared = run(
        ["slurm", "install", str(tarball), "--shared-path", str(tarball), "-o", str(out)], capsys
    )
    assert shared.code == 0 and "sbcast" not in out.read_text()
    missing = run(["slurm", "install", str(tmp_path / "nope.tar"), "-o", str(out)], capsys)
    assert missing.code == 2 and "no such tarball" in missing.err
    ray = run(["slurm", "ray", "--prefix", "/opt/v-%n", "-o", str(tmp_path / "ray.sbatch")], capsys)
    assert ray.code == 0 and '/ray" start --head' in (tmp_path / "ray.sbatch").read_text()
    assert "HF_HUB_OFFLINE=1" in (tmp_path / "ray.sbatch").read_text()
    lint(tmp_path / "ray.sbatch")


def test_the_served_mode_fetches_on_every_node_and_needs_an_http_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "job.sbatch"
    url = "http://head:8000/verl-bundle-x/"
    r = run(["slurm", "install", "--from-url", url, "-o", str(out)], capsys)
    assert r.code == 0 and r.last_line == f"sbatch {out}"
    text = out.read_text()
    assert "FROM_URL=http://head:8000/verl-bundle-x  #" in text and "sbcast" not in text
    assert 'set -- --from "$FROM_URL" --work "$root"' in text
    assert subprocess.run(["bash", "-n", str(out)], check=False).returncode == 0
    lint(out)
    shared = [str(tmp_path / "x.tar"), "--shared-path", str(tmp_path), "-o", str(out)]
    plain = run(["slurm", "install", *shared, "--gather", str(tmp_path / "g")], capsys)
    assert plain.code == 0 and "FROM_URL=''  #" in out.read_text()
    for args, says in [
        ([], "give the bundle tarball, or --from-url URL"),
        (["--from-url", "ftp://u:pw@head/b"], "--from-url ftp://u:****@head/b: give the http://"),
        (["--from-url", url, "--no-network"], "--from-url needs the network"),
    ]:
        bad = run(["slurm", "install", *args, "-o", str(out)], capsys)
        assert bad.code == 2 and says in bad.err, bad.err


def lint(script: Path) -> None:
    if shutil.which("shellcheck") is None:
        return  # `make lint` needs it anyway; the syntax was checked with bash -n
    check = subprocess.run(
        ["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout


@pytest.mark.slow
def test_two_nodes_install_offline_and_gather_their_doctor_results(
    slurm: Slurm,
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    netns_prefix()  # skips where the kernel refuses a network namespace
    gather = tmp_path / "results"
    out = tmp_path / "install.sbatch"
    r = run(
        [
            *("slurm", "install", str(built_bundle[0]), "--nodes", "2"),
            *("--prefix", str(tmp_path / "prefix-%n"), "--gather", str(gather)),
            *("--no-network", "--python", python310(), "-o", str(out)),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    job = slurm.run("sbatch", "--wait", "--chdir", str(tmp_path), str(out), timeout=1200)
    log = "\n".join(p.read_text(errors="replace") for p in gather.glob("*.log"))
    assert job.returncode == 0, job.stdout + job.stderr + log
    for node in NODES:
        assert (gather / f"{node}.install.rc").read_text().strip() == "0", log
        assert (tmp_path / f"prefix-{node}" / "bin" / "python").exists()
        doc = json.loads((gather / f"{node}.json").read_text())
        assert doc["command"] == "doctor" and doc["result"]["host"]["fingerprint"]
    report = run(["fleet", "report", str(gather), "--json"], capsys)
    result = json.loads(report.out)["result"]
    assert [n["file"] for n in result["nodes"]] == ["n1.json", "n2.json"]
    assert not [d for d in result["drift"] if d["fact"] == "fingerprint"]


@pytest.mark.slow
def test_two_nodes_install_from_one_served_copy(
    slurm: Slurm,
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = built_bundle[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(400):  # until it answers (a readiness loop, not an assertion)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        gather, out = tmp_path / "results", tmp_path / "install.sbatch"
        url = f"http://127.0.0.1:{port}/{root.name}/"
        r = run(
            [
                *("slurm", "install", "--from-url", url, "--nodes", "2"),
                *("--prefix", str(tmp_path / "prefix-%n"), "--gather", str(gather)),
                *("--python", python310(), "-o", str(out)),
            ],
            capsys,
        )
        assert r.code == 0, r.err
        job = slurm.run("sbatch", "--wait", "--chdir", str(tmp_path), str(out), timeout=1200)
    finally:
        server.terminate()
        server.wait()
    log = "\n".join(p.read_text(errors="replace") for p in gather.glob("*.log"))
    assert job.returncode == 0, job.stdout + job.stderr + log
    for node in NODES:
        assert (gather / f"{node}.install.rc").read_text().strip() == "0", log
        assert "install.sh: fetched " in (gather / f"{node}.install.log").read_text()
        doc = json.loads((gather / f"{node}.json").read_text())
        assert doc["command"] == "doctor" and doc["result"]["host"]["fingerprint"]


def test_paths_in_the_script_and_the_submit_line_are_resolved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`../` in what the user typed is not carried into the script (issue 26)."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "bundles" / "verl-bundle-x").mkdir(parents=True)
    tarball = tmp_path / "bundles" / "b.tar"
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(tmp_path / "bundles"), "verl-bundle-x"])
    up = tmp_path / "cluster" / ".."
    out, gather = up / "job.sbatch", up / "results"
    r = run(
        [
            "slurm",
            "install",
            str(up / "bundles" / "b.tar"),
            "-o",
            str(out),
            "--gather",
            str(gather),
        ],
        capsys,
    )
    assert r.code == 0 and r.last_line == f"sbatch {tmp_path / 'job.sbatch'}"
    text = (tmp_path / "job.sbatch").read_text()
    assert str(tarball) in text and str(tmp_path / "results") in text
    assert "/../" not in text
