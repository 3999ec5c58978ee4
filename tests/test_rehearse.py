"""rehearse --skip-phase: a phase left out on request (flash-attn, whose server build takes hours
where this host's nvcc would fit) is reported as not rehearsed, and post-install says what that
means; an unknown phase is one usage line naming the bundle's phases."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.airgap import netns_prefix, python310

pytestmark = pytest.mark.slow


def test_rehearse_leaves_out_a_phase_on_request(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    from support.cli import run

    python310()
    netns_prefix()
    args = ["rehearse", str(built_bundle[0]), "--skip-phase", "flash-attn", "--json"]
    result = run(args, capsys)
    # Installed offline, but the trainer needs what the phase left out: exit 5, not 0.
    assert result.code == 5, result.out + result.err
    envelope = json.loads(result.out)
    assert envelope["ok"] is False and envelope["verdict"]["state"] == "not-ready"
    assert (
        "flash_attn is not installed (phase flash-attn was left out)" in envelope["verdict"]["line"]
    )
    doc = envelope["result"]
    assert doc["installed"] is True
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["phase flash-attn"]["status"] == "untested", doc
    assert steps["phase flash-attn"]["detail"] == "left out by --skip-phase"
    for name in ("verify", "phase torch", "phase wheels", "phase verl"):
        assert steps[name]["status"] == "ok", (name, doc)
    # The checks' row says what the verdict says: never "ok" beside "not ready to train".
    assert steps["post-install checks"]["status"] == "fail", doc
    assert steps["done"]["detail"] == "skipped: flash-attn"
    # The text's last line: the rehearsal's verdict is install.sh's, with why it is so.
    text = run(args[:-1], capsys)
    assert text.code == 5
    last = text.out.rstrip().splitlines()[-1]
    assert last.startswith("rehearsal: installs offline; not ready to train: ")
    assert "flash_attn is not installed (phase flash-attn was left out)" in last
    assert last.endswith("(phase flash-attn not rehearsed: left out by --skip-phase)")
    assert "rehearsal passed" not in text.out
    assert any(
        line.split()[:3] == ["FAIL", "post-install", "checks"] and "not ready to train" in line
        for line in text.out.splitlines()
    ), text.out


def test_rehearse_refuses_an_unknown_phase_in_one_line(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    from support.cli import run

    netns_prefix()
    result = run(["rehearse", str(built_bundle[0]), "--skip-phase", "flash_attn"], capsys)
    assert result.code == 2, result.out + result.err
    # the one line (after the verify's progress line, when that verify ran long enough)
    lines = result.err.strip().splitlines()
    assert lines[:-1] in ([], [f"verifying {built_bundle[0].name} ..."]), result.err
    assert "--skip-phase flash_attn: the bundle has no such phase" in lines[-1]
    assert "torch, wheels, flash-attn, verl" in lines[-1]


def test_ray_starts_in_the_rehearsals_network_namespace(tmp_path: Path) -> None:
    """The namespace rehearse runs install.sh and the trainer dry run in has its loopback up:
    a real `ray.init()` starts there and runs a task (a fresh `unshare -n` leaves it down, and
    ray.init() then cannot reach its own GCS on 127.0.0.1). Side by side with the same start
    outside any namespace: where Ray cannot start even there (its raylet waits a fixed ~30 s
    for its agent, which a heavily loaded host can miss), the namespace proves nothing and the
    test is skipped. Nothing is left running."""
    pytest.importorskip("ray")
    from verl_bundle.rehearse.rehearsal import LOOPBACK_UP, network_cut

    netns_prefix()
    plain = start_ray([], tmp_path / "plain")
    if plain.returncode != 0:
        pytest.skip(f"Ray cannot start on this host even without a namespace: {last(plain)}")
    cut = start_ray([*network_cut(), *LOOPBACK_UP], tmp_path / "cut")
    assert cut.returncode == 0, cut.stderr[-2000:]
    assert cut.stdout.strip().splitlines()[-1] == "got 42"


def last(out: subprocess.CompletedProcess[str]) -> str:
    return (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]


def start_ray(prefix: list[str], where: Path) -> subprocess.CompletedProcess[str]:
    """A real ray.init() and one task under `prefix`, its session in a short private directory;
    every process it started is killed afterwards (they carry a marker in their environment)."""
    from verl_bundle.airgap.postinstall.dryrun import _marked

    where.mkdir()
    short = tempfile.mkdtemp(prefix="vbr-t", dir="/tmp")  # Ray's socket paths must be short
    marker = f"verl-bundle-test-{os.getpid()}-{short}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "RAY_"))}
    # HOME too: Ray 2.60's ray.init() writes ~/.ray/auth_token, and a later `ray start` of
    # another cluster on this host then fails with InvalidAuthToken (test_slurm_ray did).
    env.update(RAY_TMPDIR=short, RAY_USAGE_STATS_ENABLED="0", TEST_MARKER=marker, HOME=str(where))
    code = (
        "import ray; ray.init(num_cpus=1, include_dashboard=False); "
        "print('got', ray.get(ray.remote(lambda: 41 + 1).remote())); ray.shutdown()"
    )
    cmd = [*prefix, sys.executable, "-c", code]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=where)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", "ray.init() did not return in 300 s")
    finally:
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(short, ignore_errors=True)


def test_a_dry_run_that_gives_no_result_is_never_ready(tmp_path: Path) -> None:
    """The dry run's readiness died without its JSON (here: a command that fails at once): the
    step fails, and a "ready" install verdict becomes not ready, naming why; a worse install
    verdict stays."""
    from verl_bundle.airgap.checks import Verdict
    from verl_bundle.rehearse.rehearsal import dry_run

    cut = ["sh", "-c", "echo 'Segmentation fault' >&2; exit 139", "sh"]
    ready = Verdict(0, "ready-cpu", "ready to train on the CPU side (PPO)")
    step, verdict = dry_run(cut, tmp_path, tmp_path, ready)
    assert (step.name, step.status) == ("trainer dry run", "fail")
    assert (verdict.code, verdict.state) == (5, "not-ready")
    assert "gave no result: Segmentation fault" in verdict.line
    worse = Verdict(1, "failed", "not installed as bundled: x")
    assert dry_run(cut, tmp_path, tmp_path, worse)[1] == worse


def test_the_rehearsals_verdict_carries_every_failure_of_its_dry_run(tmp_path: Path) -> None:
    """install.sh said not ready (flash-attn left out); the dry run, told the phases left out,
    found that and one more failure (its model step): the rehearsal's verdict is the dry run's,
    "(and 1 more)" included, never install.sh's alone."""
    from verl_bundle.airgap.checks import Check, Verdict, verdict
    from verl_bundle.rehearse.rehearsal import Rehearsal, dry_run

    found = [
        Check(
            "import:flash_attn",
            "fail",
            "flash_attn is not installed (phase flash-attn was left out)",
        ),
        Check("dryrun:model", "fail", "model built as verl's workers build it: ImportError: x"),
    ]
    said = verdict(installed=(), readiness=found, purpose="PPO")
    envelope = tmp_path / "envelope.json"
    result = {"checks": [c.to_dict() for c in found]}
    envelope.write_text(
        json.dumps({"command": "readiness", "result": result, "verdict": said.to_dict()})
    )
    # The "network cut" here is a shell that answers only when told the phase left out.
    script = f'case "$*" in *"--skip-phase flash-attn"*) cat {envelope};; *) exit 3;; esac'
    cut = ["sh", "-c", script, "sh"]
    installed = Verdict(
        5, "not-ready", "not ready to train: flash_attn: flash_attn is not installed"
    )
    step, got = dry_run(cut, tmp_path, tmp_path, installed, ("flash-attn",))
    assert got == said and got.line.endswith("(and 1 more)"), got
    assert (step.status, step.detail) == ("fail", f"dryrun:model: {found[1].summary}")
    kept = Rehearsal(
        tmp_path,
        "py",
        "unshare -n",
        (step,),
        (),
        got,
        (("flash-attn", "left out by --skip-phase"),),
    )
    assert kept.last_line == (
        f"rehearsal: installs offline; {said.line} (phase flash-attn not rehearsed: left out by "
        "--skip-phase)"
    )


