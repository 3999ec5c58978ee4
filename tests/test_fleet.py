"""The fleet report over real doctor results: each node is a fake machine (its own nvidia-smi,
python and prefix on PATH), the doctor runs as a real subprocess with `--json`, and the report
names the nodes that differ, in what, and exits 1 on drift."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run
from conftest import clean_environ
from toolchain import CLEARED, FakeGpu, FakeMachine

from verl_bundle.airgap.doctor import fingerprint
from verl_bundle.airgap.doctor.node import ifname_matches

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"
GPUS = tuple(FakeGpu(i, H100, 81559) for i in range(2))


def quiet_environ(tmp: Path) -> dict[str, str]:
    """This environment without pip settings, GPU placement or launcher variables."""
    env = clean_environ(tmp)
    for var in (*CLEARED, "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        env.pop(var, None)
    return env


def fake_python(machine: FakeMachine, version: str) -> Path:
    """A `python` that answers the doctor's interpreter probe with `version` (and cannot make
    a venv, which is one more warning on every node alike)."""
    answer = json.dumps(
        {"version": version, "implementation": "cpython", "include": "/nowhere", "executable": "x"}
    )
    return machine.script("python3", f"case \"$*\" in *venv*) exit 1 ;; esac\necho '{answer}'\n")


def node(
    tmp: Path,
    name: str,
    *,
    driver: str = "535.104.05",
    python: str = "3.10.12",
    extra_dist: str | None = None,
    **env: str,
) -> Path:
    """Run the doctor on a fake node; write its --json output to tmp/gathered/NAME.json."""
    machine = FakeMachine(tmp / name)
    machine.nvidia_smi(gpus=GPUS, apps=(), driver=driver)
    py = fake_python(machine, python)
    prefix = tmp / name / "prefix"
    dists = fingerprint.distributions(sys.executable)
    value = fingerprint.of_lines([*dists, *([extra_dist] if extra_dist else [])])
    (prefix / fingerprint.FINGERPRINT).parent.mkdir(parents=True)
    (prefix / fingerprint.FINGERPRINT).write_text(value + "\n")
    doctor = [sys.executable, "-m", "verl_bundle.airgap", "doctor", "--json"]
    proc = subprocess.run(
        [*doctor, "--python", str(py), "--prefix", str(prefix)],
        env={**quiet_environ(tmp), **machine.environ(), "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        cwd=tmp,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    out = tmp / "gathered" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(proc.stdout)
    return out


def report(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = run(["fleet", "report", str(directory), "--json"], capsys)
    doc = json.loads(r.out)
    assert doc["command"] == "fleet" and doc["schema"] == 1
    return r.code, doc["result"]


def test_the_doctor_reports_what_the_fleet_compares(tmp_path: Path) -> None:
    path = node(tmp_path, "n1", MASTER_ADDR="localhost", NCCL_SOCKET_IFNAME="lo")
    host = json.loads(path.read_text())["result"]["host"]
    assert host["driver"] == "535.104.05" and host["python"] == "3.10.12"
    assert host["gpu_models"] == [f"{H100} (81559 MiB)"] * 2
    assert host["fingerprint"] == fingerprint.read(str(tmp_path / "n1" / "prefix"))
    assert host["socket_ifnames"] == {"NCCL_SOCKET_IFNAME": "lo"}
    assert host["missing_ifnames"] == {} and host["master_addr_resolves"] is True
    assert isinstance(host["open_files"], int) and isinstance(host["shm_bytes"], int)
    assert host["hostname"]


def test_driver_python_and_fingerprint_drift_are_each_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node(tmp_path, "n1")
    node(tmp_path, "n2", driver="550.54.15")
    node(tmp_path, "n3", python="3.10.14")
    node(tmp_path, "n4", extra_dist="torch==2.3.0")
    code, result = report(tmp_path / "gathered", capsys)
    assert code == 1 and result["ok"] is False
    drift = {d["fact"]: {v["value"]: v["nodes"] for v in d["values"]} for d in result["drift"]}
    assert set(drift) == {"driver", "python", "fingerprint"}
    assert drift["driver"] == {"535.104.05": ["n1", "n3", "n4"], "550.54.15": ["n2"]}
    assert drift["python"] == {"3.10.12": ["n1", "n2", "n4"], "3.10.14": ["n3"]}
    assert [nodes for nodes in drift["fingerprint"].values()] == [["n1", "n2", "n3"], ["n4"]]
    assert [n["name"] for n in result["nodes"]] == ["n1", "n2", "n3", "n4"]  # one host name
    assert result["nodes"][0]["checks"]["python"] in ("ok", "warn", "fail")
    text = run(["fleet", "report", str(tmp_path / "gathered")], capsys)
    assert text.code == 1
    assert "DRIFT NVIDIA driver" in text.out and "  550.54.15: n2" in text.out
    assert "DRIFT Python patch version" in text.out and "  3.10.14: n3" in text.out
    assert "DRIFT environment fingerprint" in text.out
    assert text.out.splitlines()[0].split()[:3] == ["node", "os", "python"]
    assert "3 drift(s)" in text.last_line


def test_nodes_that_agree_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node(tmp_path, "n1")
    node(tmp_path, "n2")
    code, result = report(tmp_path / "gathered", capsys)
    assert (code, result["ok"], result["drift"], result["problems"]) == (0, True, [], [])
    text = run(["fleet", "report", str(tmp_path / "gathered")], capsys)
    assert text.code == 0 and text.last_line == "fleet: 2 node(s) agree"


def test_a_missing_interface_and_an_unresolved_master_are_node_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node(tmp_path, "n1", NCCL_SOCKET_IFNAME="lo", MASTER_ADDR="localhost")
    node(tmp_path, "n2", NCCL_SOCKET_IFNAME="ib9", MASTER_ADDR="no-such-head.invalid")
    code, result = report(tmp_path / "gathered", capsys)
    assert code == 1
    assert [d["fact"] for d in result["drift"]] == ["socket_ifnames"]
    problems = [(p["node"], p["what"]) for p in result["problems"]]
    assert problems == [
        ("n2", "NCCL_SOCKET_IFNAME=ib9 names no network interface of this node"),
        ("n2", "MASTER_ADDR=no-such-head.invalid does not resolve on this node"),
    ]
    assert all(p["fix"] for p in result["problems"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("eth", True),
        ("=eth", False),
        ("=eth0", True),
        ("ib,eth1", True),
        ("ib", False),
        ("^eth", True),
        ("^eth,lo", False),
        ("^=lo", True),
    ],
)
def test_ifname_matches_as_nccl_reads_it(value: str, expected: bool) -> None:
    assert ifname_matches(value, ("eth0", "eth1", "lo")) is expected


def test_unreadable_results_are_one_line_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(["fleet", "report", str(empty)], capsys)
    assert r.code == 2 and "no *.json doctor results" in r.err and len(r.err.splitlines()) == 1
    (empty / "x.json").write_text(json.dumps({"schema": 1, "command": "verify", "result": {}}))
    r = run(["fleet", "report", str(empty)], capsys)
    assert r.code == 2 and "x.json: not a doctor result" in r.err
    (empty / "x.json").write_text("{")
    r = run(["fleet", "report", str(empty)], capsys)
    assert r.code == 2 and "not readable JSON" in r.err


def test_the_fingerprint_changes_with_a_distribution(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    before = fingerprint.fingerprint(py)
    site = next((venv / "lib").glob("python*/site-packages"))
    info = site / "Flash_Attn-2.5.8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Flash_Attn\nVersion: 2.5.8\n")
    assert "Flash_Attn==2.5.8" in fingerprint.distributions(py)
    prefix = tmp_path / "prefix"
    after = fingerprint.write(str(prefix), py)
    assert after != before and fingerprint.read(str(prefix)) == after
    assert after == fingerprint.of_lines(["flash-attn==2.5.8"])
    with pytest.raises(fingerprint.FingerprintError, match="cannot list"):
        fingerprint.fingerprint(str(tmp_path / "no-python"))
