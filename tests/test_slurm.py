"""`verl-bundle slurm install` writes an sbatch script that a real Slurm (tests/slurm.py: two
slurmd on this machine) runs end to end: the tarball sbcast to each node, the install into a
separate prefix per node, one result per node and the run's record gathered for the fleet
report, and the job failing when a node fails. Values from outside (a tarball's name, paths,
URLs) are refused or travel quoted: nothing in them runs. The Ray script is test_slurm_ray.py."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.airgap import netns_prefix, python310
from support.cli import run
from support.fakebundle import bundle_id, fake_bundle
from support.slurm import NODES, Slurm, lint, started

HOSTILE = ("a\nb", "$(touch PWNED)", "{{ lookup('pipe', 'touch PWNED') }}", "`touch PWNED`")

# One Slurm (munged, slurmctld, two slurmd) for the module, on one xdist worker (make test runs
# with --dist loadgroup): two workers would start two clusters side by side.
pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    with started(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def submit(slurm: Slurm, script: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """sbatch --wait, with the nodes' TMPDIR under `tmp` (nothing left in /tmp)."""
    (tmp / "node-tmp").mkdir(exist_ok=True)
    return subprocess.run(
        ["sbatch", "--wait", "--chdir", str(tmp), str(script)],
        env={**slurm.env, "TMPDIR": str(tmp / "node-tmp"), **env},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def test_the_script_is_written_and_names_its_submit_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = fake_bundle(tmp_path)
    out = tmp_path / "job.sbatch"
    r = run(
        ["slurm", "install", str(tarball), "--nodes", "3", "-o", str(out), "--prefix", "/opt/v-%n"],
        capsys,
    )
    assert r.code == 0 and r.last_line == f"sbatch --wait {out}"
    text = out.read_text()
    assert "#SBATCH --nodes=3" in text and 'sbcast --compress --force "$SOURCE"' in text
    assert "NAME=verl-bundle-fake" in text and "PREFIX=/opt/v-%n" in text
    assert f"EXPECT_BUNDLE={bundle_id(tarball)}" in text and "MODE=sbcast" in text
    assert 'exit "$status"' in text  # the job fails when a node failed
    assert out.stat().st_mode & 0o777 == 0o755
    assert subprocess.run(["bash", "-n", str(out)], check=False).returncode == 0
    lint(out)
    shared = run(
        ["slurm", "install", str(tarball), "--shared-path", str(tarball), "-o", str(out)], capsys
    )
    assert shared.code == 0 and "MODE=shared-tar" in out.read_text()
    assert f"SOURCE={tarball}  #" in out.read_text()
    missing = run(["slurm", "install", str(tmp_path / "nope.tar"), "-o", str(out)], capsys)
    assert missing.code == 2 and "no such tarball" in missing.err
    # No SHA256SUMS, so no identity for the nodes to check before they install: refused.
    bare = tmp_path / "bare.tar"
    with tarfile.open(bare, "w") as tf:
        tf.add(tarball.with_suffix("") / "install.sh", arcname="verl-bundle-fake/install.sh")
    for extra in ([], ["--shared-path", str(bare)]):
        unpinned = run(["slurm", "install", str(bare), *extra, "-o", str(out)], capsys)
        assert unpinned.code == 2 and len(unpinned.err.splitlines()) == 1, unpinned.err
        assert "no verl-bundle-fake/SHA256SUMS in it: not a bundle" in unpinned.err


def test_install_options_pass_through_both_engines_checked_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: --quick, --repair, --require-gpu and --skip-phase reach every node's
    install.sh, from one list (cluster/values.py InstallOptions) both engines render."""
    tarball = fake_bundle(tmp_path)
    opts = ["--quick", "--repair", "--require-gpu", "--skip-phase", "flash-attn"]
    out = tmp_path / "job.sbatch"
    r = run(["slurm", "install", str(tarball), *opts, "-o", str(out)], capsys)
    assert r.code == 0, r.err
    want = "--quick --repair --require-gpu --skip-phase flash-attn"
    assert f"INSTALL_OPTS='{want}'  #" in out.read_text()
    lint(out)
    book = tmp_path / "install.yml"
    r = run(["ansible", "install", str(tarball), *opts, "-o", str(book)], capsys)
    assert r.code == 0, r.err
    listed = ", ".join(f'!unsafe "{w}"' for w in want.split())
    assert f"verl_install_args: [{listed}]" in book.read_text()
    for cmd in (["slurm", "install"], ["ansible", "install"]):
        for bad in ("../x", "a b", "$(touch PWNED)"):
            r = run([*cmd, str(tarball), "--skip-phase", bad, "-o", str(tmp_path / "x")], capsys)
            assert r.code == 2 and "not a phase name" in r.err and len(r.err.splitlines()) == 1
            assert not (tmp_path / "x").exists()


def test_the_served_mode_fetches_on_every_node_and_needs_an_http_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "job.sbatch"
    url = "http://head:8000/verl-bundle-x/"
    r = run(["slurm", "install", "--from-url", url, "-o", str(out)], capsys)
    assert r.code == 0 and r.last_line == f"sbatch --wait {out}"
    text = out.read_text()
    assert "FROM_URL=http://head:8000/verl-bundle-x  #" in text and "MODE=url" in text
    assert 'args=(--from "$FROM_URL" --work "$root")' in text
    assert "EXPECT_BUNDLE=''  #" in text  # not pinned
    pinned = run(
        ["slurm", "install", "--from-url", url, "--bundle-sha256", "AB" * 32, "-o", str(out)],
        capsys,
    )
    assert pinned.code == 0 and f"EXPECT_BUNDLE={'ab' * 32}  #" in out.read_text()
    lint(out)
    assert subprocess.run(["bash", "-n", str(out)], check=False).returncode == 0
    lint(out)
    secret = run(["slurm", "install", "--from-url", "http://u:pw@head/b/", "-o", str(out)], capsys)
    assert secret.code == 0 and out.stat().st_mode & 0o777 == 0o700  # a password: owner only
    for args, says in [
        ([], "give the bundle tarball, or --from-url URL"),
        (["--from-url", "ftp://u:pw@head/b"], "--from-url ftp://u:****@head/b: give the http://"),
        (["--from-url", url, "--no-network"], "--from-url needs the network"),
        (["--from-url", "http://head/a b/"], "holds spaces or control characters"),
        (["--from-url", "http://head/x$(touch%20PWNED)/"], "is not a plain bundle name"),
        (["--from-url", url, "--bundle-sha256", "$(touch PWNED)"], "give the 64 hex digits"),
        (["--bundle-sha256", "a" * 64, str(out)], "pins a served bundle: give it with --from-url"),
    ]:
        bad = run(["slurm", "install", *args, "-o", str(out)], capsys)
        assert bad.code == 2 and says in bad.err and len(bad.err.splitlines()) == 1, bad.err


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_bundle_name_is_refused_in_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = tmp_path / "b.tar"
    with tarfile.open(tarball, "w") as tf:
        info = tarfile.TarInfo(f"{name}/install.sh")
        tf.addfile(info)
    for cmd in (["slurm", "install"], ["ansible", "install"]):
        r = run([*cmd, str(tarball), "-o", str(tmp_path / "out")], capsys)
        assert r.code == 2 and "is not a plain bundle name" in r.err, r.err
        assert len(r.err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_hostile_paths_are_refused_or_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = fake_bundle(tmp_path)
    out = tmp_path / "job.sbatch"
    for opt in ("--prefix", "--gather", "--python"):
        bad = run(["slurm", "install", str(tarball), opt, "/x\ny", "-o", str(out)], capsys)
        assert bad.code == 2 and "control character" in bad.err and not out.exists(), bad.err
    spaced = run(["slurm", "install", str(tarball), "--gather", "/a b", "-o", str(out)], capsys)
    assert spaced.code == 2 and "cannot go on an #SBATCH line" in spaced.err
    for value in HOSTILE[1:]:
        prefix = f"/opt/v-%n{value}"
        r = run(["slurm", "install", str(tarball), "--prefix", prefix, "-o", str(out)], capsys)
        assert r.code == 0, r.err
        # The variables' block, run by bash: each value comes back as it was given.
        block = out.read_text().split("# This run's id")[0]
        echo = subprocess.run(
            ["bash", "-c", block + 'printf %s "$PREFIX"'],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert echo.stdout == prefix and not (tmp_path / "PWNED").exists()


@pytest.mark.slow
def test_a_failed_node_fails_the_job_and_the_report_names_it(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """n2's install fails: the job exits non-zero, n1's copy is removed, n2's kept; the report
    names n2's exit code, a node the run did not have, and a stale result of an older run.
    The prefix holds `$(touch PWNED)`: it is a directory name, nothing runs."""
    tarball = fake_bundle(tmp_path / "b")
    gather, out = tmp_path / "results", tmp_path / "install.sbatch"
    prefix = str(tmp_path / "p-%n$(touch PWNED)")
    Path(prefix.replace("%n", "n2") + ".fail").touch()
    args = ["--prefix", prefix, "--gather", str(gather), "-o", str(out)]
    r = run(["slurm", "install", str(tarball), "--nodes", "2", *args], capsys)
    assert r.code == 0, r.err
    job = submit(slurm, out, tmp_path)
    log = next(gather.glob("slurm-*.out")).read_text()
    assert job.returncode != 0, log
    assert "n1: installed and checked" in log
    kept = [ln for ln in log.splitlines() if ln.startswith("n2: FAILED (install exit 3")]
    assert kept and "the copy is kept on n2 in " in kept[0], log
    n2_copy = Path(kept[0].split(" in ")[-1].split(" for a rerun")[0])
    assert (n2_copy / "bundle" / "install.sh").is_file()  # kept, unpacked, for a rerun
    # n1's copy is gone, and each node's tarball; what is left is n2's unpacked copy.
    assert [
        p for p in (tmp_path / "node-tmp").rglob("*") if p.is_dir() and p.parent.name == "node-tmp"
    ]
    left = {p.relative_to(tmp_path / "node-tmp").parts[1] for p in n2_copy.parent.iterdir()}
    assert left == {n2_copy.name} and n2_copy.name.startswith("n2.")
    assert (Path(prefix.replace("%n", "n1")) / ".verl-bundle" / "fingerprint").is_file()
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()
    record = json.loads((gather / "n2.json").read_text())["result"]
    assert record["install"]["rc"] == 3 and record["bundle"] == bundle_id(tarball)
    report = run(["fleet", "report", str(gather)], capsys)
    assert report.code == 1
    assert "FAIL n2: install failed: exit 3 (the bundle is damaged)" in report.out
    assert "FAIL n1" not in report.out and "2 node(s) reported, 2 expected" in report.last_line
    expect = run(["fleet", "report", str(gather), "--expect", "n[1-3]", "--json"], capsys)
    result = json.loads(expect.out)["result"]
    assert expect.code == 1 and result["missing"] == ["n3"]
    assert ("n3", "missing: no result from this node") in {
        (p["node"], p["what"]) for p in result["problems"]
    }
    # A rerun on one node: the other node's file is an older run's; the job runs the report
    # (this host's verl-bundle is reachable from the nodes here) and fails on it.
    Path(prefix.replace("%n", "n2") + ".fail").unlink()
    r = run(["slurm", "install", str(tarball), "--nodes", "1", *args], capsys)
    again = submit(slurm, out, tmp_path)
    log = sorted(gather.glob("slurm-*.out"))[-1].read_text()
    assert again.returncode != 0, log
    assert "FAIL n2: not one of the expected nodes (a result of run 1-" in log
    assert "FAIL n1" not in log and "n1: installed and checked" in log


@pytest.mark.slow
def test_a_tarball_the_batch_node_cannot_read_is_one_line(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = fake_bundle(tmp_path / "b")
    gather, out = tmp_path / "results", tmp_path / "install.sbatch"
    r = run(["slurm", "install", str(tarball), "--gather", str(gather), "-o", str(out)], capsys)
    assert r.code == 0, r.err
    tarball.unlink()  # the path was this host's only: the batch step does not see it
    job = submit(slurm, out, tmp_path)
    log = next(gather.glob("slurm-*.out")).read_text()
    assert job.returncode != 0
    said = [ln for ln in log.splitlines() if ln.startswith("verl-bundle: ")]
    assert said == [
        f"verl-bundle: {tarball} is not readable on {said[0].split(' on ')[1].split(',')[0]}, "
        "where this job's batch step runs: put the tarball on storage every node sees and "
        "write the script again with --shared-path PATH"
    ], log
    fake_bundle(tmp_path / "b", version="v2")  # another bundle at the same path
    job = submit(slurm, out, tmp_path)
    log = sorted(gather.glob("slurm-*.out"))[-1].read_text()
    assert job.returncode != 0 and "is not the tarball this script was written for" in log


def job_log(gather: Path) -> str:
    """The newest job's output."""
    return max(gather.glob("slurm-*.out"), key=lambda p: int(p.stem.split("-")[1])).read_text()


@pytest.mark.slow
def test_the_job_ends_with_the_fleet_reports_exit_code(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34 F4: both nodes install and pass; a result the report cannot read (a stray
    notes.json in --gather) ends the job with the report's exit 2, never 0; with no reporter
    reachable from the batch node the nodes were not compared: exit 5, said in one line."""
    tarball = fake_bundle(tmp_path / "b")
    gather, out = tmp_path / "results", tmp_path / "install.sbatch"
    args = ["--prefix", str(tmp_path / "p-%n"), "--gather", str(gather), "-o", str(out)]
    assert run(["slurm", "install", str(tarball), "--nodes", "2", *args], capsys).code == 0
    job = submit(slurm, out, tmp_path, VLLM_USE_V1="1", HF_TOKEN="hf_secret_value")  # noqa: S106 - a test value
    assert job.returncode == 0, job_log(gather)
    assert job_log(gather).splitlines()[-1] == "fleet: 2 node(s) agree"
    # The variables that change a run are gathered from the doctor's list; a secret as a hash.
    env = json.loads((gather / "n1.json").read_text())["result"]["env"]
    assert env["VLLM_USE_V1"] == "1" and env["HF_TOKEN"].startswith("sha256:")
    assert "hf_secret_value" not in "".join(p.read_text() for p in gather.glob("*.json"))
    (gather / "notes.json").write_text("not json\n")
    unreadable = submit(slurm, out, tmp_path)
    log = job_log(gather)
    assert unreadable.returncode == 2, log
    assert "notes.json: not readable JSON" in log.splitlines()[-1], log
    (gather / "notes.json").unlink()
    text = out.read_text()
    out.write_text(text.replace(f"REPORTER={sys.executable}", "REPORTER=/nonexistent/python3"))
    alone = submit(slurm, out, tmp_path)
    log = job_log(gather)
    assert alone.returncode == 5, log
    assert log.splitlines()[-1] == (
        "verl-bundle: the nodes were not compared (verl-bundle is not reachable from "
        f"{socket.gethostname()}): run verl-bundle fleet report {gather}"
    )


@pytest.mark.slow
def test_quick_and_skip_phase_reach_every_nodes_install(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = fake_bundle(tmp_path / "b")
    gather, out = tmp_path / "results", tmp_path / "install.sbatch"
    args = ["--prefix", str(tmp_path / "p-%n"), "--gather", str(gather), "-o", str(out)]
    extra = ["--quick", "--skip-phase", "flash-attn"]
    assert run(["slurm", "install", str(tarball), "--nodes", "2", *args, *extra], capsys).code == 0
    job = submit(slurm, out, tmp_path)
    assert job.returncode == 0, job_log(gather)
    for node in NODES:
        given = (tmp_path / f"p-{node}" / ".verl-bundle" / "install-args").read_text()
        assert given.startswith("--quick --skip-phase flash-attn --prefix "), given


@pytest.mark.slow
def test_a_node_checks_the_bundle_before_it_installs(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34 F8: the script is written for v1 on shared storage; v2 is there by the time the
    job runs: no node installs it or runs its doctor, each says so with both hashes."""
    tarball = fake_bundle(tmp_path / "b", "v1")
    gather, out = tmp_path / "results", tmp_path / "install.sbatch"
    prefix = tmp_path / "p-%n"
    args = ["--shared-path", str(tarball), "--prefix", str(prefix), "--gather", str(gather)]
    assert (
        run(["slurm", "install", str(tarball), "--nodes", "2", *args, "-o", str(out)], capsys).code
        == 0
    )
    want = bundle_id(tarball)
    fake_bundle(tmp_path / "b", "v2")  # another bundle at the same path
    got = bundle_id(tarball)
    job = submit(slurm, out, tmp_path)
    log = job_log(gather)
    assert job.returncode == 1, log
    for node in NODES:
        assert not Path(str(prefix).replace("%n", node)).exists()  # nothing installed
        said = (gather / f"{node}.install.log").read_text()
        assert (
            f"the bundle read here (SHA256SUMS {got}) is not the one this script was written for ({want})"
            in said
        )
        record = json.loads((gather / f"{node}.json").read_text())["result"]
        assert record["install"]["rc"] == 3 and record["doctor_rc"] is None
        assert record["bundle"] == got and not (gather / f"{node}.doctor.err").exists()
    assert f"FAIL n1: its bundle {got[:12]} is not the run's {want[:12]}" in log


@pytest.mark.slow
def test_two_nodes_install_offline_and_gather_their_results(
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
    job = submit(slurm, out, tmp_path)
    log = "\n".join(p.read_text(errors="replace") for p in gather.glob("*.log"))
    assert job.returncode == 0, job.stdout + job.stderr + log
    for node in NODES:
        assert (tmp_path / f"prefix-{node}" / "bin" / "python").exists()
        record = json.loads((gather / f"{node}.json").read_text())["result"]
        assert record["install"]["rc"] == 0 and record["doctor_rc"] == 0
        assert json.loads(record["doctor_output"])["result"]["host"]["fingerprint"]
    assert not list((tmp_path / "node-tmp").iterdir())  # each node's copy removed
    job_log = next(gather.glob("slurm-*.out")).read_text()
    assert job_log.splitlines()[-1] == "fleet: 2 node(s) agree", job_log  # the job's own report
    report = run(["fleet", "report", str(gather), "--json"], capsys)
    result = json.loads(report.out)["result"]
    assert report.code == 0, report.out
    assert [n["file"] for n in result["nodes"]] == ["n1.json", "n2.json"]
    assert result["expected"] == ["n1", "n2"] and result["missing"] == []


@pytest.mark.slow
def test_a_package_removed_on_one_node_is_named_and_repaired(
    slurm: Slurm,
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Installed on both nodes; pylatexenc uninstalled on n2 afterwards: the next job fails and
    the fleet report names n2, the package and --repair (the live fingerprint); a job written
    with --repair reinstalls it there and the nodes agree again."""
    netns_prefix()
    gather = tmp_path / "results"

    def job(*extra: str) -> subprocess.CompletedProcess[str]:
        out = tmp_path / "install.sbatch"
        r = run(
            [
                *("slurm", "install", str(built_bundle[0]), "--nodes", "2"),
                *("--prefix", str(tmp_path / "prefix-%n"), "--gather", str(gather)),
                *("--no-network", "--python", python310(), "-o", str(out), *extra),
            ],
            capsys,
        )
        assert r.code == 0, r.err
        return submit(slurm, out, tmp_path)

    first = job()
    assert first.returncode == 0, first.stdout + first.stderr
    n2 = tmp_path / "prefix-n2"
    pip = [*netns_prefix(), str(n2 / "bin" / "python"), "-m", "pip", "uninstall", "-y"]
    gone = subprocess.run([*pip, "pylatexenc"], capture_output=True, text=True, check=False)
    assert gone.returncode == 0, gone.stderr

    # A plain rerun trusts its finished phases: n2 fails, and the report says what and how.
    rerun = job()
    assert rerun.returncode != 0, rerun.stdout
    report = run(["fleet", "report", str(gather), "--json"], capsys)
    assert report.code == 1, report.out
    result = json.loads(report.out)["result"]
    named = [p for p in result["problems"] if p["node"] == "n2"]
    assert named and all(p["node"] != "n1" for p in result["problems"]), result["problems"]
    assert any("pylatexenc" in p["what"] for p in named), named
    assert any("--repair" in p["fix"] for p in named), named

    repaired = job("--repair")
    log = "\n".join(p.read_text(errors="replace") for p in gather.glob("*.log"))
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr + log
    assert "INSTALL_OPTS=--repair  #" in (tmp_path / "install.sbatch").read_text()
    assert list((n2 / "lib").glob("python3*/site-packages/pylatexenc-*.dist-info"))
    report = run(["fleet", "report", str(gather)], capsys)
    assert report.code == 0 and report.last_line == "fleet: 2 node(s) agree", report.out


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
        pin = hashlib.sha256((root / "SHA256SUMS").read_bytes()).hexdigest()
        r = run(
            [
                *("slurm", "install", "--from-url", url, "--nodes", "2"),
                *("--bundle-sha256", pin),
                *("--prefix", str(tmp_path / "prefix-%n"), "--gather", str(gather)),
                *("--python", python310(), "-o", str(out)),
            ],
            capsys,
        )
        assert r.code == 0, r.err
        job = submit(slurm, out, tmp_path)
    finally:
        server.terminate()
        server.wait()
    log = "\n".join(p.read_text(errors="replace") for p in gather.glob("*.log"))
    assert job.returncode == 0, job.stdout + job.stderr + log
    for node in NODES:
        said = (gather / f"{node}.install.log").read_text()
        assert "install.sh: fetched " in said and f"pinned to SHA256SUMS {pin[:16]}" in said
        record = json.loads((gather / f"{node}.json").read_text())["result"]
        assert (
            record["install"]["rc"] == 0
            and json.loads(record["doctor_output"])["result"]["host"]["fingerprint"]
        )
    report = run(["fleet", "report", str(gather)], capsys)
    assert report.code == 0 and report.last_line == "fleet: 2 node(s) agree", report.out


def test_paths_in_the_script_and_the_submit_line_are_resolved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`../` in what the user typed is not carried into the script (issue 26)."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "bundles" / "verl-bundle-x").mkdir(parents=True)
    (tmp_path / "bundles" / "verl-bundle-x" / "SHA256SUMS").write_text("")
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
    assert r.code == 0 and r.last_line == f"sbatch --wait {tmp_path / 'job.sbatch'}"
    text = (tmp_path / "job.sbatch").read_text()
    assert str(tarball) in text and str(tmp_path / "results") in text
    assert "/../" not in text
