"""install.sh on the air-gapped side: extracted elsewhere (a path with spaces), run with the
network cut (`unshare -n`), into a fresh venv of a Python other than the host's default."""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import NAME, Stack, build_bundle, clean_environ, shared_build
from support.airgap import (
    READY,
    extract,
    find_python,
    install_into,
    netns_prefix,
    python310,
    resign,
    run_install,
    start_install,
)
from support.shared import Value

from verl_bundle.airgap.contract.events import read_events
from verl_bundle.airgap.doctor import fingerprint

pytestmark = pytest.mark.slow

FLASH_WHEEL = "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"

# The toy stack is cu118-legacy's: it installs, every check passes, and readiness reports that
# verl cannot train with it, which that profile declares (so the install stands).
# The toy stack's verdict, the install's last line (tests/airgap.py's READY says why).
LEGACY_VERDICT = (
    "ready to train on the CPU side (PPO with FSDP and vLLM rollout); not proven here: "
    "the trainer's start (no dry run for verl 0.2.0.post2)"
)


@pytest.fixture
def bundle(built_bundle: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> Path:
    """A fresh extraction of the cu118 test bundle under a directory with a space in its name."""
    return extract(built_bundle[0], tmp_path / "from the usb stick")


def venv_python(prefix: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*netns_prefix(), str(prefix / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        env=clean_environ(prefix.parent),
        timeout=120,
    )


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout + proc.stderr


def test_airgapped_install_into_a_fresh_python310_venv(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "my venv"
    events_file = tmp_path / "events.jsonl"
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    proc = install_into(
        bundle,
        home,
        prefix,
        "--yes",
        "--events",
        str(events_file),
    )
    assert proc.returncode == READY, output(proc)
    # Nothing outside the prefix changed: not the bundle, not the user's home (no pip cache).
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before
    assert list(home.rglob("*")) == []
    events = read_events(str(events_file))
    steps = [(e["step"], e["status"]) for e in events if e["event"] == "step"]
    assert [s for s in steps if s[1] != "start"] == [
        (name, "ok")
        for name in ("verify", "python", "doctor", "venv", "phases", "post-install", "done")
    ]
    phases = [(e["phase"], e["status"], e["tool"]) for e in events if e["event"] == "phase"]
    assert [p for p in phases if p[1] != "start"] == [
        ("torch", "ok", "uv"),  # the bundled uv runs here, so wheel phases use it
        ("wheels", "ok", "uv"),
        ("flash-attn", "ok", "uv"),
        ("verl", "ok", "uv"),
    ]
    assert events[-1]["event"] == "result" and events[-1]["exit_code"] == READY
    out = proc.stdout
    assert "[1/7] checking every file against SHA256SUMS" in out
    # The verdict is the last line: verl's trainer modules import, its config composes.
    assert out.rstrip().splitlines()[-1] == LEGACY_VERDICT
    assert events[-1]["verdict"]["line"] == out.rstrip().splitlines()[-1]
    assert "all passed" not in out
    assert f"source {shlex.quote(str(prefix / 'bin' / 'activate'))}" in out
    assert "skipped phases" not in out
    check = venv_python(
        prefix,
        "import sys, torch, triton, flash_attn, vllm, verl, transformers; "
        "print(sys.version_info[:2], torch.__version__, torch.version.cuda, vllm.__version__)",
    )
    assert check.returncode == 0, output(check)
    assert check.stdout.strip() == "(3, 10) 2.1.2+cu118 11.8 0.3.1+cu118"
    pip = venv_python(prefix, "import pip; print(pip.__version__)")
    assert pip.stdout.strip() == next(bundle.glob("bootstrap/pip-*.whl")).name.split("-")[1]
    # The environment fingerprint the fleet report compares across nodes.
    assert fingerprint.read(str(prefix)) == fingerprint.examine(str(prefix)).fingerprint
    # The log holds everything from step 1: the verification and the doctor's report too.
    log = (prefix / ".verl-bundle" / "install.log").read_text()
    assert log.startswith("==> [1/7] checking every file against SHA256SUMS")
    assert "doctor: ready to install" in log
    assert "phase verl" in log and LEGACY_VERDICT in log
    # The bundle tells the server's admin what it is and how to use it.
    readme = (bundle / "README.txt").read_text()
    for word in ("./install.sh", "Exit codes", "Uninstall", "Upgrade", "install.log"):
        assert word in readme


def test_a_flipped_byte_is_refused_before_anything_is_installed(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    wheel = next(bundle.glob("wheels/transformers-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[100] ^= 0x01
    wheel.write_bytes(bytes(data))
    prefix = tmp_path / "venv"
    proc = install_into(bundle, home, prefix, "--yes")
    assert proc.returncode == 3, output(proc)
    assert f"wheels/{wheel.name}" in proc.stderr
    assert "nothing was installed" in proc.stderr
    assert not prefix.exists()


def test_dry_run_prints_the_plan_and_changes_nothing(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "venv"
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    proc = install_into(bundle, home, prefix, "--dry-run")
    assert proc.returncode == 0, output(proc)
    assert "dry run: nothing is changed" in proc.stdout
    assert "torch==2.1.2+cu118" in proc.stdout and "verl==0.2.0.post2" in proc.stdout
    assert "pip install --no-index --no-deps --require-hashes" in proc.stdout
    assert not prefix.exists()
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before
    # What it shows is exactly what a real run then executes (each phase log starts with the
    # command it ran).
    real = install_into(bundle, home, prefix, "--yes")
    assert real.returncode == READY, output(real)
    for phase in ("torch", "wheels", "flash-attn", "verl"):
        ran = (prefix / ".verl-bundle" / f"phase-{phase}.log").read_text().splitlines()[0]
        assert ran.startswith("$ ") and f"phase {phase} (uv): {ran[2:]}" in proc.stdout
    again = run_install(bundle, home, "--prefix", str(prefix), "--dry-run")
    assert "phase torch: already installed" in again.stdout


def test_help_documents_options_and_exit_codes(bundle: Path, home: Path) -> None:
    proc = run_install(bundle, home, "--help", offline=False)
    assert proc.returncode == 0
    for word in (
        "--prefix",
        "--python",
        "--into-env",
        "--dry-run",
        "--skip-doctor",
        "--yes",
        "--log",
        "Exit codes",
        "130",
    ):
        assert word in proc.stdout
    bad = run_install(bundle, home, "--frobnicate", offline=False)
    assert bad.returncode == 2 and "unknown option" in bad.stderr


def test_wrong_python_gets_a_sentence_not_a_traceback(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    for version in ("3.11", "2.7"):
        py = find_python(version)
        if py is None:
            continue
        proc = run_install(bundle, home, "--prefix", str(tmp_path / "v"), "--python", py, "--yes")
        assert proc.returncode == 4, output(proc)
        assert (
            f"is Python {version}, but this bundle's wheels are built for Python 3.10"
            in proc.stderr
        )
        assert "SyntaxError" not in output(proc) and "Traceback" not in output(proc)
        assert not (tmp_path / "v").exists()


def test_site_pip_configuration_cannot_redirect_the_install(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    conf = home / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(
        "[global]\nindex-url = http://127.0.0.1:9/simple\ntimeout = 600\nretries = 50\n"
    )
    hostile = {
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:9/extra",
        "PIP_FIND_LINKS": "/nonexistent",
        "PIP_CONFIG_FILE": str(conf),
        "UV_INDEX_URL": "http://127.0.0.1:9/simple",
    }
    prefix = tmp_path / "venv"
    started = time.monotonic()
    proc = install_into(bundle, home, prefix, "--yes", env=hostile)
    assert proc.returncode == READY, output(proc)
    assert "127.0.0.1:9" not in output(proc)
    assert time.monotonic() - started < 300  # no 600 s timeout was honoured
    assert LEGACY_VERDICT in proc.stdout


def test_install_into_an_existing_environment_keeps_its_pip(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "conda like env"
    subprocess.run([python310(), "-m", "venv", str(env_dir)], check=True, capture_output=True)
    pip_before = venv_python(env_dir, "import pip; print(pip.__version__)").stdout
    proc = run_install(bundle, home, "--into-env", str(env_dir), "--yes")
    assert proc.returncode == READY, output(proc)
    assert (
        venv_python(env_dir, "import torch, verl; print(torch.__version__)").stdout.strip()
        == "2.1.2+cu118"
    )
    assert venv_python(env_dir, "import pip; print(pip.__version__)").stdout == pip_before
    both = run_install(bundle, home, "--into-env", str(env_dir), "--prefix", str(tmp_path / "x"))
    assert both.returncode == 2


def _kill_when(
    proc: subprocess.Popen[str],
    ready: Callable[[], bool],
    timeout: float = 120,
    sig: signal.Signals = signal.SIGKILL,
) -> None:
    """Signal the install's process group the moment `ready()` holds (checked every
    millisecond; the timeout is for a hang); an install that ends first is left as it ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            os.killpg(proc.pid, sig)
            if sig == signal.SIGKILL:
                proc.wait()
            return
        if proc.poll() is not None:
            return
        time.sleep(0.001)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_install_killed_inside_a_phase_completes_when_run_again(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    for _attempt in range(5):
        prefix = tmp_path / f"venv{_attempt}"
        state = prefix / ".verl-bundle"
        site = prefix / "lib" / "python3.10" / "site-packages"
        proc = start_install(bundle, home, prefix, "--yes")

        def mid_phase(state: Path = state, site: Path = site) -> bool:
            # Some of the phase's packages are in, the phase is not finished.
            return (state / "started-wheels").exists() and any(site.glob("xformers-*.dist-info"))

        _kill_when(proc, mid_phase)
        if (state / "started-wheels").exists() and not (state / "done-wheels").exists():
            break
    else:
        pytest.fail("could not stop install.sh inside the wheels phase in 5 tries")
    assert (state / "done-torch").exists()
    again = install_into(bundle, home, prefix, "--yes")
    assert again.returncode == READY, output(again)
    assert "phase torch: already installed" in again.stdout
    assert "phase wheels was interrupted before" in again.stdout
    # The same end state as an uninterrupted install: every distribution at its bundled
    # version, every installed file as its wheel recorded it.
    assert re.search(r"^\s*ok\s+versions\s", again.stdout, re.M), again.stdout
    assert re.search(r"^\s*ok\s+files\s", again.stdout, re.M), again.stdout
    assert LEGACY_VERDICT in again.stdout


def test_ctrl_c_stops_with_a_resume_hint(bundle: Path, home: Path, tmp_path: Path) -> None:
    """Interrupted once the torch phase has started; an install that finished first is tried
    again (never a pass without an interrupt)."""
    for attempt in range(5):
        prefix = tmp_path / f"venv{attempt}"
        proc = start_install(bundle, home, prefix, "--yes", offline=False, quiet=False)
        started = prefix / ".verl-bundle" / "started-torch"
        _kill_when(proc, started.exists, sig=signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            break
    else:
        pytest.fail("install.sh finished before the interrupt arrived in 5 tries")
    assert proc.returncode == 130, out + err
    assert "Run ./install.sh again" in out + err


@pytest.fixture(scope="module")
def source_build_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cu118 bundle when the prebuilt flash-attn wheel cannot be had: flash-attn ships as
    its sdist and is built on the server. Built once per run (read-only)."""

    def build(stack: Stack, tmp: Path) -> Value:
        stack.files.faults.missing.add(FLASH_WHEEL)
        return str(build_bundle(stack, tmp / "out", tmp / "cache")["bundle"])

    return Path(str(shared_build(tmp_path_factory, "install.srcbuild", build)))


def test_source_build_phase_builds_after_torch_with_no_network(
    source_build_bundle: Path, home: Path, tmp_path: Path
) -> None:
    bundle = extract(source_build_bundle, tmp_path / "b")
    assert (bundle / "sources" / "flash_attn-2.5.8.tar.gz").is_file()
    prefix = tmp_path / "venv"
    # This host's nvcc is not CUDA 11.8, so the doctor would stop a real source build; the
    # fake flash-attn builds without nvcc, which is what this test is about.
    proc = install_into(bundle, home, prefix, "--yes", "--skip-doctor")
    assert proc.returncode == READY, output(proc)
    assert "phase flash-attn: building on this server (MAX_JOBS=" in proc.stdout
    assert "FLASH_ATTENTION_FORCE_BUILD=TRUE" in proc.stdout
    # Before the build: how long it will take here, from the host's figure in the manifest.
    assert "    flash-attn takes about " in proc.stdout
    assert "(2 GPU architectures (sm80, sm90) at ~180 CPU-core-minutes each" in proc.stdout
    check = venv_python(prefix, "import flash_attn; print(flash_attn.__version__)")
    assert check.stdout.strip() == "2.5.8"


# The sdist's build backend, on import: a file in the temporary directory its build runs with
# (as nvcc leaves tmpxft_* there), then, while VB_TEST_HOLD names a FIFO, it waits for a
# writer: the test knows the build is running when its own open of the FIFO returns.
HOLDING_BUILD = """
import os as _os, tempfile as _tempfile
open(_os.path.join(_tempfile.gettempdir(), "tmpxft_00004242_marker"), "w").close()
_hold = _os.environ.get("VB_TEST_HOLD")
if _hold and _os.path.exists(_hold):
    with open(_hold) as _fh:
        _fh.read()
import torch  # flash-attn's setup.py needs torch to build
"""


def holding_sdist(root: Path, work: Path) -> None:
    """The extracted source-build bundle with its flash-attn sdist rebuilt around HOLDING_BUILD;
    the manifest, the requirements' pin and SHA256SUMS made to agree again."""
    import hashlib
    import json

    from support.pkgindex import build_sdist

    old = root / "sources" / "flash_attn-2.5.8.tar.gz"
    before = hashlib.sha256(old.read_bytes()).hexdigest()
    made = build_sdist(
        work,
        "flash-attn",
        "2.5.8",
        requires=["torch", "einops", "packaging", "ninja"],
        modules={"flash_attn": "__version__ = '2.5.8'\n"},
        extra_import=HOLDING_BUILD,
        wheel_tag="cp310-cp310-linux_x86_64",
    )
    shutil.copyfile(made, old)
    after = hashlib.sha256(old.read_bytes()).hexdigest()
    for req in (root / "requirements").glob("*.txt"):
        req.write_text(req.read_text().replace(before, after))
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2).replace(before, after))
    resign(root)


@pytest.mark.timeout(900)
def test_a_killed_build_leaves_nothing_in_the_machines_temporary_directory(
    source_build_bundle: Path, home: Path, tmp_path: Path
) -> None:
    """Each run has its own TMPDIR under <prefix>/.verl-bundle/tmp/ (held by a lock): a build
    killed with SIGKILL leaves its files there, not in $TMPDIR, and the next run sweeps them
    and removes its own at the end."""
    bundle = extract(source_build_bundle, tmp_path / "b")
    holding_sdist(bundle, tmp_path / "sdist")
    machine = tmp_path / "machine-tmp"
    machine.mkdir()
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    prefix = tmp_path / "venv"
    env = {"TMPDIR": str(machine), "VB_TEST_HOLD": str(hold)}
    proc = start_install(bundle, home, prefix, "--yes", "--skip-doctor", env=env)
    try:
        with open(hold, "w"):  # returns once the build has opened it: it is running now
            own = list((prefix / ".verl-bundle" / "tmp").glob("run-*"))
            assert len(own) == 1 and (own[0] / "tmpxft_00004242_marker").is_file()
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    hold.unlink()
    assert list(machine.iterdir()) == []  # nothing of the killed run in $TMPDIR
    assert any(own[0].glob("pip-*"))  # pip's build directories went to the run's own

    again = install_into(
        bundle, home, prefix, "--yes", "--skip-doctor", env={"TMPDIR": str(machine)}
    )
    assert again.returncode == READY, output(again)
    assert list(machine.iterdir()) == []
    assert not (prefix / ".verl-bundle" / "tmp").exists()  # swept, and this run's removed


def cuda124_only(tmp_path: Path) -> dict[str, str]:
    """A server whose only nvcc is CUDA 12.4's: it cannot build the cu118 bundle's flash-attn."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    nvcc = fake / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    return {"PATH": f"{fake}:{os.environ['PATH']}", "CUDA_HOME": str(tmp_path / "nowhere")}


def test_doctor_failure_installs_nothing(
    source_build_bundle: Path, home: Path, tmp_path: Path
) -> None:
    bundle = extract(source_build_bundle, tmp_path / "b")
    prefix = tmp_path / "venv"
    scratch = tmp_path / "tmp"  # where uv is unpacked while the doctor runs
    scratch.mkdir()
    # What a killed install left (its lock no longer held), and a live install's (held here).
    dead, live = scratch / "verl-bundle-uv-dead1234", scratch / "verl-bundle-uv-live5678"
    for d in (dead, live):
        (d / "uv").mkdir(parents=True)
        (d / "uv" / "uv").write_bytes(b"\0" * 4096)
        (d / ".lock").touch()
    env = {**cuda124_only(tmp_path), "TMPDIR": str(scratch)}
    with open(live / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = install_into(bundle, home, prefix, "--yes", env=env)
    assert proc.returncode == 4, output(proc)
    assert "doctor found problems" in proc.stderr
    assert "nvcc" in proc.stdout
    assert not prefix.exists()
    # The early uv went with the failed install, and the killed one's with it; not the live one.
    assert list(scratch.iterdir()) == [live]


def test_a_skipped_source_build_passes_the_doctor_and_says_what_it_means(
    source_build_bundle: Path, home: Path, tmp_path: Path
) -> None:
    """--skip-phase flash-attn where nvcc cannot build it: the doctor (run by install.sh) no
    longer fails on nvcc, the install completes, and its verdict says what the skipped phase
    means for the trainer: not ready, exit 5, naming flash_attn and the way back."""
    bundle = extract(source_build_bundle, tmp_path / "b")
    prefix = tmp_path / "venv"
    proc = install_into(
        bundle, home, prefix, "--yes", "--skip-phase", "flash-attn", env=cuda124_only(tmp_path)
    )
    assert proc.returncode == 5, output(proc)  # installed; the trainer needs flash_attn
    assert "doctor: ready to install" in proc.stdout
    assert "flash-attn's build left out (--skip-phase flash-attn)" in proc.stdout
    done = proc.stdout[proc.stdout.index("==> [7/7] done") :]
    assert "skipped phases: flash-attn (--skip-phase)" in done
    assert done.rstrip().splitlines()[-1] == (
        "not ready to train: verl.workers.actor.dp_actor: flash_attn is not installed "
        "(phase flash-attn was left out) (and 1 more)"
    )
    assert "fail  import:flash_attn" in proc.stdout.replace("FAIL", "fail")
    assert (
        "run ./install.sh again with the same options but without --skip-phase flash-attn"
        in proc.stdout
    )
    site = prefix / "lib" / "python3.10" / "site-packages"
    assert not list(site.glob("flash_attn*")) and any(site.glob("verl-*.dist-info"))


def test_bundle_runs_from_any_directory(bundle: Path, home: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / NAME
    shutil.move(str(bundle), str(moved))
    proc = run_install(moved, home, "--dry-run")
    assert proc.returncode == 0 and str(moved) in proc.stdout


def test_rehearse_passes_for_a_good_bundle(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    from support.cli import run

    python310()
    netns_prefix()
    result = run(["rehearse", str(built_bundle[0]), "--json"], capsys)
    assert result.code == READY, result.out + result.err
    import json

    doc = json.loads(result.out)["result"]
    steps = {s["name"]: s for s in doc["steps"]}
    for name in (
        "check tarball",
        "verify",
        "venv",
        "phase torch",
        "phase wheels",
        "phase flash-attn",
        "phase verl",
        "post-install checks",
        "done",
    ):
        assert steps[name]["status"] == "ok", (name, doc)
        assert isinstance(steps[name]["seconds"], float)
    assert doc["network"].startswith("unshare -")


def test_rehearse_fails_for_a_bundle_that_does_not_install(
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bundle whose files are intact but whose stack does not import: the rehearsal must
    catch it before the bundle travels."""
    import hashlib
    import json
    import tarfile

    from support.cli import run

    python310()
    root = extract(built_bundle[0], tmp_path / "x")
    # Replace verl's wheel by one that installs but cannot be imported, and re-sign the bundle
    # consistently (as a broken upstream release would be): the checksums pass, the import fails.
    from support.pkgindex import build_wheel

    old = next(root.glob("wheels/verl-*.whl"))
    old.unlink()
    new = build_wheel(
        root / "wheels", "verl", "0.2.0.post2", modules={"verl": "import does_not_exist\n"}
    )
    digest = hashlib.sha256(new.read_bytes()).hexdigest()
    (root / "requirements" / "04-verl.txt").write_text(
        f"verl==0.2.0.post2 --hash=sha256:{digest}\n"
    )
    for_manifest = json.loads((root / "manifest.json").read_text())
    for entry in for_manifest["files"]:
        if entry["name"] == "verl":
            entry["path"] = f"wheels/{new.name}"
    (root / "manifest.json").write_text(json.dumps(for_manifest))
    resign(root)
    broken = tmp_path / "broken.tar"
    with tarfile.open(broken, "w") as tf:
        tf.add(root, arcname=root.name)
    result = run(["rehearse", str(broken)], capsys)
    assert result.code == 1, result.out
    last = result.out.rstrip().splitlines()[-1]
    assert last.startswith(
        "rehearsal FAILED: not installed as bundled: verl: import verl failed"
    ), last
    assert "import verl failed" in result.out
    failed = [line for line in result.out.splitlines() if line.strip().startswith("FAIL ")]
    assert failed and "post-install checks" in failed[0]


def test_rehearse_refuses_a_damaged_tarball(
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from support.cli import run

    netns_prefix()
    data = bytearray(built_bundle[0].read_bytes())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / built_bundle[0].name
    bad.write_bytes(bytes(data))
    result = run(["rehearse", str(bad)], capsys)
    assert result.code == 3  # damaged
    assert any(ln.split()[:3] == ["FAIL", "check", "tarball"] for ln in result.out.splitlines())
    assert (
        result.out.rstrip().splitlines()[-1].startswith("rehearsal FAILED: the tarball is damaged")
    )


def test_a_failed_phase_names_phase_command_output_and_cause(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """A phase that cannot install (here: its requirements ask for a version the bundle lacks)
    ends with the phase, the command, the last lines of its output and what explain says."""
    req = bundle / "requirements" / "02-wheels.txt"
    lines = req.read_text().splitlines()
    lines[0] = lines[0].replace("aioprometheus==1.0.0", "aioprometheus==9.9.9")
    req.write_text("\n".join(lines) + "\n")
    resign(bundle)
    prefix = tmp_path / "venv"
    proc = install_into(bundle, home, prefix, "--yes")
    assert proc.returncode == 1, output(proc)
    text = output(proc)
    assert "phase 'wheels' failed." in text
    assert "command: " in text and "-r " in text and "02-wheels.txt" in text
    assert "last lines of its output" in text
    assert "aioprometheus" in text
    assert "fix:" in text  # explain found a known cause for it
    assert "it continues from phase 'wheels'" in text
    assert (prefix / ".verl-bundle" / "done-torch").exists()
    assert not (prefix / ".verl-bundle" / "done-wheels").exists()


def test_the_bundled_doctor_runs_on_its_own(bundle: Path, tmp_path: Path) -> None:
    env = clean_environ(tmp_path)
    proc = subprocess.run(
        [str(bundle / "doctor"), "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    import json

    doc = json.loads(proc.stdout)["result"]
    assert proc.returncode == (0 if doc["ok"] else 4)
    assert {c["id"] for c in doc["checks"]} >= {
        "os",
        "python",
        "headers",
        "gcc",
        "nvcc",
        "driver",
        "disk",
        "memory",
    }
    assert not list(bundle.rglob("__pycache__"))  # the bundle directory stays as it came


def test_rehearse_says_clearly_when_the_network_cannot_be_cut(
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from support.cli import run

    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "bash"):
        found = shutil.which(tool)
        assert found
        (bare / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bare))
    result = run(["rehearse", str(built_bundle[0])], capsys)
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        "error: rehearse needs `unshare` (util-linux) to cut the network; install util-linux"
    ]


def test_post_install_checks_catch_a_package_gone_missing(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "venv"
    proc = install_into(bundle, home, prefix, "--yes", "--skip-doctor")
    assert proc.returncode == READY, output(proc)
    site = prefix / "lib" / "python3.10" / "site-packages"
    for path in [*site.glob("transformers-*.dist-info"), site / "transformers"]:
        shutil.rmtree(path)
    env = clean_environ(home)
    env["PYTHONPATH"] = str(bundle / "lib")
    check = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-m",
            "verl_bundle.airgap",
            "postinstall",
            "--bundle",
            str(bundle),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    import json

    doc = json.loads(check.stdout)
    by_id = {c["id"]: c for c in doc["result"]["installed"]}
    assert check.returncode == 1 and doc["ok"] is False
    assert doc["verdict"]["state"] == "failed"
    assert (
        by_id["versions"]["status"] == "fail"
        and "missing transformers" in by_id["versions"]["summary"]
    )
    assert by_id["requirements"]["status"] == "warn"
    assert "verl requires transformers, not installed" in by_id["requirements"]["summary"]
