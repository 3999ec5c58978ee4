"""`verl-bundle slurm ray` writes an sbatch script that starts a real Ray cluster on the real
two-node Slurm of tests/slurm.py: each node's Ray from its own venv (a venv per node here, with
the test venv's real Ray on its path), every node registered before the command runs, the
command on the head with RAY_ADDRESS and verl's overrides, its exit code the job's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import run
from support.slurm import Slurm, lint, started

# One Slurm for the module and a Ray cluster on fixed ports: with every other test that starts
# Slurm, on one xdist worker (make test runs with --dist loadgroup).
# Every test here waits for a Ray head the script gives 300 s to start on a loaded node (and
# its retries): the test's limit is for a hang, above the script's own bounds.
pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[1]

# The tiny job, as a recipe of verl's would be (`python -m recipe.tiny.main_tiny`, its Hydra
# config composing verl's ppo_trainer): a Ray task pinned to each node reports that node's
# Python and environment, and the driver what ray.nodes() and Ray's authentication say.
CHECK = """
import json, os, sys

class hydra:  # the decorator verl's recipes carry, read by the script (Hydra is not needed)
    @staticmethod
    def main(**kw):
        return lambda f: f

@hydra.main(config_path="config", config_name="tiny_trainer", version_base=None)
def main():
    import ray
    from ray._raylet import AuthenticationMode, get_authentication_mode
    ray.init(logging_level="ERROR", log_to_driver=False)

    @ray.remote
    def where():
        import os, sys
        return {"prefix": sys.prefix, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE")}

    nodes = {n: ray.get(where.options(resources={"verl_node_" + n: 0.01}).remote()) for n in NODES}
    names = ("RAY_ADDRESS", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "RAY_AUTH_MODE")
    env = {k: os.environ.get(k) for k in names}
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    token = get_authentication_mode() == AuthenticationMode.TOKEN
    print("RESULT " + json.dumps({"driver": sys.prefix, "nodes": nodes, "argv": sys.argv[1:],
                                  "alive": alive, "token": token, **env}))
    sys.exit(3)

NODES = os.environ.get("CHECK_NODES", "n1,n2").split(",")
main()
"""


def recipe(cwd: Path) -> tuple[str, str]:
    """`python -m` of the tiny job as a recipe under `cwd` (the job's directory): its module,
    its Hydra config listing verl's ppo_trainer among its defaults."""
    package = cwd / "recipe" / "tiny"
    (package / "config").mkdir(parents=True)
    (package / "main_tiny.py").write_text(CHECK)
    (package / "config" / "tiny_trainer.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\ndata:\n  gen_batch_size: 4\n"
    )
    return "-m", "recipe.tiny.main_tiny"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    with started(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def test_the_ray_script_follows_verls_recipe_and_states_its_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ray.sbatch"
    r = run(["slurm", "ray", "--prefix", "/opt/v-%n", "-o", str(out)], capsys)
    assert r.code == 0 and r.last_line.startswith(f"sbatch {out} python3 -m verl.trainer")
    text = out.read_text()
    assert "# Per node: all CPUs; all memory; all GPUs (--exclusive)." in text
    assert (
        "#SBATCH --exclusive\n#SBATCH --mem=0\n" in text and "#SBATCH --gpus-per-node" not in text
    )
    assert 'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")' in text
    assert '--num-cpus="$cpus" --num-gpus="$gpus" --temp-dir="$tmp"' in text
    assert "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1" in text
    assert "hostname --ip-address" not in text.split("# 127.0.1.1")[1]
    assert "PORT=0  #" in text  # per job: Ray chooses a free port on the head
    assert "--min-worker-port=0 --max-worker-port=0" in text and "unset RAY_AUTH_TOKEN_PATH" in text
    assert "~/.ray/auth_token" in text and '"$HOME/.ray' not in text  # named, never used
    r = run(
        [
            *("slurm", "ray", "--gpus-per-node", "8", "--cpus-per-task", "64"),
            *("--mem", "200G", "--ifname", "ib0", "-o", str(out)),
        ],
        capsys,
    )
    text = out.read_text()
    assert "#SBATCH --cpus-per-task=64\n#SBATCH --mem=200G\n#SBATCH --gpus-per-node=8\n" in text
    assert "#SBATCH --exclusive" not in text and "IFNAME=ib0  #" in text and "GPUS=8  #" in text
    assert subprocess.run(["bash", "-n", str(out)], check=False).returncode == 0
    lint(out)
    for args, says in [
        (["--gpus-per-node", "some"], "give a count (8), 0 for none, or all"),
        (["--mem", "lots"], "give sbatch's size"),
        (["--ifname", "eth0 -x"], "not a network interface name"),
        (["--port", "16379"], "inside Ray's worker-port range (10002-19999)"),
        (["--port", "8265"], "Ray's default port for its dashboard"),
        (["--port", "80"], "not a port Ray's head can take (1024-65535)"),
        (["--prefix", "/opt/v\n%n"], "control character"),
    ]:
        bad = run(["slurm", "ray", *args, "-o", str(out)], capsys)
        assert bad.code == 2 and says in bad.err and len(bad.err.splitlines()) == 1, bad.err


def test_a_hostile_prefix_is_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ray.sbatch"
    prefix = "/opt/v-%n$(touch PWNED)`touch PWNED`"
    assert run(["slurm", "ray", "--prefix", prefix, "-o", str(out)], capsys).code == 0
    block = out.read_text().split("export HF_HUB_OFFLINE")[0]
    echo = subprocess.run(
        ["bash", "-c", block + 'printf %s "$PREFIX"'], cwd=tmp_path, capture_output=True, text=True
    )
    assert echo.stdout == prefix and not (tmp_path / "PWNED").exists()


def node_venv(prefix: Path, with_ray: bool = True) -> None:
    """A venv standing for one node's installed bundle: its own bin/python, this test venv's
    Ray on its path, a bin/ray of its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    if not with_ray:
        return
    site = next((prefix / "lib").glob("python*/site-packages"))
    (site / "test-ray.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    ray = prefix / "bin" / "ray"
    ray.write_text(
        f"#!{prefix}/bin/python\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n"
    )
    ray.chmod(0o755)


def ray_installed() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("ray is not installed in this venv (pip install -e '.[test]')")


@pytest.fixture
def node_tmp() -> Iterator[Path]:
    """The nodes' TMPDIR: short, as Ray's socket paths need (at most 107 bytes), and removed."""
    path = Path(tempfile.mkdtemp(prefix="vr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def submit(
    slurm: Slurm, script: Path, tmp: Path, node_tmp: Path, *command: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    # HOME is the test's own: Ray never reads or writes this machine's ~/.ray.
    (tmp / "home").mkdir(exist_ok=True)
    env = {**slurm.env, "TMPDIR": str(node_tmp), "HOME": str(tmp / "home"), **extra}
    env["RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION"] = "0.02"  # a small plasma store per node
    try:
        return subprocess.run(
            ["sbatch", "--wait", "--chdir", str(tmp), str(script), *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=840,  # under the test's 900 s, so that a hang fails with the job's lines
            check=False,
        )
    except subprocess.TimeoutExpired:
        logs = "".join(p.read_text(errors="replace") for p in sorted(tmp.glob("verl-ray-*.out")))
        slurm.run("scancel", "--full", "-p", "test", timeout=30)
        pytest.fail(f"the job did not end within 840 s; its output:\n{logs[-4000:]}")
    finally:
        _stop_leftovers(node_tmp)


def _stop_leftovers(node_tmp: Path) -> list[str]:
    """Ray processes of this test still running (their command line names its temporary
    directory): stopped, and returned so that the test fails on them."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(node_tmp) in cmd and int(proc.name) != os.getpid():
            found.append(cmd[:200])
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
    return found


def write_ray(tmp: Path, capsys: pytest.CaptureFixture[str], *extra: str, nodes: int = 2) -> Path:
    """The Ray script for `nodes` nodes on the loopback; the head's port per job (the
    default) unless `extra` gives one."""
    out = tmp / "ray.sbatch"
    r = run(
        [
            *("slurm", "ray", "--nodes", str(nodes), "--prefix", str(tmp / "prefix-%n")),
            *("--ifname", "lo", "--min-open-files", "4096"),
            *("-o", str(out), *extra),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    return out


@pytest.mark.slow
def test_a_real_two_node_ray_cluster_in_token_mode_runs_a_recipe_in_each_nodes_venv(
    slurm: Slurm, tmp_path: Path, node_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37 on the real two-node Slurm with Ray 2.52+: a stale ~/.ray/auth_token in the
    job's (shared) home, as any earlier ray.init() leaves it, made the workers' `ray start`
    fail with a GCS connection error; the job's own token puts both nodes in token mode and
    the home's token is neither used nor changed. The command is a recipe's entry point (its
    config composes verl's trainer config): it gets the job's trainer.nnodes and
    n_gpus_per_node; the head's address is the one Ray reports."""
    ray_installed()
    for node in ("n1", "n2"):
        node_venv(tmp_path / f"prefix-{node}")
    kept_server_program(tmp_path / "prefix-n1")  # the head reads the recipe with it
    stale = tmp_path / "home" / ".ray" / "auth_token"
    stale.parent.mkdir(parents=True)
    stale.write_text("e" * 64)
    stale.chmod(0o644)
    out = write_ray(tmp_path, capsys, "--wait", "300")
    job = submit(slurm, out, tmp_path, node_tmp, "python", *recipe(tmp_path), "x=1")
    log = next(tmp_path.glob("verl-ray-*.out")).read_text(errors="replace")
    assert job.returncode == 3, log[-4000:]  # the command's exit code is the job's
    line = next(ln for ln in log.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["driver"] == str(tmp_path / "prefix-n1")
    assert result["nodes"] == {
        n: {"prefix": str(tmp_path / f"prefix-{n}"), "HF_HUB_OFFLINE": "1"} for n in ("n1", "n2")
    }
    assert result["argv"] == ["x=1", "trainer.nnodes=2", "trainer.n_gpus_per_node=0"]
    assert len(result["alive"]) == 2 and result["token"] and result["RAY_AUTH_MODE"] == "token"
    reported = next(ln for ln in log.splitlines() if "(as Ray reports it)" in ln)
    assert f"at {result['RAY_ADDRESS']} (as Ray reports it)" in reported
    assert result["NCCL_SOCKET_IFNAME"] == result["GLOO_SOCKET_IFNAME"] == "lo"
    assert (
        "python -m recipe.tiny.main_tiny: trainer: " in log
        and "its defaults list ppo_trainer" in log
    )
    assert "token authentication, with a token of this job's own" in log
    assert "verl-ray: Ray is up: 2 node(s), 0 GPU(s) each" in log
    assert "verl-ray: n2: worker with 1 CPU(s), 0 GPU(s)" in log
    assert stale.read_text() == "e" * 64 and sorted(os.listdir(stale.parent)) == ["auth_token"]
    assert not _stop_leftovers(node_tmp) and not list(node_tmp.iterdir())


@pytest.mark.slow
def test_two_ray_jobs_on_one_node_do_not_collide(
    slurm: Slurm, tmp_path: Path, node_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: two one-node Ray jobs at once on this one machine (n1 and n2 are one host):
    each head's port is its own (Ray chooses it), and every other port of Ray's too."""
    ray_installed()
    for node in ("n1", "n2"):
        node_venv(tmp_path / f"prefix-{node}")
    out = write_ray(tmp_path, capsys, "--wait", "300", nodes=1)
    (tmp_path / "home").mkdir()
    env = {**slurm.env, "TMPDIR": str(node_tmp), "HOME": str(tmp_path / "home")}
    env["RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION"] = "0.02"
    jobs = []
    for i in (1, 2):
        (tmp_path / f"job{i}").mkdir()
        cmd = ["sbatch", "--wait", "--chdir", str(tmp_path / f"job{i}"), str(out), "python", "-c"]
        code = "import os; os.environ['CHECK_NODES'] = os.environ['SLURMD_NODENAME']\n" + CHECK
        jobs.append(subprocess.Popen([*cmd, code], env=env, stdout=subprocess.DEVNULL))
    try:
        for job in jobs:
            job.wait(timeout=900)
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
        _stop_leftovers(node_tmp)
    results = []
    for i in (1, 2):
        log = next((tmp_path / f"job{i}").glob("verl-ray-*.out")).read_text(errors="replace")
        assert jobs[i - 1].returncode == 3, log[-3000:]
        line = next(ln for ln in log.splitlines() if ln.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
    assert results[0]["RAY_ADDRESS"] != results[1]["RAY_ADDRESS"]
    assert all(len(r["alive"]) == 1 for r in results)
    assert not list(node_tmp.iterdir())


FLAKY_RAY = """#!{python}
import json, os, subprocess, sys
state = {state!r}
if sys.argv[1:2] == ["start"] and "--help" not in sys.argv:
    os.makedirs(state, exist_ok=True)
    tries = len(os.listdir(state))
    record = {{"ports": sorted(a for a in sys.argv if "-port=" in a and not a.endswith("=0"))}}
    record["wait"] = os.environ.get("RAY_raylet_start_wait_time_s")
    if tries == 0:  # a try that timed out, leaving a process of its own behind
        temp = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--temp-dir="))
        left = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)", temp + "/leftover"],
            start_new_session=True,
        )
        record["leftover"] = left.pid
        json.dump(record, open(os.path.join(state, "0.json"), "w"))
        sys.exit("Exception: The current node timed out during startup. This could happen "
                 "because some of the raylet failed to startup or the GCS has become overloaded.")
    first = json.load(open(os.path.join(state, "0.json")))
    try:
        with open("/proc/%d/stat" % first["leftover"]) as fh:
            record["leftover_alive"] = fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        record["leftover_alive"] = False
    json.dump(record, open(os.path.join(state, "%d.json" % tries), "w"))
from ray.scripts.scripts import main
sys.exit(main())
"""


@pytest.mark.slow
def test_a_ray_start_that_timed_out_is_tried_again_on_fresh_ports_without_its_leftovers(
    slurm: Slurm, tmp_path: Path, node_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node whose `ray start` timed out (Ray gives the raylet 30 s, raised to 120 s by the
    script, and a loaded node can still miss it) is tried again: what the failed try left running (its command line names the job's
    temporary directory on that node) is stopped first, and the ports are asked for again;
    the second try's Ray registers and the command runs."""
    ray_installed()
    state = tmp_path / "tries"
    for node in ("n1", "n2"):
        prefix = tmp_path / f"prefix-{node}"
        node_venv(prefix)
        ray = prefix / "bin" / "ray"
        ray.write_text(FLAKY_RAY.format(python=prefix / "bin" / "python", state=str(state)))
    out = write_ray(tmp_path, capsys, "--wait", "300", nodes=1)
    job = submit(slurm, out, tmp_path, node_tmp, "python", "-c", "open('RAN', 'w')")
    log = next(tmp_path.glob("verl-ray-*.out")).read_text(errors="replace")
    assert job.returncode == 0 and (tmp_path / "RAN").exists(), log[-3000:]
    assert len(re.findall(r"Ray timed out starting \(load [0-9. ]+\): trying again", log)) == 1
    first, second = (json.loads((state / f"{i}.json").read_text()) for i in (0, 1))
    assert second["leftover_alive"] is False, log[-3000:]
    assert first["ports"] and len(first["ports"]) == len(second["ports"])
    assert first["ports"] != second["ports"]  # asked for again, not the failed try's
    assert first["wait"] == second["wait"] == "120"  # Ray's 30 s for the raylet, raised
    assert not list(node_tmp.iterdir())


@pytest.mark.slow
def test_a_node_that_never_registers_is_named_and_the_command_never_runs(
    slurm: Slurm, tmp_path: Path, node_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray_installed()
    node_venv(tmp_path / "prefix-n1")
    node_venv(tmp_path / "prefix-n2", with_ray=False)  # the bundle was never installed there
    out = write_ray(tmp_path, capsys, "--wait", "20")
    job = submit(slurm, out, tmp_path, node_tmp, "python", "-c", "open('RAN', 'w')")
    log = next(tmp_path.glob("verl-ray-*.out")).read_text(errors="replace")
    assert job.returncode != 0 and not (tmp_path / "RAN").exists(), log[-3000:]
    assert f"verl-ray: n2: no {tmp_path}/prefix-n2/bin/ray: install the bundle there" in log
    assert "verl-ray: after 20s not registered with Ray: n2 (" in log, log[-3000:]
    assert not list(node_tmp.iterdir())  # the head's temporary directory removed on failure
    # A trainer.nnodes that contradicts the job stops it before Ray starts.
    job = submit(
        slurm, out, tmp_path, node_tmp, "python", "-m", "verl.trainer.main_ppo", "trainer.nnodes=4"
    )
    log = sorted(tmp_path.glob("verl-ray-*.out"))[-1].read_text(errors="replace")
    assert job.returncode != 0
    assert "verl-ray: trainer.nnodes=4 given, but this job has 2 node(s)" in log
    assert "starting the Ray head" not in log


def fake_gpus(where: Path, busy: dict[str, int]) -> Path:
    """A real `nvidia-smi` answering for the node it runs on ($SLURMD_NODENAME): eight H100s,
    the first `busy[node]` of them held by a process; its directory, for PATH."""
    from support.toolchain import (
        APPS_ARGS,
        GPU_ARGS,
        H100,
        FakeApp,
        FakeGpu,
        apps_csv,
        gpu_csv,
        topo,
    )

    for node in ("n1", "n2"):
        held = busy.get(node, 0)
        gpus = tuple(FakeGpu(i, H100, 81559, 30000 if i < held else 4) for i in range(8))
        apps = tuple(FakeApp(i, 4000 + i, "python3", 30000) for i in range(held))
        answers = where / "answers" / node
        answers.mkdir(parents=True, exist_ok=True)
        (answers / "gpus").write_text(gpu_csv(gpus, "535.104.05"))
        (answers / "apps").write_text(apps_csv(apps))
        (answers / "topo").write_text(topo(8))
        (answers / "list").write_text(
            "".join(f"GPU {g.index}: {H100} (UUID: {g.uuid})\n" for g in gpus)
        )
    smi = where / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(
        f"#!/bin/sh\nd={shlex.quote(str(where / 'answers'))}/$SLURMD_NODENAME\n"
        f'case "$*" in\n  {shlex.quote(GPU_ARGS)}) cat "$d/gpus" ;;\n'
        f'  {shlex.quote(APPS_ARGS)}) cat "$d/apps" ;;\n  "topo -m") cat "$d/topo" ;;\n'
        '  -L) cat "$d/list" ;;\n  *) echo "Invalid combination"; exit 2 ;;\nesac\n'
    )
    smi.chmod(0o755)
    return smi.parent


def kept_server_program(prefix: Path) -> None:
    """What an install leaves in the prefix: the bundle's lib/ (install/steps.py)."""
    lib = prefix / ".verl-bundle" / "lib" / "verl_bundle"
    shutil.copytree(REPO / "verl_bundle" / "airgap", lib / "airgap")
    (lib / "__init__.py").write_text('"""verl-bundle server side."""\n')


TRAINER = (
    "python",
    "-m",
    "verl.trainer.main_ppo",
    "data.train_batch_size=256",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
)


@pytest.mark.slow
def test_every_node_runs_preflight_in_ray_mode_before_ray_starts(
    slurm: Slurm, tmp_path: Path, node_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two GPU nodes (a real nvidia-smi script answering per node): with two busy GPUs on n2
    the job stops before any Ray starts, naming n2 and the check; with none busy, preflight
    passes on both (no torchrun variable asked for) and the head starts."""
    for node in ("n1", "n2"):
        node_venv(tmp_path / f"prefix-{node}", with_ray=False)
        kept_server_program(tmp_path / f"prefix-{node}")
    out = write_ray(tmp_path, capsys, "--wait", "20")
    lint(out)
    path = f"{fake_gpus(tmp_path / 'gpus-busy', {'n2': 2})}:{os.environ['PATH']}"
    job = submit(slurm, out, tmp_path, node_tmp, *TRAINER, PATH=path)
    log = next(tmp_path.glob("verl-ray-*.out")).read_text(errors="replace")
    assert job.returncode != 0, log[-3000:]
    assert "verl-ray: n1: preflight: ready to launch" in log, log[-3000:]
    busy = [ln for ln in log.splitlines() if ln.startswith("verl-ray: n2: ") and "busy" in ln]
    assert busy and "2 of 8 visible GPUs are busy" in busy[0], log[-3000:]
    assert "preflight failed on a node" in log and "starting the Ray head" not in log

    # A recipe's entry point (its config composes verl's trainer config) is preflighted too.
    path = f"{fake_gpus(tmp_path / 'gpus-free', {})}:{os.environ['PATH']}"
    entry = ("python", *recipe(tmp_path), *TRAINER[3:])
    job = submit(slurm, out, tmp_path, node_tmp, *entry, PATH=path)
    log = sorted(tmp_path.glob("verl-ray-*.out"))[-1].read_text(errors="replace")
    assert job.returncode != 0  # no Ray in these venvs: the head cannot start
    assert "python -m recipe.tiny.main_tiny: trainer: " in log, log[-3000:]
    for node in ("n1", "n2"):
        assert f"verl-ray: {node}: preflight: ready to launch" in log, log[-3000:]
        assert re.search(rf"verl-ray: {node}: ok +ranks +Ray launch: ", log), log[-3000:]
    assert "starting the Ray head on n1" in log
    assert not list(node_tmp.iterdir())  # the failed head's temporary directory is gone
