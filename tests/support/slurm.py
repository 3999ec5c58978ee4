"""A real Slurm on this machine for the tests: a munged of its own, one slurmctld and two slurmd
(n1, n2) on 127.0.0.1 with distinct ports, from Debian's packages (slurm-wlm, munge; .ci/run installs them).
Needs root (slurmd runs jobs as their users); skips with the reason when it cannot start."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

NODES = ("n1", "n2")
START_WAIT = 60.0  # seconds for the daemons to register (a readiness loop, not an assertion)
NICE = -10  # the daemons' and their jobs' niceness (root may lower it)


@dataclass(frozen=True)
class Slurm:
    conf: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _conf(root: Path) -> str:
    ports = [_free_port() for _ in range(len(NODES) + 1)]
    nodes = "\n".join(
        f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} Port={p} CPUs=1 "
        "State=UNKNOWN"
        for n, p in zip(NODES, ports[1:], strict=True)
    )
    return f"""ClusterName=verltest
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/backfill
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=test Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "a test Slurm needs root (slurmd runs jobs as their users)"
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sbcast", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install -y slurm-wlm munge, as .ci/run does)"
    return None


@contextmanager
def started(root: Path) -> Iterator[Slurm]:
    """Its own munged (a socket under `root`), slurmctld and the slurmd of NODES, stopped on
    exit; skips the test with the reason when they cannot start."""
    why = _why_not()
    if why:
        pytest.skip(why)
    for d in ("state", *(f"spool/{n}" for n in NODES)):
        (root / d).mkdir(parents=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs: list[subprocess.Popen[bytes]] = []
    ours = [_munged(root / "munge")]  # this Slurm's own munged, stopped on exit
    quiet = subprocess.DEVNULL  # the daemons log to files under root
    for argv in (["slurmctld"], *(["slurmd", "-N", n] for n in NODES)):
        # At a higher CPU priority than the rest of the suite, as the nodes' own processes
        # would be on nodes of their own: the jobs inherit it (Slurm's PropagatePrioProcess=0),
        # so Ray's fixed 30 s start-up is not raced against the other workers' tests.
        cmd = ["nice", "-n", str(NICE), argv[0], "-D", "-f", str(conf), *argv[1:]]
        procs.append(subprocess.Popen(cmd, env=env, stdout=quiet, stderr=quiet))
    cluster = Slurm(conf, env)
    deadline = time.monotonic() + START_WAIT
    idle = ""
    while time.monotonic() < deadline:
        idle = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=30).stdout
        if idle.count("idle") == len(NODES):
            break
        time.sleep(1)
    else:
        for p in procs:
            p.terminate()
        _stop(ours)
        log = (
            (root / "slurmctld.log").read_text(errors="replace")[-500:]
            if (root / "slurmctld.log").exists()
            else ""
        )
        pytest.skip(f"the test Slurm did not come up ({idle.strip()!r}); slurmctld.log: {log}")
    try:
        yield cluster
    finally:
        # A job a timed-out test left is cancelled, and what it started (its slurmstepd, its
        # steps, their Ray) is stopped: nothing of this Slurm outlives it.
        cluster.run("scancel", "--full", "--quiet", "-p", "test", timeout=30)
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        _stop(ours)
        _kill_started_by(conf)


def _kill_started_by(conf: Path) -> None:
    """SIGKILL every process that carries SLURM_CONF=conf in its environment (slurmd hands it
    to each slurmstepd and job): those this Slurm started, and nothing else on the machine."""
    mark = f"SLURM_CONF={conf}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), 9)


def _munged(where: Path) -> subprocess.Popen[bytes]:
    """A munged of this Slurm's own: its key, socket, seed and log under `where` (the conf's
    AuthInfo names the socket), run as root in the foreground as this process's child. Never
    the machine's munged: another run's Slurm stopping or starting it cannot take this one's
    authentication away in the middle of a job. Skips the test when it does not start."""
    where.mkdir(mode=0o700)
    key = where / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    socket_file = where / "munge.socket"
    munged = subprocess.Popen(
        [
            *("munged", "--foreground", "--force", f"--socket={socket_file}"),
            *(f"--key-file={key}", f"--pid-file={where / 'munged.pid'}"),
            *(f"--log-file={where / 'munged.log'}", f"--seed-file={where / 'munged.seed'}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    until = time.monotonic() + 15  # a readiness loop, not an assertion
    while not socket_file.exists() and munged.poll() is None and time.monotonic() < until:
        time.sleep(0.1)
    if not socket_file.exists():
        _stop([munged])
        pytest.skip(f"munged does not start (no {socket_file})")
    return munged


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop this Slurm's munged (the machine's own, if any, is never touched)."""
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def lint(script: Path) -> None:
    """shellcheck, and each script a node runs (NODE_STEP='...') whole: a quote inside one
    would end it early and still pass bash -n."""
    text = script.read_text()
    for name in ("NODE_STEP", "PREFLIGHT_STEP", "WAIT_PY"):
        if f"\n{name}='" in text:
            block = text.split(f"\n{name}='", 1)[1].split("\n'\n", 1)[0]
            assert "'" not in block, f"{name} holds a single quote"
            if name in ("NODE_STEP", "PREFLIGHT_STEP"):
                syntax = subprocess.run(["bash", "-n", "-c", block], capture_output=True, text=True)
                assert syntax.returncode == 0, syntax.stderr
    if shutil.which("shellcheck") is None:
        return  # `make lint` needs it anyway; the syntax was checked with bash -n
    check = subprocess.run(
        ["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout
