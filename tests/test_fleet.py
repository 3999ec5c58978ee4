"""The fleet report over real doctor results: each node is a fake machine (its own nvidia-smi,
python and prefix on PATH), the doctor runs as a real subprocess with `--json`, and the report
names the nodes that differ, in what, and exits 1 on drift."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_environ
from support.cli import run
from support.toolchain import CLEARED, FakeGpu, FakeMachine

from verl_bundle.airgap.doctor import fingerprint
from verl_bundle.airgap.doctor.node import ifname_matches
from verl_bundle.airgap.errors import EXIT_CODES
from verl_bundle.cluster.fleet.standing import exit_words

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
    """A `python` that answers the doctor's interpreter probe with `version` and makes the
    trial venv's bin/python."""
    answer = json.dumps(
        {"version": version, "implementation": "cpython", "include": "/nowhere", "executable": "x"}
    )
    venv = 'case "$*" in *venv*) for last; do :; done; /bin/mkdir -p "$last/bin"; : > "$last/bin/python"; exit 0 ;; esac'
    return machine.script("python3", f"{venv}\necho '{answer}'\n")


def dist(site: Path, name: str, version: str, files: dict[str, bytes] | None = None) -> None:
    """One installed distribution as pip leaves it: its files, METADATA, INSTALLER and a RECORD
    listing each with its sha256 and size (a console script outside site-packages too)."""
    files = files or {f"{name}/__init__.py": f"VERSION = {version!r}\n".encode()}
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/INSTALLER": b"uv\n",
        f"{info}/uv_cache.json": f'{{"timestamp": "{site}"}}'.encode(),  # differs by prefix
        f"../../../bin/{name}": f"#!{site}/python\n".encode(),  # differs by prefix
    }
    rows = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{len(data)}")
    (site / info / "RECORD").write_text("\n".join([*rows, f"{info}/RECORD,,"]) + "\n")


def environment(prefix: Path, extra: dict[str, str] | None = None) -> Path:
    """A venv-shaped environment at `prefix` with two distributions (and `extra`); its site."""
    site = prefix / "lib" / "python3.10" / "site-packages"
    for name, version in {"ray": "2.40.0", "pylatexenc": "2.10", **(extra or {})}.items():
        dist(site, name, version)
    return site


