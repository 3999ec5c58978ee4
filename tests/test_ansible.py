"""`verl-bundle ansible install` writes a playbook that ansible-core (a test extra) runs against
three inventory hosts with the local connection, each installing into its own prefix; each
host's doctor JSON is gathered on the controller for the fleet report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from airgap import python310
from cli import run
from conftest import clean_environ

HOSTS = ("node-a", "node-b", "node-c")


def ansible_playbook() -> str:
    found = shutil.which("ansible-playbook") or str(
        Path(sys.executable).parent / "ansible-playbook"
    )
    if not os.access(found, os.X_OK):
        pytest.skip("ansible-core is not installed (pip install -e '.[test]')")
    return found


def inventory(tmp: Path, python: str | None = None) -> Path:
    lines = ["[nodes]"]
    for host in HOSTS:
        extra = f" verl_python={python}" if python else ""
        lines.append(
            f"{host} ansible_connection=local ansible_python_interpreter={sys.executable} "
            f"verl_prefix={tmp / ('prefix-' + host)} verl_work={tmp / ('work-' + host)}{extra}"
        )
    path = tmp / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def playbook(tmp: Path, tarball: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp / "install.yml"
    r = run(
        [
            *("ansible", "install", str(tarball), "--hosts", "nodes"),
            *("--gather", str(tmp / "results"), "-o", str(out)),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    assert r.last_line == f"ansible-playbook -i INVENTORY {out}"
    return out


def ansible(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **clean_environ(tmp),
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
    }
    env["ANSIBLE_HOME"] = str(tmp / "ansible-home")
    return subprocess.run(
        [ansible_playbook(), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
    )


def test_the_playbook_passes_ansibles_syntax_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "verl-bundle-x").mkdir()
    tarball = tmp_path / "b.tar"
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(tmp_path), "verl-bundle-x"], check=True)
    out = playbook(tmp_path, tarball, capsys)
    text = out.read_text()
    assert 'verl_bundle_name: "verl-bundle-x"' in text and 'hosts: "nodes"' in text
    check = ansible(tmp_path, "-i", str(inventory(tmp_path)), "--syntax-check", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    missing = run(["ansible", "install", str(tmp_path / "nope.tar")], capsys)
    assert missing.code == 2 and "no such tarball" in missing.err


@pytest.mark.slow
def test_three_hosts_install_into_their_own_prefixes_and_gather(
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = playbook(tmp_path, built_bundle[0], capsys)
    done = ansible(tmp_path, "-i", str(inventory(tmp_path, python310())), str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for host in HOSTS:
        assert (tmp_path / f"prefix-{host}" / "bin" / "python").exists()
        doc = json.loads((tmp_path / "results" / f"{host}.json").read_text())
        assert doc["command"] == "doctor" and doc["result"]["host"]["fingerprint"]
    report = run(["fleet", "report", str(tmp_path / "results"), "--json"], capsys)
    result = json.loads(report.out)["result"]
    assert [n["file"] for n in result["nodes"]] == [f"{h}.json" for h in HOSTS]
    assert not [d for d in result["drift"] if d["fact"] == "fingerprint"]


@pytest.mark.slow
def test_three_hosts_install_from_one_served_copy_with_no_other_network(
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from served import BASE, serving

    out = tmp_path / "install.yml"
    r = run(
        [
            *("ansible", "install", "--from-url", f"{BASE}/", "--hosts", "nodes"),
            *("--gather", str(tmp_path / "results"), "-o", str(out)),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    assert f'verl_bundle_from_url: "{BASE}"' in out.read_text()
    env = {**clean_environ(tmp_path), "LC_ALL": "C.UTF-8"}
    env["ANSIBLE_LOCAL_TEMP"], env["ANSIBLE_HOME"] = str(tmp_path / "a-tmp"), str(tmp_path / "a")
    hosts = inventory(tmp_path, python310())
    cmd = f"{ansible_playbook()} -i {hosts} {out}"
    done = serving(built_bundle[1], cmd, env, tmp_path, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for host in HOSTS:
        assert (tmp_path / f"prefix-{host}" / "bin" / "python").exists()
        assert (tmp_path / f"work-{host}" / "bundle" / "SHA256SUMS").is_file()
        doc = json.loads((tmp_path / "results" / f"{host}.json").read_text())
        assert doc["command"] == "doctor" and doc["result"]["host"]["fingerprint"]
    report = run(["fleet", "report", str(tmp_path / "results"), "--json"], capsys)
    assert not [d for d in json.loads(report.out)["result"]["drift"] if d["fact"] == "fingerprint"]
