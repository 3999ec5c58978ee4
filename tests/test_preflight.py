"""Launch preflight on fake nodes: a real nvidia-smi script on PATH answering recorded output
(GPU list, compute apps, `topo -m`), preflight run as the real `python -m verl_bundle.airgap
preflight` subprocess, and verl's settings given as its overrides or a YAML file."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_environ
from support.cli import run
from support.toolchain import (
    APPS_ARGS,
    CLEARED,
    GPU_ARGS,
    FakeApp,
    FakeGpu,
    FakeMachine,
    apps_csv,
    gpu_csv,
    topo,
)

from verl_bundle.airgap.launch import verlconfig
from verl_bundle.airgap.launch.preflight import nvlink_pairs

REPO = Path(__file__).resolve().parents[1]
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
EIGHT = tuple(FakeGpu(i, H100, 81559) for i in range(8))
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
}


def node(
    tmp: Path, gpus: tuple[FakeGpu, ...] = EIGHT, apps: tuple[FakeApp, ...] = ()
) -> FakeMachine:
    machine = FakeMachine(tmp / "node")
    answers = {
        GPU_ARGS: gpu_csv(gpus, "535.104.05"),
        APPS_ARGS: apps_csv(apps),
        "topo -m": topo(len(gpus)),
    }
    cases = "".join(
        f"  {shlex.quote(k)}) printf '%s' {shlex.quote(v)} ;;\n" for k, v in answers.items()
    )
    machine.script(
        "nvidia-smi", f'case "$*" in\n{cases}  *) echo "Invalid combination" ; exit 2 ;;\nesac\n'
    )
    return machine


def preflight(
    machine: FakeMachine, tmp: Path, *args: str, **env: str
) -> tuple[int, dict[str, dict[str, Any]]]:
    base = clean_environ(tmp)
    for var in CLEARED:
        base.pop(var, None)
    base["HOME"] = str(tmp / "home")  # never this machine's ~/.ray
    proc = subprocess.run(
        [sys.executable, "-m", "verl_bundle.airgap", "preflight", "--json", *args],
        env={**base, **machine.environ(), "PYTHONPATH": str(REPO), **OFFLINE, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["command"] == "preflight" and doc["ok"] is (proc.returncode == 0)
    return proc.returncode, {c["id"]: c for c in doc["result"]["checks"]}


GOOD = [
    "trainer.n_gpus_per_node=8",
    "data.train_batch_size=256",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
]


def test_a_good_node_passes_everything_it_controls(tmp_path: Path) -> None:
    code, checks = preflight(node(tmp_path), tmp_path, *GOOD)
    assert [c for c in checks] == [
        "devices",
        "busy",
        "gpu-memory",
        "nvlink",
        "ranks",
        "ray-token",
        "open-files",
        "offline",
        "batch",
    ]
    bad = {k: c["summary"] for k, c in checks.items() if c["status"] != "ok" and k != "open-files"}
    assert bad == {}
    assert checks["nvlink"]["summary"] == "NVLink joins 28 of 28 pairs of visible GPUs"
    assert code == (0 if checks["open-files"]["status"] == "ok" else 1)


def test_visible_devices_that_do_not_exist_and_too_few_for_the_config(tmp_path: Path) -> None:
    two = tuple(FakeGpu(i, H100, 81559) for i in range(2))
    _, checks = preflight(
        node(tmp_path, two),
        tmp_path,
        "trainer.n_gpus_per_node=2",
        "data.train_batch_size=64",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        CUDA_VISIBLE_DEVICES="3,1",
    )
    devices = checks["devices"]
    assert devices["status"] == "fail"
    assert devices["summary"] == "GPU 3 does not exist: this server has 2 (0-1)"
    assert "Total available GPUs 1 is less than total desired GPUs 2" in devices["detail"]
    assert devices["fix"].startswith("export CUDA_VISIBLE_DEVICES=0,1")


def test_busy_gpus_are_named_and_the_free_ones_offered(tmp_path: Path) -> None:
    gpus = tuple(FakeGpu(i, H100, 81559, 30000 if i < 4 else 4) for i in range(8))
    apps = tuple(FakeApp(i, 4000 + i, "python3", 30000) for i in range(4))
    _, checks = preflight(node(tmp_path, gpus, apps), tmp_path, *GOOD)
    busy = checks["busy"]
    assert busy["status"] == "fail" and busy["summary"] == "4 of 8 visible GPUs are busy"
    assert busy["detail"].splitlines()[0] == "GPU 0: 30000 MiB held by pid 4000 python3"
    assert "export CUDA_VISIBLE_DEVICES=4,5,6,7 and trainer.n_gpus_per_node=4" in busy["fix"]


def test_mixed_gpu_memory_is_a_warning_with_one_kind_offered(tmp_path: Path) -> None:
    gpus = tuple(FakeGpu(i, H100 if i < 6 else A100, 81559 if i < 6 else 40960) for i in range(8))
    _, checks = preflight(node(tmp_path, gpus), tmp_path, *GOOD)
    mem = checks["gpu-memory"]
    assert mem["status"] == "warn" and "mixed GPU memory" in mem["summary"]
    assert "6 x NVIDIA H100 80GB HBM3 (81559 MiB)" in mem["summary"]
    assert "2 x NVIDIA A100-SXM4-40GB (40960 MiB)" in mem["summary"]
    # Six of one kind would break the batch rule (256 over 6 GPUs): four are offered instead.
    assert mem["fix"] == (
        "use one kind: export CUDA_VISIBLE_DEVICES=0,1,2,3 and trainer.n_gpus_per_node=4 "
        "(trainer.n_gpus_per_node=6 would break: data.train_batch_size * rollout.n = 256 * 1 = "
        "256 is not divisible by the 6 GPUs (trainer.n_gpus_per_node x trainer.nnodes))"
    )


def test_a_busy_gpu_fix_is_checked_against_every_rule(tmp_path: Path) -> None:
    """Two of eight GPUs busy and verl's default batch (1024, tensor parallel 2): leaving them
    out gives 6 GPUs, which 1024 does not divide; the fix offers 4, and following it passes."""
    gpus = tuple(FakeGpu(i, H100, 81559, 30000 if i < 2 else 4) for i in range(8))
    apps = tuple(FakeApp(i, 4000 + i, "python3", 30000) for i in range(2))
    machine = node(tmp_path, gpus, apps)
    _, checks = preflight(machine, tmp_path, "trainer.n_gpus_per_node=8")
    assert checks["batch"]["status"] == "ok"
    fix = checks["busy"]["fix"]
    assert "trainer.n_gpus_per_node=6 " not in fix.split(" (")[0]
    assert fix.startswith(
        "stop those processes, or leave their GPUs out: export CUDA_VISIBLE_DEVICES=2,3,4,5 and "
        "trainer.n_gpus_per_node=4 (trainer.n_gpus_per_node=6 would break: "
        "data.train_batch_size * rollout.n = 1024 * 1 = 1024 is not divisible by the 6 GPUs"
    )
    _, checks = preflight(
        machine, tmp_path, "trainer.n_gpus_per_node=4", CUDA_VISIBLE_DEVICES="2,3,4,5"
    )
    failed = {k for k, c in checks.items() if c["status"] == "fail"} - {"open-files"}
    assert failed == set(), checks


RENDEZVOUS = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}


def test_under_ray_no_torchrun_variable_is_asked_for(tmp_path: Path) -> None:
    """verl's main_ppo on two nodes: ray start joins them; RANK and the rest are not read."""
    _, checks = preflight(node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2")
    ranks = checks["ranks"]
    assert ranks["status"] == "ok" and ranks["summary"].startswith("Ray launch:")
    _, same = preflight(node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2", "--launcher", "ray")
    assert same["ranks"] == ranks
    _, checks = preflight(
        node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2", "--launcher", "torchrun"
    )
    assert checks["ranks"]["summary"] == (
        "trainer.nnodes=2 but RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set on this node"
    )


def test_under_ray_a_contradicting_rank_set_fails(tmp_path: Path) -> None:
    """Issue 34 S4: RANK=3 WORLD_SIZE=1 where Ray starts reaches every worker that does not set
    its own; a complete, consistent set stays named as ignored."""
    code, checks = preflight(node(tmp_path), tmp_path, *GOOD, RANK="3", WORLD_SIZE="1")
    ranks = checks["ranks"]
    assert code == 1 and ranks["status"] == "fail", ranks
    assert ranks["summary"].startswith(
        "RANK=3 WORLD_SIZE=1 set where Ray starts: every worker that does not set its own "
        "inherits them (RANK, WORLD_SIZE set but MASTER_ADDR, MASTER_PORT not"
    ), ranks
    assert "RANK=3 is not below WORLD_SIZE=1" in ranks["detail"]
    assert ranks["fix"].startswith("unset RANK WORLD_SIZE before ray start")
    consistent = {**RENDEZVOUS, "WORLD_SIZE": "2", "RANK": "1"}
    code, checks = preflight(node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2", **consistent)
    assert checks["ranks"]["status"] == "ok" and "set here, ignored" in checks["ranks"]["summary"]


def test_a_ray_token_left_in_the_home_is_named(tmp_path: Path) -> None:
    """Issue 37: a ~/.ray/auth_token an earlier ray.init() left turns a head's token mode on
    where workers have none: a failure for two nodes, a warning for one, nothing when the run
    sets its own token (as the Ray sbatch does)."""
    stale = tmp_path / "home" / ".ray" / "auth_token"
    stale.parent.mkdir(parents=True)
    stale.write_text("f" * 64)
    stale.chmod(0o644)
    _, checks = preflight(node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2")
    token = checks["ray-token"]
    assert token["status"] == "fail", token
    assert token["summary"].startswith(
        f"a Ray token in {stale} (64 bytes, mode 0644; readable by every user), left by an "
        "earlier ray.init()"
    )
    assert "workers started without it cannot join" in token["summary"]
    assert "RAY_AUTH_MODE=token" in token["fix"] and str(stale) in token["fix"]
    _, one = preflight(node(tmp_path), tmp_path, *GOOD)
    assert one["ray-token"]["status"] == "warn"
    _, own = preflight(
        node(tmp_path),
        tmp_path,
        *GOOD,
        "trainer.nnodes=2",
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN="a" * 64,
    )
    assert (
        own["ray-token"]["status"] == "ok" and "sets its own token" in own["ray-token"]["summary"]
    )
    assert stale.read_text() == "f" * 64  # read: its size and mode, never its bytes


@pytest.mark.parametrize(
    ("args", "env", "problem"),
    [
        (["trainer.nnodes=2"], {**RENDEZVOUS, "RANK": ""}, "trainer.nnodes=2 but RANK not set"),
        (
            [],  # one node: a partial set still breaks torch's env:// rendezvous
            {"RANK": "0"},
            "RANK set but WORLD_SIZE, MASTER_ADDR, MASTER_PORT not: torch.distributed reads",
        ),
        (
            ["--nproc-per-node", "4"],
            {},
            "--nproc_per_node=4 but trainer.n_gpus_per_node=8: 4 GPU(s) would sit idle",
        ),
        (
            ["trainer.nnodes=2"],
            {**RENDEZVOUS, "MASTER_ADDR": "no-such-head.invalid"},
            "MASTER_ADDR=no-such-head.invalid does not resolve on this node",
        ),
    ],
    ids=["nnodes-2-rank-missing", "rank-without-world-size", "nproc-below-gpus", "master-addr"],
)
def test_torchrun_partial_sets_are_caught(
    tmp_path: Path, args: list[str], env: dict[str, str], problem: str
) -> None:
    _, checks = preflight(node(tmp_path), tmp_path, *GOOD, "--launcher", "torchrun", *args, **env)
    ranks = checks["ranks"]
    assert ranks["status"] == "fail"
    assert any(line.startswith(problem) for line in ranks["detail"].splitlines()), ranks
    if "nproc" in problem:
        assert ranks["fix"] == "torchrun --nproc_per_node=8"


@pytest.mark.parametrize(
    ("flags", "env", "summary"),
    [
        (["--rdzv-endpoint", "localhost:29400"], {}, "torchrun: rendezvous at localhost:29400"),
        (
            ["--master-addr", "localhost", "--master-port", "29500", "--node-rank", "1"],
            {},
            "torchrun: static master localhost:29500, node rank 1",
        ),
        ([], {"PET_RDZV_ENDPOINT": "localhost:29400"}, "torchrun: rendezvous at localhost:29400"),
    ],
    ids=["rdzv-endpoint", "master-flags", "pet-variables"],
)
def test_torchrun_with_a_rendezvous_needs_no_rank_variables(
    tmp_path: Path, flags: list[str], env: dict[str, str], summary: str
) -> None:
    """Issue 37: torchrun's rendezvous forms set each process's ranks themselves, so two nodes
    with no RANK/WORLD_SIZE/MASTER_* exported are not a failure."""
    _, checks = preflight(
        node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2", "--launcher", "torchrun", *flags, **env
    )
    assert checks["ranks"]["status"] == "ok" and checks["ranks"]["summary"].startswith(summary), (
        checks["ranks"]
    )


@pytest.mark.parametrize(
    ("flags", "problem", "fix"),
    [
        (
            ["--rdzv-endpoint", "no-such-head.invalid:29400"],
            "--rdzv_endpoint no-such-head.invalid:29400: no-such-head.invalid does not resolve",
            "give the head node's address",
        ),
        (
            ["--master-addr", "localhost"],
            "--master_addr without --node_rank and trainer.nnodes=2: every node would be node 0",
            "give each node its own --node_rank, from 0 (the head) to 1",
        ),
        (
            ["--master-addr", "localhost", "--node-rank", "2"],
            "--node_rank 2 is not one of 0-1",
            "give each node its own --node_rank",
        ),
    ],
    ids=["endpoint-unresolved", "no-node-rank", "node-rank-too-high"],
)
def test_a_wrong_rendezvous_fails_with_its_own_fix(
    tmp_path: Path, flags: list[str], problem: str, fix: str
) -> None:
    _, checks = preflight(
        node(tmp_path), tmp_path, *GOOD, "trainer.nnodes=2", "--launcher", "torchrun", *flags
    )
    ranks = checks["ranks"]
    assert ranks["status"] == "fail" and ranks["summary"].startswith(problem), ranks
    assert ranks["fix"].startswith(fix), ranks


@pytest.mark.parametrize(
    ("env", "fix"),
    [
        (
            {**RENDEZVOUS, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "9"},
            "unset LOCAL_RANK (torchrun sets it for each process), or make 10 GPUs visible",
        ),
        (
            {**RENDEZVOUS, "RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "99999"},
            "export MASTER_PORT as a free port from 1024 to 65535, the same on every node",
        ),
        (
            {**RENDEZVOUS, "RANK": "3", "WORLD_SIZE": "2"},
            "export RANK as this node's number, from 0 to 1",
        ),
        ({"RANK": "0"}, "export WORLD_SIZE MASTER_ADDR MASTER_PORT as well"),
    ],
    ids=["local-rank-9", "master-port-99999", "rank-above-world", "partial"],
)
def test_each_torchrun_failure_has_its_own_fix(
    tmp_path: Path, env: dict[str, str], fix: str
) -> None:
    """Issue 37: not the generic 'export RANK, WORLD_SIZE ...' for every failure."""
    _, checks = preflight(node(tmp_path), tmp_path, *GOOD, "--launcher", "torchrun", **env)
    ranks = checks["ranks"]
    assert ranks["status"] == "fail" and ranks["fix"].startswith(fix), ranks
    assert "export on every node RANK" not in ranks["fix"]


def test_rendezvous_flags_are_torchruns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, says in [
        (["--rdzv-endpoint", "h:1"], "are torchrun's; give --launcher torchrun"),
        (["--launcher", "torchrun", "--node-rank", "1"], "go with --master-addr"),
        (
            ["--launcher", "torchrun", "--rdzv-endpoint", "h:1", "--master-addr", "h"],
            "give --rdzv-endpoint or --master-addr",
        ),
    ]:
        r = run(["preflight", *args], capsys)
        assert r.code == 2 and says in r.err and len(r.err.splitlines()) == 1, r.err


def test_a_correct_torchrun_launch_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, checks = preflight(
        node(tmp_path),
        tmp_path,
        *GOOD,
        "trainer.nnodes=2",
        "--launcher",
        "torchrun",
        "--nproc-per-node",
        "8",
        **RENDEZVOUS,
    )
    assert checks["ranks"]["status"] == "ok", checks["ranks"]
    r = run(["preflight", "--nproc-per-node", "8"], capsys)
    assert r.code == 2 and "give --launcher torchrun" in r.err


def test_verls_batch_rules_from_a_yaml_and_overrides(tmp_path: Path) -> None:
    config = tmp_path / "ppo.yaml"
    config.write_text(
        "# a verl config\n"
        "data:\n"
        "  train_batch_size: 100   # 100 * 1 is not divisible by 16\n"
        "actor_rollout_ref:\n"
        "  actor:\n"
        "    ppo_mini_batch_size: 128\n"
        "  rollout:\n"
        "    tensor_model_parallel_size: 3\n"
        "trainer:\n"
        "  n_gpus_per_node: 8\n"
        "  nnodes: 2\n"
        "  logger: '[console]'\n"
    )
    _, checks = preflight(
        node(tmp_path),
        tmp_path,
        "--config",
        str(config),
        RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="10.0.0.1",
        MASTER_PORT="29500",
    )
    batch = checks["batch"]
    assert batch["status"] == "fail"
    lines = batch["detail"].splitlines()
    assert lines[0].startswith(
        "data.train_batch_size * rollout.n = 100 * 1 = 100 is not divisible by the 16 GPUs"
    )
    assert (
        lines[1]
        == "data.train_batch_size 100 is below actor_rollout_ref.actor.ppo_mini_batch_size 128"
    )
    assert lines[2].startswith(
        "actor_rollout_ref.rollout.tensor_model_parallel_size 3 does not divide"
    )
    # An override wins over the file, exactly as on verl's command line.
    _, checks = preflight(
        node(tmp_path),
        tmp_path,
        "--config",
        str(config),
        "data.train_batch_size=256",
        "+actor_rollout_ref.rollout.tensor_model_parallel_size='2'",
        RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="10.0.0.1",
        MASTER_PORT="29500",
    )
    assert checks["batch"]["status"] == "ok", checks["batch"]


def test_offline_variables_and_unreadable_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, checks = preflight(node(tmp_path), tmp_path, *GOOD, HF_HUB_OFFLINE="0")
    assert checks["offline"]["status"] == "fail"
    assert checks["offline"]["fix"] == "export HF_HUB_OFFLINE=1"
    r = run(["preflight", "trainer.nnodes"], capsys)
    assert r.code == 2 and "'trainer.nnodes' is not a verl override" in r.err
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  - 1\nnot a map\n")
    r = run(["preflight", "--config", str(bad)], capsys)
    assert r.code == 2 and "line 3" in r.err and len(r.err.strip().splitlines()) == 1


def test_overrides_are_read_as_verl_reads_them() -> None:
    values = verlconfig.apply_overrides(
        {"trainer.nnodes": "1", "trainer.logger": "x"},
        ["trainer.nnodes=2", "+a.b='[1,2]'", '++c="q"', "~trainer.logger"],
    )
    assert values == {"trainer.nnodes": "2", "a.b": "[1,2]", "c": "q"}


def test_nvlink_pairs_among_the_visible_gpus() -> None:
    assert nvlink_pairs(topo(4), [0, 1, 2, 3]) == (6, 6)
    assert nvlink_pairs(topo(4, nvlink=False), [1, 3]) == (0, 1)


def test_unset_keys_take_verls_defaults(tmp_path: Path) -> None:
    # ppo_trainer.yaml at v0.3.0.post1 (and through 0.8.0.dev): train_batch_size 1024,
    # ppo_mini_batch_size 256, rollout.n 1, rollout tensor_model_parallel_size 2,
    # ulysses_sequence_parallel_size 1, n_gpus_per_node 8, nnodes 1.
    assert verlconfig.settings([]) == {
        "data.train_batch_size": "1024",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "1",
        "actor_rollout_ref.rollout.n": "1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
        "trainer.n_gpus_per_node": "8",
        "trainer.nnodes": "1",
    }
    # With nothing passed, a 6-GPU node is judged as verl would judge it: 8 GPUs wanted, and
    # tensor parallel 2 of verl's default 8 per node.
    six = tuple(FakeGpu(i, H100, 81559) for i in range(6))
    _, checks = preflight(node(tmp_path, six), tmp_path)
    assert checks["devices"]["status"] == "fail"
    assert "8" in checks["devices"]["summary"]
    assert checks["batch"]["status"] == "ok"
    assert checks["batch"]["summary"] == (
        "train_batch_size 1024 x rollout.n 1 over 8 GPUs, mini batch 256, tensor parallel 2"
    )


@pytest.mark.parametrize(
    "partial",
    [
        {"RANK": "3"},
        {"WORLD_SIZE": "2"},
        {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1"},
        {"RANK": "1", "MASTER_PORT": "29500"},
    ],
)
def test_a_partial_torchrun_set_fails_on_one_node(tmp_path: Path, partial: dict[str, str]) -> None:
    code, checks = preflight(node(tmp_path), tmp_path, *GOOD, "--launcher", "torchrun", **partial)
    ranks = checks["ranks"]
    assert code == 1 and ranks["status"] == "fail"
    unset = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in partial]
    assert ranks["summary"].startswith(", ".join(partial) + " set but " + ", ".join(unset))


def entry(cwd: Path, module: str) -> tuple[int, str]:
    """`python -m verl_bundle.airgap entry MODULE` run in `cwd`, as the Ray sbatch runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "verl_bundle.airgap", "entry", module],
        env={**clean_environ(cwd), "PYTHONPATH": str(REPO)},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, proc.stdout.strip()


def test_a_recipes_entry_point_is_known_by_its_config_without_importing_it(
    tmp_path: Path,
) -> None:
    """Issue 37: `python -m recipe.dapo.main_dapo` starts verl's trainer when its Hydra config
    composes verl's trainer config (directly, or through a config of its own directory, or a
    trainer: holding nnodes); its code never runs (it would write RAN)."""
    pkg = tmp_path / "recipe" / "dapo"
    (pkg / "config").mkdir(parents=True)
    (pkg / "main_dapo.py").write_text(
        "open('RAN', 'w')\nimport hydra\n\n"
        '@hydra.main(config_path="config", config_name="dapo_trainer", version_base=None)\n'
        "def main(config):\n    pass\n"
    )
    (pkg / "config" / "dapo_trainer.yaml").write_text(
        "# DAPO\nhydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - dapo_base\n  - _self_\n"
    )
    (pkg / "config" / "dapo_base.yaml").write_text("defaults:\n  - ppo_trainer@_here_\n")
    code, said = entry(tmp_path, "recipe.dapo.main_dapo")
    assert code == 0 and said.startswith("trainer: ") and "dapo_base.yaml" in said, said
    assert "its defaults list ppo_trainer" in said and not (tmp_path / "RAN").exists()
    (pkg / "config" / "dapo_base.yaml").write_text("trainer:\n  nnodes: 1\n")
    assert entry(tmp_path, "recipe.dapo.main_dapo")[1].endswith("its trainer: holds nnodes")
    (pkg / "config" / "dapo_base.yaml").write_text("data:\n  x: 1\n")
    code, said = entry(tmp_path, "recipe.dapo.main_dapo")
    assert code == 1 and "does not compose verl's trainer config" in said
    assert entry(tmp_path, "verl.trainer.main_ppo") == (
        0,
        "trainer: verl.trainer.main_ppo: verl's own trainer",
    )
    code, said = entry(tmp_path, "json.tool")
    assert code == 1 and "no @hydra.main(config_name=...)" in said
    assert entry(tmp_path, "no.such.module")[1].endswith("not found on this python's path")