def node(
    tmp: Path,
    name: str,
    *,
    driver: str = "535.104.05",
    python: str = "3.10.12",
    extra_dist: dict[str, str] | None = None,
    deep: bool = False,
    change: Callable[[Path], None] | None = None,
    **env: str,
) -> Path:
    """Run the doctor on a fake node whose prefix holds an installed environment (recorded as
    its install leaves it, then `change`d); write its --json output to tmp/gathered/NAME.json."""
    machine = FakeMachine(tmp / name)
    machine.nvidia_smi(gpus=GPUS, apps=(), driver=driver)
    py = fake_python(machine, python)
    prefix = tmp / name / "prefix"
    site = environment(prefix, extra_dist)
    fingerprint.write(str(prefix))
    if change is not None:
        change(site)
    doctor = [sys.executable, "-m", "verl_bundle.airgap", "doctor", "--json"]
    proc = subprocess.run(
        [*doctor, "--python", str(py), "--prefix", str(prefix), *(["--deep"] if deep else [])],
        # Each fake node's LD_LIBRARY_PATH is its own directory; real nodes share one path.
        env={**quiet_environ(tmp), **machine.environ(), "PYTHONPATH": str(REPO), **env}
        | ({} if "LD_LIBRARY_PATH" in env else {"LD_LIBRARY_PATH": ""}),
        capture_output=True,
        text=True,
        cwd=tmp,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr  # ready to install, or not
    out = tmp / "gathered" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(proc.stdout)
    return out


def report(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:  # type: ignore[type-arg]
    """The report's JSON over plain doctor results (hand-gathered: --doctor-only)."""
    r = run(["fleet", "report", str(directory), "--doctor-only", "--json"], capsys)
    doc = json.loads(r.out)
    assert doc["command"] == "fleet" and doc["schema"] == 1
    return r.code, doc["result"]


def test_the_doctor_reports_what_the_fleet_compares(tmp_path: Path) -> None:
    path = node(tmp_path, "n1", MASTER_ADDR="localhost", NCCL_SOCKET_IFNAME="lo")
    host = json.loads(path.read_text())["result"]["host"]
    assert host["driver"] == "535.104.05" and host["python"] == "3.10.12"
    assert host["gpu_models"] == [f"{H100} (81559 MiB)"] * 2
    assert host["fingerprint"] == fingerprint.read(str(tmp_path / "n1" / "prefix"))
    assert host["installed_fingerprint"] == host["fingerprint"]
    assert host["changed_since_install"] == []
    assert set(host["distributions"]) == {"ray", "pylatexenc"}
    assert host["env"]["PYTHONPATH"] == str(REPO) and "NCCL_SOCKET_IFNAME" not in host["env"]
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
    node(tmp_path, "n4", extra_dist={"torch": "2.3.0"})
    code, result = report(tmp_path / "gathered", capsys)
    assert code == 1 and result["ok"] is False
    drift = {d["fact"]: {v["value"]: v["nodes"] for v in d["values"]} for d in result["drift"]}
    assert set(drift) == {"driver", "python", "fingerprint"}
    assert drift["driver"] == {"535.104.05": ["n1", "n3", "n4"], "550.54.15": ["n2"]}
    assert drift["python"] == {"3.10.12": ["n1", "n2", "n4"], "3.10.14": ["n3"]}
    assert [nodes for nodes in drift["fingerprint"].values()] == [["n1", "n2", "n3"], ["n4"]]
    assert [n["name"] for n in result["nodes"]] == ["n1", "n2", "n3", "n4"]  # one host name
    assert result["nodes"][0]["checks"]["python"] in ("ok", "warn", "fail")
    text = run(["fleet", "report", str(tmp_path / "gathered"), "--doctor-only"], capsys)
    assert text.code == 1
    assert "DRIFT NVIDIA driver" in text.out and "  550.54.15: n2" in text.out
    assert "DRIFT Python patch version" in text.out and "  3.10.14: n3" in text.out
    assert "DRIFT environment fingerprint" in text.out
    assert text.out.splitlines()[0].split()[:4] == ["node", "install", "os", "python"]
    assert "3 drift(s)" in text.last_line


def test_hand_gathered_doctor_results_agree_only_with_doctor_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain doctor result holds no install record: without --doctor-only it is refused in
    one line; with it the nodes agree, and the verdict says their installs were not compared
    (and, with no --expect, that a node that never reported is not seen)."""
    node(tmp_path, "n1")
    node(tmp_path, "n2")
    gathered = str(tmp_path / "gathered")
    refused = run(["fleet", "report", gathered], capsys)
    assert refused.code == 2 and len(refused.err.splitlines()) == 1, refused.err
    assert "n1.json: a plain doctor result, with no install record" in refused.err
    assert "--doctor-only" in refused.err
    code, result = report(tmp_path / "gathered", capsys)
    assert (code, result["ok"], result["drift"], result["problems"]) == (0, True, [], [])
    assert result["uncompared"] == ["n1", "n2"]
    text = run(["fleet", "report", gathered, "--doctor-only"], capsys)
    assert text.code == 0 and text.last_line == (
        "fleet: 2 node(s) agree on their doctor results (2 with no install record "
        "(--doctor-only): their installs were not compared; no --expect: a node that never "
        "reported is not seen)"
    )
    expected = run(["fleet", "report", gathered, "--doctor-only", "--expect", "n1,n2"], capsys)
    assert expected.code == 0 and "no --expect" not in expected.last_line


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
    assert r.code == 2 and "no *.json results" in r.err and len(r.err.splitlines()) == 1
    (empty / "x.json").write_text(json.dumps({"schema": 1, "command": "verify", "result": {}}))
    r = run(["fleet", "report", str(empty)], capsys)
    assert r.code == 2 and "x.json: not a node's result" in r.err
    (empty / "x.json").write_text("{")
    r = run(["fleet", "report", str(empty)], capsys)
    assert r.code == 2 and "not readable JSON" in r.err


def test_the_fingerprint_is_recomputed_from_the_installed_files(tmp_path: Path) -> None:
    """Two prefixes holding the same distributions agree (the scripts' absolute paths do not
    count); a removed distribution, a deleted file, a file of another size, and (with --deep)
    a file of the same size altered each change it."""
    a, b = tmp_path / "a", tmp_path / "long" / "path" / "b"
    site_a, site_b = environment(a), environment(b)
    same = fingerprint.examine(str(a)).fingerprint
    assert same == fingerprint.examine(str(b)).fingerprint
    assert fingerprint.write(str(a)) == same and fingerprint.read(str(a)) == same
    (site_a / "ray" / "__init__.py").write_text("VERSION = '2.40.1'\n")  # same size
    assert fingerprint.examine(str(a)).fingerprint == same  # fast: sizes only
    deep = fingerprint.examine(str(a), deep=True)
    assert deep.fingerprint != same
    assert deep.damaged() == ["ray: ray/__init__.py differs from its RECORD"]
    (site_b / "ray" / "__init__.py").unlink()
    found = fingerprint.examine(str(b))
    assert found.entries()["ray"].endswith("(1 file(s) not as recorded: ray/__init__.py missing)")
    (site_b / "pylatexenc" / "__init__.py").write_text("x")
    assert "is 1 bytes, not 17" in fingerprint.examine(str(b)).entries()["pylatexenc"]
    shutil.rmtree(site_b / "pylatexenc-2.10.dist-info")
    assert set(fingerprint.examine(str(b)).entries()) == {"ray"}
    assert fingerprint.site_dirs(str(tmp_path / "none")) == []


def test_a_removed_package_and_a_deleted_file_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node(tmp_path, "n1")
    node(tmp_path, "n2", change=lambda site: shutil.rmtree(site / "pylatexenc-2.10.dist-info"))
    node(tmp_path, "n3", change=lambda site: (site / "ray" / "__init__.py").unlink())
    code, result = report(tmp_path / "gathered", capsys)
    assert code == 1
    (drift,) = result["drift"]
    assert drift["fact"] == "fingerprint" and len(drift["values"]) == 3
    lines = drift["detail"]
    assert len(lines) == 2
    assert lines[0].startswith("pylatexenc: 2.10 ") and lines[0].endswith(
        "on n1, n3; not installed on n2"
    )
    assert "ray/__init__.py missing) on n3" in lines[1]
    # Each node also knows it changed since its own install: named even with one node.
    changed = {p["node"]: p["what"] for p in result["problems"]}
    assert set(changed) == {"n2", "n3"}
    assert changed["n2"] == "changed since its install: pylatexenc 2.10 removed"
    assert changed["n3"].startswith("changed since its install: ray: 2.40.0 ")
    assert changed["n3"].endswith("(1 file(s) not as recorded: ray/__init__.py missing)")
    assert all("--repair" in p["fix"] for p in result["problems"])
    text = run(["fleet", "report", str(tmp_path / "gathered"), "--doctor-only"], capsys).out
    assert "    pylatexenc: 2.10 " in text and "FAIL n2: changed since its install" in text


def test_the_doctor_reports_the_variables_that_change_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain doctor result carries them: HF_HUB_OFFLINE unset on one node is drift."""
    node(tmp_path, "n1", HF_HUB_OFFLINE="1", NCCL_DEBUG="INFO")
    node(tmp_path, "n2", NCCL_DEBUG="INFO")
    code, result = report(tmp_path / "gathered", capsys)
    assert code == 1
    (drift,) = result["drift"]
    assert drift["fact"] == "env:HF_HUB_OFFLINE"
    assert drift["values"] == [
        {"value": "1", "nodes": ["n1"]},
        {"value": "unset", "nodes": ["n2"]},
    ]


# -- results as the cluster installs write them: runs, expected nodes, failures -------------
def record(
    directory: Path,
    name: str,
    doctor: Path | None,
    *,
    run_id: str = "7-aa",
    rc: int = 0,
    bundle: str = "b" * 64,
    env: dict[str, str] | None = None,
) -> Path:
    """NAME.json as the Slurm script and the playbook write it, around a real doctor's JSON."""
    result = {
        "node": name,
        "run": run_id,
        "engine": "slurm",
        "bundle": bundle,
        "prefix": "/opt/verl",
        "install": {"rc": rc, "log": f"{name}.install.log"},
        "doctor_rc": 0 if doctor else 127,
        "env": env or {},
        # As the scripts write it: the doctor's output as text (a document works too).
        "doctor_output": doctor.read_text() if doctor else None,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps({"schema": 1, "command": "node", "result": result}))
    return path


def run_file(directory: Path, run_id: str, expect: object, bundle: str | None = None) -> None:
    doc = {"run": run_id, "engine": "slurm", "expect": expect, "bundle": bundle}
    (directory / ".run.json").write_text(json.dumps({"schema": 1, "command": "run", "result": doc}))


@pytest.fixture(scope="module")
def doctor_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real doctor result (a fake node), read by every test here (none changes it)."""
    return node(tmp_path_factory.mktemp("doctor"), "n0")


def test_missing_stale_and_failed_nodes_are_each_one_line(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    record(results, "gpu01", doctor_json)
    record(results, "gpu02", doctor_json, rc=3)
    record(results, "gpu03", doctor_json, run_id="6-zz")  # the previous run's file
    record(results, "gpu09", doctor_json)  # not one of this run's nodes
    run_file(results, "7-aa", "gpu[01-04]")
    r = run(["fleet", "report", str(results)], capsys)
    assert r.code == 1
    fails = [ln for ln in r.out.splitlines() if ln.startswith("FAIL ")]
    assert fails == [
        "FAIL gpu02: install failed: exit 3 (the bundle is damaged)",
        "FAIL gpu03: stale: a result of run 6-zz, not of this run 7-aa",
        "FAIL gpu09: not one of the expected nodes",
        "FAIL gpu04: missing: no result from this node",
    ]
    assert "4 node(s) reported, 4 expected; 4 failed, missing or stale" in r.last_line
    doc = json.loads(run(["fleet", "report", str(results), "--json"], capsys).out)["result"]
    assert doc["run"] == "7-aa" and doc["missing"] == ["gpu03", "gpu04"]
    assert [n["install_rc"] for n in doc["nodes"]] == [0, 3, 0, 0]
    assert doc["expected"] == ["gpu01", "gpu02", "gpu03", "gpu04"]


def test_a_run_is_never_chosen_by_a_files_time(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34 L3: without .run.json, results of two runs cannot tell which is this run's;
    the newest file (here an old run's, its time set a year ahead) never decides it."""
    results = tmp_path / "results"
    record(results, "n1", doctor_json, run_id="78-new")
    record(results, "n2", doctor_json, run_id="78-new")
    old = record(results, "n3", doctor_json, run_id="12-old")
    os.utime(old, (old.stat().st_mtime + 365 * 86400,) * 2)
    r = run(["fleet", "report", str(results), "--expect", "n[1-3]"], capsys)
    fails = [ln for ln in r.out.splitlines() if ln.startswith("FAIL ")]
    assert r.code == 1 and fails == [
        "FAIL results of runs 12-old, 78-new and no .run.json: which is this run's cannot be told"
    ], r.out
    doc = json.loads(
        run(["fleet", "report", str(results), "--expect", "n[1-3]", "--json"], capsys).out
    )
    assert doc["result"]["run"] is None and doc["result"]["problems"][0]["node"] is None
    # One run among the results: it is the run, and a node of another run is named.
    old.unlink()
    r = run(["fleet", "report", str(results), "--expect", "n1,n2"], capsys)
    assert r.code == 0 and r.last_line == "fleet: 2 node(s) agree", r.out
    ok = run(["fleet", "report", str(results), "--expect", "n2"], capsys)
    assert ok.code == 1 and "FAIL n1: not one of the expected nodes" in ok.out


def test_a_node_result_with_no_doctor_or_another_bundle_fails(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    record(results, "n2", None, rc=127)
    record(results, "n3", doctor_json, bundle="c" * 64)
    run_file(results, "7-aa", ["n1", "n2", "n3"], bundle="b" * 64)
    r = run(["fleet", "report", str(results)], capsys)
    fails = [ln for ln in r.out.splitlines() if ln.startswith("FAIL ")]
    assert fails == [
        "FAIL n2: install failed: exit 127 (not one of install.sh's exit codes: read its log)",
        "FAIL n2: no doctor result (doctor exit 127)",
        "FAIL n3: its bundle cccccccccccc is not the run's bbbbbbbbbbbb",
    ]
    assert "DRIFT bundle (its SHA256SUMS)" in r.out and "  cccccccccccc: n3" in r.out


def test_the_variables_that_change_a_run_are_compared(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    same = {"HF_HUB_OFFLINE": "1", "NCCL_SOCKET_IFNAME": "eth0", "HOME": "/root"}
    record(results, "n1", doctor_json, env=same)
    record(results, "n2", doctor_json, env={**same, "HF_HUB_OFFLINE": "0", "HOME": "/x"})
    record(results, "n3", doctor_json, env={**same, "PYTHONPATH": "/site", "NCCL_IB_DISABLE": "1"})
    r = run(["fleet", "report", str(results), "--json"], capsys)
    drift = {
        d["fact"]: {v["value"]: v["nodes"] for v in d["values"]}
        for d in json.loads(r.out)["result"]["drift"]
    }
    assert r.code == 1
    assert drift == {
        "env:HF_HUB_OFFLINE": {"1": ["n1", "n3"], "0": ["n2"]},
        "env:NCCL_IB_DISABLE": {"unset": ["n1", "n2"], "1": ["n3"]},
        "env:PYTHONPATH": {"unset": ["n1", "n2"], "/site": ["n3"]},
    }


@pytest.mark.parametrize(
    ("hostile", "says"),
    [
        ({"node": ["n1"]}, "result.node: expected text, got a list"),
        ({"install": {"rc": "0"}}, "result.install.rc: expected a whole number, got text"),
        ({"install": {"rc": True}}, "result.install.rc: expected a whole number, got true/false"),
        ({"env": ["HF_HUB_OFFLINE=1"]}, "result.env: expected a map, got a list"),
        ({"env": {"HF_HOME": 3}}, "result.env.HF_HOME: expected text, got a number"),
        ({"node": "../etc/passwd"}, "result.node '../etc/passwd' is not a node name"),
        (
            {"doctor_output": None, "doctor": {"command": "verify"}},
            "result.doctor is not a doctor result",
        ),
        ({"doctor_output": None, "doctor": "x"}, "result.doctor: expected a map, got text"),
        ({"doctor_output": ["x"]}, "result.doctor_output: expected text, got a list"),
    ],
)
def test_a_field_of_the_wrong_type_is_one_line(
    hostile: dict[str, object],
    says: str,
    tmp_path: Path,
    doctor_json: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = record(tmp_path / "results", "n1", doctor_json)
    doc = json.loads(path.read_text())
    doc["result"].update(hostile)
    path.write_text(json.dumps(doc))
    r = run(["fleet", "report", str(path.parent)], capsys)
    assert r.code == 2 and says in r.err and len(r.err.splitlines()) == 1, r.err
    assert "Traceback" not in r.err + r.out


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("driver", ["535"], "result.host.driver: expected text, got a list"),
        ("gpu_models", 8, "result.host.gpu_models: expected a list of at most 1000, got a number"),
        ("open_files", "65536", "result.host.open_files: expected a whole number, got text"),
        ("socket_ifnames", "eth0", "result.host.socket_ifnames: expected a map, got text"),
        ("gpu_models", ["x"] * 5000, "result.host.gpu_models: expected a list of at most 1000"),
    ],
)
def test_a_host_fact_of_the_wrong_type_is_one_line(
    where: str,
    value: object,
    says: str,
    tmp_path: Path,
    doctor_json: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = json.loads(doctor_json.read_text())
    doc["result"]["host"][where] = value
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "n1.json").write_text(json.dumps(doc))
    r = run(["fleet", "report", str(tmp_path / "g")], capsys)
    assert r.code == 2 and says in r.err and len(r.err.splitlines()) == 1, r.err


def test_long_values_are_cut_with_a_marker(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(doctor_json.read_text())
    doc["result"]["host"]["driver"] = "5" * 100_000
    doc["result"]["host"]["kernel"] = "k" * 100_000
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "n1.json").write_text(json.dumps(doc))
    (tmp_path / "g" / "n2.json").write_text(doctor_json.read_text())
    r = run(["fleet", "report", str(tmp_path / "g"), "--doctor-only", "--json"], capsys)
    result = json.loads(r.out)["result"]
    host = result["nodes"][0]["host"]
    assert host["driver"] == "5" * 512 + "...[cut]" and host["kernel"].endswith("...[cut]")
    shown = {v["value"] for d in result["drift"] if d["fact"] == "driver" for v in d["values"]}
    assert "5" * 120 in shown and len(r.out) < 20_000


def test_hostile_files_are_refused_quickly_in_one_line(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    g = tmp_path / "g"
    g.mkdir()
    cases = {
        "deep": ("[" * 100_000 + "]" * 100_000, "nested deeper than 16 levels"),
        "deep20": ("[" * 20 + "]" * 20, "nested deeper than 16 levels"),
        "huge": (" " * (5 << 20), "over 4 MiB"),
        "junk": ("\x00\xff{", "not readable JSON"),
        "list": ("[1, 2]", "expected a map, got a list"),
    }
    for name, (text, says) in cases.items():
        for p in g.iterdir():
            p.unlink()
        (g / f"{name}.json").write_text(text, errors="surrogateescape")
        r = run(["fleet", "report", str(g)], capsys)  # bounded reads: a hang is the timeout's
        assert r.code == 2 and says in r.err and len(r.err.splitlines()) == 1, (name, r.err)
    for p in g.iterdir():
        p.unlink()
    os.mkfifo(g / "fifo.json")  # reading it would block forever
    (g / "zero.json").symlink_to("/dev/zero")  # reading it would fill memory
    for stop in ("fifo.json", "zero.json"):
        r = run(["fleet", "report", str(g)], capsys)
        assert r.code == 2 and "not a regular file" in r.err, r.err
        (g / stop).unlink()


def test_two_files_naming_one_node_are_refused(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    copy = record(results, "n1", doctor_json).rename(results / "n1-old.json")
    record(results, "n1", doctor_json)
    r = run(["fleet", "report", str(results)], capsys)
    assert r.code == 2 and len(r.err.splitlines()) == 1
    assert "n1-old.json and n1.json both report node n1" in r.err, r.err
    assert copy.exists()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu[01-04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
        ("gpu[08-10,12],cpu1", ["gpu08", "gpu09", "gpu10", "gpu12", "cpu1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("a, b ,a", ["a", "b"]),
        ("node-7.cluster", ["node-7.cluster"]),
    ],
)
def test_slurm_hostlists_expand_without_scontrol(text: str, names: list[str]) -> None:
    from verl_bundle.cluster.fleet.hostlist import expand

    assert expand(text) == names


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("n[1-999999999]", "more than 100000 names"),
        ("n[1-400]x[1-400]", "more than 100000 names"),
        ("n[3-1]", "the range 3-1 runs backwards"),
        ("n[1-2", "a '[' without its ']'"),
        ("n[a-b]", "is not numbers and ranges"),
        ("n[[1]]", "brackets inside brackets"),
        ("a b", "is not a node name"),
        ("$(touch X)", "is not a node name"),
    ],
)
def test_a_bad_hostlist_is_one_line(
    text: str, says: str, tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    r = run(["fleet", "report", str(results), "--expect", text], capsys)
    assert r.code == 2 and says in r.err and len(r.err.splitlines()) == 1, r.err


def test_expect_reads_a_file_of_names(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    record(results, "n2", doctor_json)
    names = tmp_path / "nodes.txt"
    names.write_text("# the partition\nn[1-2]\nn3  # down for repair\n")
    r = run(["fleet", "report", str(results), "--expect", str(names)], capsys)
    assert r.code == 1 and "FAIL n3: missing: no result from this node" in r.out
    names.write_text("n1\nn2\n")
    ok = run(["fleet", "report", str(results), "--expect", str(names)], capsys)
    assert ok.code == 0 and ok.last_line == "fleet: 2 node(s) agree", ok.out


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ('{"schema": 1, "command": "doctor", "result": {"ok": tr', "not readable JSON"),
        ("[" * 50_000, "nested deeper than 16 levels"),
        ('{"command": "verify"}', "the document is not a doctor result"),
        ('{"command": "doctor", "result": {"checks": 5}}', "expected a list of at most 1000"),
    ],
)
def test_a_damaged_doctor_output_fails_its_node_not_the_report(
    output: str,
    says: str,
    tmp_path: Path,
    doctor_json: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    path = record(results, "n2", doctor_json)
    run_file(results, "7-aa", "n[1-3]")
    doc = json.loads(path.read_text())
    doc["result"]["doctor_output"] = output
    path.write_text(json.dumps(doc))
    doc["result"].update(node="n3", doctor_output=None, doctor=json.loads(doctor_json.read_text()))
    (results / "n3.json").write_text(json.dumps(doc))  # the document itself is read too
    r = run(["fleet", "report", str(results)], capsys)
    fails = [ln for ln in r.out.splitlines() if ln.startswith("FAIL ")]
    assert r.code == 1 and len(fails) == 1, r.out + r.err
    assert fails[0].startswith("FAIL n2: its doctor output: ") and says in fails[0]


# -- a fleet that cannot agree wrongly (issue 34: F1-F3, F5-F7, L2) --------------------------
def doctor_variant(doctor_json: Path, tmp: Path, change: Callable[[dict], None]) -> Path:  # type: ignore[type-arg]
    """A copy of the real doctor result with `change` applied to its `result`."""
    doc = json.loads(doctor_json.read_text())
    change(doc["result"])
    path = tmp / f"doctor-{len(list(tmp.glob('doctor-*')))}.json"
    path.write_text(json.dumps(doc))
    return path


def fails_of(r: Any) -> list[str]:
    return [ln for ln in r.out.splitlines() if ln.startswith("FAIL ")]


def test_a_doctor_result_that_says_ok_over_a_failed_check_fails(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F1: each check counts, never the `ok` flag alone; an `ok` that contradicts its checks
    is named as not the doctor's own result."""

    def failed_driver(result: dict) -> None:  # type: ignore[type-arg]
        result["ok"] = True
        result["checks"].append({"id": "driver", "status": "fail"})

    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    record(results, "n2", doctor_variant(doctor_json, tmp_path, failed_driver))
    run_file(results, "7-aa", "n[1-2]", bundle="b" * 64)
    r = run(["fleet", "report", str(results)], capsys)
    assert r.code == 1, r.out
    assert fails_of(r) == [
        "FAIL n2: the doctor found failures: driver",
        "FAIL n2: the doctor result says ok over the failed check(s) driver: not the doctor's "
        "own result",
    ]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r.update(checks=[]), "the doctor result holds no checks"),
        (
            lambda r: r["checks"].append({"id": "gpus", "status": "FAILED"}),
            "doctor check(s) with no known status: gpus ('FAILED')",
        ),
        (lambda r: r.update(ok=False), "the doctor result says not ok and names no failure"),
        (
            lambda r: r["host"].pop("fingerprint"),
            "no live environment fingerprint: the doctor found no installed environment",
        ),
        (
            lambda r: r["host"].update(fingerprint="e" * 64),
            f"its live fingerprint {'e' * 12} is not the ",
        ),
        (
            lambda r: r["host"].pop("installed_fingerprint"),
            "its install recorded no fingerprint",
        ),
    ],
)
def test_a_node_agrees_only_on_evidence(
    change: Callable[[dict], None],  # type: ignore[type-arg]
    says: str,
    tmp_path: Path,
    doctor_json: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_variant(doctor_json, tmp_path, change))
    run_file(results, "7-aa", "n1", bundle="b" * 64)
    r = run(["fleet", "report", str(results)], capsys)
    assert r.code == 1 and any(says in ln for ln in fails_of(r)), r.out
    assert "agree" not in r.last_line


def test_a_result_with_no_install_record_or_no_doctor_exit_fails(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F2: an install's result must carry its install record and its doctor's exit code."""
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    for name, drop in (("n2", "install"), ("n3", "doctor_rc")):
        path = record(results, name, doctor_json)
        doc = json.loads(path.read_text())
        del doc["result"][drop]
        path.write_text(json.dumps(doc))
    run_file(results, "7-aa", "n[1-3]", bundle="b" * 64)
    r = run(["fleet", "report", str(results)], capsys)
    assert r.code == 1 and fails_of(r) == [
        "FAIL n2: no install record (result.install.rc): what its install did cannot be told",
        "FAIL n3: no doctor exit code recorded (result.doctor_rc)",
    ], r.out


def test_nodes_with_no_bundle_hash_fail_where_the_run_names_one(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F3: `bundle: null` on every node is not agreement, pinned run or not."""
    results = tmp_path / "results"
    for name in ("n1", "n2"):
        path = record(results, name, doctor_json)
        doc = json.loads(path.read_text())
        doc["result"]["bundle"] = None
        path.write_text(json.dumps(doc))
    for pin in ("b" * 64, None):
        run_file(results, "7-aa", "n[1-2]", bundle=pin)
        r = run(["fleet", "report", str(results)], capsys)
        assert r.code == 1 and fails_of(r) == [
            f"FAIL {n}: no bundle hash recorded (the install left no SHA256SUMS to hash)"
            for n in ("n1", "n2")
        ], r.out


def test_a_lone_node_with_no_run_record_does_not_agree(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F6: without .run.json or --expect a node that never reported cannot be seen."""
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    r = run(["fleet", "report", str(results)], capsys)
    assert r.code == 1 and fails_of(r) == [
        "FAIL which nodes this run had is unknown (no .run.json and no --expect): a node that "
        "never reported cannot be seen"
    ], r.out
    given = run(["fleet", "report", str(results), "--expect", "n1"], capsys)
    assert given.code == 0 and given.last_line == "fleet: 1 node(s) agree", given.out


@pytest.mark.parametrize("rc", [*sorted(set(EXIT_CODES) - {0}), 127, 137])
def test_every_install_exit_code_reads_in_the_server_programs_words(
    rc: int, tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F7: one table of exit codes (airgap/errors.py's); 5 is installed but not ready, past 128
    a signal, never a bare 'failed'."""
    results = tmp_path / "results"
    record(results, "n1", doctor_json, rc=rc)
    run_file(results, "7-aa", "n1", bundle="b" * 64)
    r = run(["fleet", "report", str(results)], capsys)
    (line,) = fails_of(r)
    words = {
        5: "installed, not ready to train: exit 5 (installed as bundled, but not ready to train)",
        137: "install failed: exit 137 (killed by SIGKILL)",
        143: "install failed: exit 143 (terminated by SIGTERM (a scheduler's time limit, "
        "`timeout`))",
        127: "install failed: exit 127 (not one of install.sh's exit codes: read its log)",
    }
    want = words.get(rc, f"install failed: exit {rc} ({EXIT_CODES.get(rc, '').split(': ')[0]})")
    assert r.code == 1 and line == f"FAIL n1: {want}", line
    assert exit_words(rc) in line


def test_expect_a_count_is_refused_in_one_line(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """L2: `--expect 2` is a count, not a node named 2."""
    results = tmp_path / "results"
    record(results, "n1", doctor_json)
    r = run(["fleet", "report", str(results), "--expect", "2"], capsys)
    assert r.code == 2 and len(r.err.splitlines()) == 1, r.err
    assert "--expect 2: a count, not node names" in r.err


def same_size_edit(site: Path) -> None:
    """ray/__init__.py rewritten with one digit changed, as `sed -i` or an editor saves it (a
    new file renamed over the old), its time set back to the original's (`touch -r`)."""
    target = site / "ray" / "__init__.py"
    st = target.stat()
    edited = target.read_text().replace("2.40.0", "2.40.9")
    tmp = target.with_name(".edit")
    tmp.write_text(edited)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    tmp.replace(target)
    assert target.stat().st_size == st.st_size


def test_a_same_size_edit_is_seen_without_deep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F5: the cheap doctor hashes the distributions whose files' stat digest changed since the
    install recorded it: n2's same-size edit is named on n2 only; n1 hashed nothing."""
    node(tmp_path, "n1")
    node(tmp_path, "n2", change=same_size_edit)
    code, result = report(tmp_path / "gathered", capsys)
    assert code == 1
    problems = {(p["node"], p["what"]) for p in result["problems"]}
    assert problems == {
        (
            "n2",
            "changed since its install: ray: 2.40.0 "
            + result["nodes"][1]["host"]["distributions"]["ray"].split()[1]
            + " (1 file(s) not as recorded: ray/__init__.py differs from its RECORD)",
        )
    }, problems
    assert [d["fact"] for d in result["drift"]] == ["fingerprint"]


def test_only_distributions_whose_files_changed_are_hashed(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    site = environment(prefix)
    fingerprint.write(str(prefix))
    since = fingerprint.read_stats(str(prefix))
    assert since is not None and len(since) == 2
    same = fingerprint.examine(str(prefix), since=since)
    assert same.hashed == () and same.fingerprint == fingerprint.read(str(prefix))
    init = site / "pylatexenc" / "__init__.py"
    os.utime(init, (1, 1))  # touched, not changed: hashed, and as recorded
    touched = fingerprint.examine(str(prefix), since=since)
    assert touched.hashed == ("pylatexenc",) and touched.fingerprint == same.fingerprint
    same_size_edit(site)
    edited = fingerprint.examine(str(prefix), since=since)
    assert set(edited.hashed) == {"pylatexenc", "ray"}
    assert edited.damaged() == ["ray: ray/__init__.py differs from its RECORD"]
    assert fingerprint.examine(str(prefix)).damaged() == []  # sizes only, without the record


# -- the variables that change a run (issue 37) ------------------------------------------------
@pytest.mark.parametrize(
    ("var", "why"),
    [
        ("VLLM_ATTENTION_BACKEND", "vLLM reads it at start-up"),
        ("VLLM_USE_V1", "vLLM reads it at start-up"),
        ("PYTORCH_CUDA_ALLOC_CONF", "the CUDA caching allocator's settings"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "torch's NCCL process-group settings"),
        ("WANDB_MODE", "wandb is online"),
        ("OMP_NUM_THREADS", "CPU threads per process"),
        ("NVIDIA_VISIBLE_DEVICES", "which GPUs the container runtime gives a node"),
        ("RAY_DEDUP_LOGS", "Ray reads its settings from the environment"),
    ],
)
def test_each_variable_that_changes_a_run_is_compared_with_why(
    var: str, why: str, tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    record(results, "n1", doctor_json, env={var: "1"})
    record(results, "n2", doctor_json, env={var: "2"})
    run_file(results, "7-aa", "n[1-2]", bundle="b" * 64)
    r = run(["fleet", "report", str(results), "--json"], capsys)
    (drift,) = json.loads(r.out)["result"]["drift"]
    assert r.code == 1 and drift["fact"] == f"env:{var}" and why in drift["why"], drift


def test_a_secret_is_compared_by_its_hash_and_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """HF_TOKEN and RAY_AUTH_TOKEN differ: drift, shown as hashes; the value is in no output."""
    node(tmp_path, "n1", HF_TOKEN="hf_secret_one", RAY_AUTH_TOKEN="a" * 64)  # noqa: S106
    node(tmp_path, "n2", HF_TOKEN="hf_secret_two", RAY_AUTH_TOKEN="a" * 64)  # noqa: S106
    gathered = tmp_path / "gathered"
    assert "hf_secret" not in "".join(p.read_text() for p in gathered.iterdir())
    code, result = report(gathered, capsys)
    assert code == 1 and [d["fact"] for d in result["drift"]] == ["env:HF_TOKEN"]
    assert all(v["value"].startswith("sha256:") for v in result["drift"][0]["values"])
    text = run(["fleet", "report", str(gathered), "--doctor-only"], capsys)
    assert "hf_secret" not in text.out + text.err and "a" * 64 not in text.out


def test_the_doctor_names_a_ray_token_left_in_the_home(tmp_path: Path) -> None:
    """Issue 37: the doctor warns of ~/.ray/auth_token (a head turns token mode on from it)."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("f" * 64)
    doc = json.loads(node(tmp_path, "n1", HOME=str(home)).read_text())
    (token,) = [c for c in doc["result"]["checks"] if c["id"] == "ray-token"]
    assert token["status"] == "warn" and "left by an earlier ray.init()" in token["summary"]
    clean = json.loads(node(tmp_path, "n2", HOME=str(tmp_path / "none")).read_text())
    assert {c["id"]: c["status"] for c in clean["result"]["checks"]}["ray-token"] == "ok"


def test_nodes_on_a_read_only_image_agree_on_the_images_install_record(
    tmp_path: Path, doctor_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: a node mounting the image an install made once carries that install's record
    in its doctor result (installed_fingerprint): read without --doctor-only, and said."""

    def on_image(result: dict) -> None:  # type: ignore[type-arg]
        result["host"]["image"] = "squashfs image (fuse.squashfuse, read-only)"

    results = tmp_path / "results"
    results.mkdir()
    image = doctor_variant(doctor_json, tmp_path, on_image)
    for name in ("n1", "n2"):
        shutil.copy(image, results / f"{name}.json")
    r = run(["fleet", "report", str(results), "--expect", "n1,n2"], capsys)
    assert r.code == 0 and r.last_line == (
        "fleet: 2 node(s) agree (2 on a read-only image: installed once, its install record "
        "checked on each)"
    ), r.out + r.err
    doc = json.loads(image.read_text())
    del doc["result"]["host"]["installed_fingerprint"]
    (results / "n2.json").write_text(json.dumps(doc))
    r = run(["fleet", "report", str(results), "--expect", "n1,n2"], capsys)
    assert r.code == 1 and "FAIL n2: its image holds no fingerprint" in r.out