def test_a_phase_left_out_on_request_is_the_users_choice_even_where_this_host_cannot_build_it() -> (
    None
):
    from verl_bundle.rehearse.rehearsal import left_out

    host = {"flash-attn": "this host cannot build it (nvcc: 13.0, but the bundle's CUDA is 12.4)"}
    got = left_out({"flash-attn": "left out by --skip-phase"}, {**host, "apex": "this host cannot"})
    assert got == {"flash-attn": "left out by --skip-phase", "apex": "this host cannot"}


def test_an_older_bundles_readiness_without_skip_phase_is_asked_again_without_it(
    tmp_path: Path,
) -> None:
    """A bundle built by an older verl-bundle: its readiness refuses --skip-phase (a usage
    error, exit 2, nothing on stdout); the dry run is asked again without it."""
    from verl_bundle.airgap.checks import Check, Verdict, verdict
    from verl_bundle.rehearse.rehearsal import dry_run

    found = [Check("dryrun:workers", "ok", "reached the GPU boundary")]
    said = verdict(installed=(), readiness=found, purpose="PPO")
    envelope = tmp_path / "envelope.json"
    result = {"checks": [c.to_dict() for c in found]}
    envelope.write_text(
        json.dumps({"command": "readiness", "result": result, "verdict": said.to_dict()})
    )
    script = f'case "$*" in *"--skip-phase"*) echo "unrecognized arguments" >&2; exit 2;; *) cat {envelope};; esac'
    installed = Verdict(5, "not-ready", "not ready to train: flash_attn")
    step, got = dry_run(["sh", "-c", script, "sh"], tmp_path, tmp_path, installed, ("flash-attn",))
    assert got == said and step.status == "ok", (step, got)
