"""`verl-bundle ansible install` writes a playbook that ansible-core (a test extra) runs against
two inventory hosts with the local connection, each installing into its own prefix: a rebuilt
bundle under the same name is installed again, a second run changes nothing, each host's result
is gathered on the controller for the fleet report, and no value from outside is ever a
template or shell text. The work directory is checked the way the playbook's own script does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # ansible-core brings PyYAML, without stubs
from conftest import clean_environ
from support.airgap import extract, python310
from support.bundlefix import replace_wheel
from support.cli import run
from support.fakebundle import bundle_id, fake_bundle, fingerprint_of

HOSTS = ("node-a", "node-b")
LOOKUP = "{{ lookup('pipe', 'touch PWNED') }}"


@pytest.fixture(scope="session")
def ansible_core() -> str:
    """The real ansible-playbook (the engine these tests run; marks them `engine`)."""
    found = shutil.which("ansible-playbook") or str(
        Path(sys.executable).parent / "ansible-playbook"
    )
    if not os.access(found, os.X_OK):
        pytest.skip("ansible-core is not installed (pip install -e '.[test]')")
    return found


def inventory(tmp: Path, python: str | None = None, hosts: tuple[str, ...] = HOSTS) -> Path:
    lines = ["[nodes]"]
    for host in hosts:
        extra = f" verl_python={python}" if python else ""
        lines.append(
            f"{host} ansible_connection=local ansible_python_interpreter={sys.executable} "
            f"verl_prefix={tmp / ('prefix-' + host)} verl_work={tmp / ('work-' + host)}{extra}"
        )
    path = tmp / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def playbook(tmp: Path, tarball: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Path:
    out = tmp / "install.yml"
    r = run(
        [
            *("ansible", "install", str(tarball), "--hosts", "nodes"),
            *("--gather", str(tmp / "results"), "-o", str(out), *extra),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    assert r.last_line == f"ansible-playbook -i INVENTORY {out}"
    return out


def ansible(
    playbook: str, tmp: Path, *args: str, cwd: Path | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """`playbook ARGS` (ansible-playbook) with its temporary and home directories in `tmp`."""
    env = {
        **clean_environ(tmp),
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
        # The hosts' module files too (else ~/.ansible/tmp: outside the test's directory).
        "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-remote-tmp"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        **extra,
    }
    return subprocess.run(
        [playbook, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
        cwd=cwd or tmp,
    )


def recap(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, int]]:
    """The PLAY RECAP's counts per host."""
    counts = {}
    for m in re.finditer(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", done.stdout, re.M):
        counts[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return counts


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """Reads the playbook as Ansible does, its `!unsafe` values as plain text."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def play_vars(path: Path) -> dict[str, Any]:
    plays = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - SafeLoader, one tag more
    found: dict[str, Any] = plays[1]["vars"]
    return found


def test_the_playbook_passes_ansibles_syntax_check(
    ansible_core: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = fake_bundle(tmp_path)
    out = playbook(tmp_path, tarball, capsys, "--serial", "25%")
    text = out.read_text()
    assert 'hosts: !unsafe "nodes"' in text and 'verl_mode: !unsafe "copy"' in text
    assert 'serial: !unsafe "25%"' in text and out.stat().st_mode & 0o777 == 0o644
    check = ansible(
        ansible_core, tmp_path, "-i", str(inventory(tmp_path)), "--syntax-check", str(out)
    )
    assert check.returncode == 0, check.stdout + check.stderr
    url = playbook(tmp_path, tarball, capsys, "--url", "http://head/b.tar")
    digest = __import__("hashlib").sha256(tarball.read_bytes()).hexdigest()
    assert f'verl_sha256: !unsafe "{digest}"' in url.read_text()
    served = run(
        [
            *("ansible", "install", "--from-url", "http://head/b/", "--bundle-sha256", digest),
            *("--hosts", "nodes", "-o", str(tmp_path / "s.yml")),
        ],
        capsys,
    )
    assert served.code == 0 and f'verl_pin: !unsafe "{digest}"' in (tmp_path / "s.yml").read_text()
    check = ansible(
        ansible_core,
        tmp_path,
        "-i",
        str(inventory(tmp_path)),
        "--syntax-check",
        str(tmp_path / "s.yml"),
    )
    assert check.returncode == 0, check.stdout + check.stderr
    for args, says in [
        (["nope.tar"], "no such tarball"),
        ([str(tarball), "--hosts", "{{ x }}"], "not an inventory pattern"),
        ([str(tarball), "--serial", "all"], "give a host count (64) or a percentage"),
        ([str(tarball), "--url", "http://head/\n"], "holds spaces or control characters"),
        ([str(tarball), "--prefix", "/opt/a\nb"], "control character"),
        ([str(tarball), "--bundle-sha256", "a" * 64], "pins a served bundle"),
        (["--from-url", "http://head/b/", "--bundle-sha256", "{{ x }}"], "64 hex digits"),
    ]:
        bad = run(["ansible", "install", *args, "-o", str(tmp_path / "x.yml")], capsys)
        assert bad.code == 2 and says in bad.err and len(bad.err.splitlines()) == 1, bad.err


def workdir(script: str, base: Path | str, key: str = "a" * 64) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script, "sh", str(base), key], capture_output=True, text=True, check=False
    )


def test_the_work_directory_is_ours_0700_with_no_symlink_on_the_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = play_vars(playbook(tmp_path, fake_bundle(tmp_path), capsys))["verl_workdir_sh"]
    base = tmp_path / "cache" / "verl-bundle"
    made = workdir(script, base)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == ["created", f"{base}/{'a' * 64}", str(base)]
    assert (base / ("a" * 64)).stat().st_mode & 0o777 == 0o700
    assert workdir(script, base).stdout.splitlines()[0] == "exists"
    (base / ("b" * 64)).mkdir(mode=0o700)
    os.chown(base / ("b" * 64), 12345, 12345)  # another user made it first
    theirs = workdir(script, base, "b" * 64)
    assert theirs.returncode == 2 and "is not ours with mode 0700: remove it" in theirs.stderr
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "cache")
    linked = workdir(script, link / "verl-bundle")
    assert linked.returncode == 2 and f"{link} is a symlink" in linked.stderr
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)  # writable by others, not sticky: they could swap what is inside
    swapped = workdir(script, loose / "verl-bundle")
    assert swapped.returncode == 2 and f"{loose} is writable by others" in swapped.stderr
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: ours inside it is fine, someone else's is not
    assert workdir(script, sticky / "ours").returncode == 0
    (sticky / "theirs").mkdir()
    os.chown(sticky / "theirs", 12345, 12345)
    taken = workdir(script, sticky / "theirs")
    assert taken.returncode == 2 and "belongs to uid 12345" in taken.stderr
    for key in ("", "../../etc", "A" * 64):
        bad = workdir(script, base, key)
        assert bad.returncode == 2 and "no bundle sha256" in bad.stderr
    assert workdir(script, "relative/dir").returncode == 2


@pytest.mark.slow
def test_hostile_values_travel_as_data_and_a_taken_work_directory_stops_the_host(
    ansible_core: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tarball's directory, the gather directory and the prefix hold an Ansible lookup: the
    playbook runs, nothing is touched, each value is used as the name it is."""
    odd = tmp_path / f"t{LOOKUP}"
    tarball = fake_bundle(odd)
    gather = tmp_path / f"results{LOOKUP}"
    prefix = tmp_path / f"prefix{LOOKUP}"
    out = tmp_path / "install.yml"
    r = run(
        [
            *("ansible", "install", str(tarball), "--hosts", "nodes", "--gather", str(gather)),
            *("--prefix", str(prefix), "-o", str(out)),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(
        "[nodes]\n"
        f"node-a ansible_connection=local ansible_python_interpreter={sys.executable} "
        f"verl_work={tmp_path / 'work-a'}\n"
    )
    done = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    assert (prefix / ".verl-bundle" / "fingerprint").read_text() == fingerprint_of("v1") + "\n"
    assert json.loads((gather / "node-a.json").read_text())["result"]["install"]["rc"] == 0
    assert "fleet: 1 node(s) agree" in done.stdout  # the play's own report, on the controller
    # A result the play did not write (another run's host): the report fails the play.
    doc = json.loads((gather / "node-a.json").read_text())
    doc["result"].update(node="node-z", run="1-old")
    (gather / "node-z.json").write_text(json.dumps(doc))
    failed = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert failed.returncode != 0 and recap(failed)["localhost"]["failed"] == 1
    assert "FAIL node-z: not one of the expected nodes (a result of run 1-old)" in failed.stdout
    assert recap(failed)["node-a"]["changed"] == 0  # installed already: only checked
    (gather / "node-z.json").unlink()
    # Another user's directory where the copy would go: the host stops, nothing runs from it.
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 12345, 12345)
    hosts.write_text(hosts.read_text().replace(str(tmp_path / "work-a"), str(theirs)))
    stopped = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert stopped.returncode != 0
    assert f"verl-bundle: {theirs} belongs to uid 12345, not to this user" in stopped.stdout
    assert recap(stopped)["node-a"]["rescued"] == 1 and recap(stopped)["localhost"]["failed"] == 1
    assert "FAIL node-a: install failed: exit 1 (a step failed): Make the work directory" in (
        stopped.stdout
    ), stopped.stdout[-3000:]


@pytest.mark.slow
def test_the_play_ends_with_the_report_and_a_host_checks_the_bundle_first(
    ansible_core: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34 F3, F4, F8 on the real ansible-playbook: the run's record names the bundle the
    playbook was written for; a result the report cannot read fails the play, and so does a
    controller with no verl-bundle to compare the hosts; another bundle under the tarball's
    name is refused by every host before anything of it runs."""
    tarball = fake_bundle(tmp_path / "b", "v1")
    out = playbook(tmp_path, tarball, capsys)
    hosts = inventory(tmp_path)
    results = tmp_path / "results"
    token = "hf_secret"  # noqa: S105 - a test value
    first = ansible(
        ansible_core, tmp_path, "-i", str(hosts), str(out), VLLM_USE_V1="1", HF_TOKEN=token
    )
    assert first.returncode == 0, first.stdout[-3000:]
    assert "fleet: 2 node(s) agree" in first.stdout
    # The variables that change a run, from the doctor's list; a secret as its hash only.
    env = json.loads((results / "node-a.json").read_text())["result"]["env"]
    assert env["VLLM_USE_V1"] == "1" and env["HF_TOKEN"].startswith("sha256:"), env
    assert "hf_secret" not in "".join(p.read_text() for p in results.glob("*.json"))
    run_record = json.loads((results / ".run.json").read_text())["result"]
    assert run_record["bundle"] == bundle_id(tarball)
    (results / "notes.json").write_text("not json\n")
    unreadable = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert unreadable.returncode != 0 and recap(unreadable)["localhost"]["failed"] == 1
    assert "the fleet report (above) exited 2: error: notes.json: not readable JSON" in (
        unreadable.stdout
    ), unreadable.stdout[-3000:]
    (results / "notes.json").unlink()
    alone = tmp_path / "alone.yml"
    alone.write_text(out.read_text().replace(json.dumps(sys.executable), '"/nonexistent/python3"'))
    uncompared = ansible(ansible_core, tmp_path, "-i", str(hosts), str(alone))
    assert uncompared.returncode != 0 and recap(uncompared)["localhost"]["failed"] == 1
    assert "the hosts were not compared: /nonexistent/python3" in uncompared.stdout
    want = bundle_id(tarball)
    fake_bundle(tmp_path / "b", "v2")  # another bundle under the same name
    got = bundle_id(tarball)
    refused = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert refused.returncode != 0
    said = f"(SHA256SUMS {got}) is not the one this playbook was written for ({want})"
    assert recap(refused)["localhost"]["failed"] == 1  # the report play ran, and failed
    for host in HOSTS:
        assert f"FAILED {host}: verl-bundle: the bundle unpacked here" in refused.stdout
        assert said in refused.stdout
        prefix = tmp_path / f"prefix-{host}"
        assert (prefix / ".verl-bundle" / "fingerprint").read_text() == fingerprint_of("v1") + "\n"
        assert (prefix / ".verl-bundle" / "installed-from").read_text().count("\n") == 1
        record = json.loads((results / f"{host}.json").read_text())["result"]
        assert (record["install"]["rc"], record["doctor_rc"], record["bundle"]) == (3, None, got)


@pytest.mark.slow
def test_a_dead_batch_still_runs_the_report_and_a_changed_host_installs_again(
    ansible_core: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: with --serial 1 and node-a's install failing, its batch ends the play (the
    next batch would fail the same way) and the report play still runs, naming node-a failed
    and node-b missing; the options reach every install.sh; once installed, a host whose live
    environment changed (the fake's installed file edited) is installed again, not skipped on
    its recorded fingerprint."""
    tarball = fake_bundle(tmp_path / "b")
    hosts = inventory(tmp_path)
    (tmp_path / "prefix-node-a.fail").touch()
    out = playbook(tmp_path, tarball, capsys, "--serial", "1", "--quick", "--repair")
    dead = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert dead.returncode != 0 and recap(dead)["localhost"]["failed"] == 1, dead.stdout[-3000:]
    assert "node-b" not in recap(dead)  # its batch never ran
    assert "FAILED node-a: install exit 3" in dead.stdout
    assert "FAIL node-a: install failed: exit 3 (the bundle is damaged)" in dead.stdout
    assert "FAIL node-b: missing: no result from this node" in dead.stdout
    (tmp_path / "prefix-node-a.fail").unlink()
    first = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert first.returncode == 0 and "fleet: 2 node(s) agree" in first.stdout, first.stdout[-3000:]
    for host in HOSTS:
        given = (tmp_path / f"prefix-{host}" / ".verl-bundle" / "install-args").read_text()
        assert given.splitlines()[-1].endswith(" --yes --quick --repair"), given
    again = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert {h: recap(again)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0)
    (tmp_path / "prefix-node-b" / "VERSION").write_text("edited\n")  # its live fingerprint
    changed = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert changed.returncode == 0, changed.stdout[-3000:]
    runs = {
        h: (tmp_path / f"prefix-{h}" / ".verl-bundle" / "install-args").read_text().count("\n")
        for h in HOSTS
    }
    assert runs == {"node-a": 1, "node-b": 2}  # node-a's failed run recorded nothing


def retar(root: Path, tarball: Path) -> Path:
    tarball.unlink(missing_ok=True)
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(root.parent), root.name], check=True)
    return tarball


@pytest.mark.slow
def test_a_rebuilt_bundle_is_installed_and_a_second_run_changes_nothing(
    ansible_core: str,
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tarball = tmp_path / "dist" / built_bundle[0].name
    tarball.parent.mkdir()
    shutil.copy(built_bundle[0], tarball)
    out = playbook(tmp_path, tarball, capsys)
    hosts = inventory(tmp_path, python310())
    first = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    site = "lib/python3.10/site-packages"
    for host in HOSTS:
        assert (tmp_path / f"prefix-{host}" / site / "aioprometheus-1.0.0.dist-info").is_dir()
    # The same name, another bundle: the playbook pinned the first, so no host installs it
    # (issue 34 F8); written again for it, it is copied, unpacked and installed.
    rebuilt = extract(built_bundle[0], tmp_path / "rebuild")
    replace_wheel(rebuilt, "aioprometheus", version="1.0.1")
    retar(rebuilt, tarball)
    refused = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert refused.returncode != 0
    for host in HOSTS:
        prefix = tmp_path / f"prefix-{host}"
        assert [p.name for p in (prefix / site).glob("aioprometheus-*.dist-info")] == [
            "aioprometheus-1.0.0.dist-info"
        ]
        assert "is not the one this playbook was written for" in refused.stdout
        record = json.loads((tmp_path / "results" / f"{host}.json").read_text())["result"]
        assert record["install"]["rc"] == 3 and record["doctor_rc"] is None
    out = playbook(tmp_path, tarball, capsys)
    second = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    for host in HOSTS:
        prefix = tmp_path / f"prefix-{host}"
        assert [p.name for p in (prefix / site).glob("aioprometheus-*.dist-info")] == [
            "aioprometheus-1.0.1.dist-info"
        ]
        assert len(list((tmp_path / f"work-{host}").iterdir())) == 1  # the old copy pruned
        assert recap(second)[host]["changed"] >= 2  # installed, pruned (unpacked when refused)
    logs = {h: (tmp_path / f"prefix-{h}" / ".verl-bundle" / "install.log") for h in HOSTS}
    before = {h: log.stat().st_mtime_ns for h, log in logs.items()}
    third = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out))
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-2000:]
    assert {h: recap(third)[h]["changed"] for h in (*HOSTS, "localhost")} == dict.fromkeys(
        (*HOSTS, "localhost"), 0
    ), third.stdout[-3000:]
    assert {h: log.stat().st_mtime_ns for h, log in logs.items()} == before  # no install ran
    report = run(["fleet", "report", str(tmp_path / "results"), "--json"], capsys)
    result = json.loads(report.out)["result"]
    assert report.code == 0, report.out
    assert result["expected"] == list(HOSTS) and [n["name"] for n in result["nodes"]] == list(HOSTS)


@pytest.mark.slow
def test_a_package_removed_on_a_host_is_installed_again_and_repaired(
    ansible_core: str,
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 37: installed on both hosts (--quick); pylatexenc removed on node-b afterwards. The
    installed marker compares the live fingerprint, so a plain rerun installs there again and
    fails naming --repair (before, it only ran the doctor, identical every time); the playbook
    written with --repair reinstalls it on node-b alone and the report agrees."""
    from support.airgap import netns_prefix

    hosts = inventory(tmp_path, python310())
    out = playbook(tmp_path, built_bundle[0], capsys, "--quick")
    first = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out), "-f", "2")
    assert first.returncode == 0, first.stdout[-3000:]
    b = tmp_path / "prefix-node-b"
    pip = [*netns_prefix(), str(b / "bin" / "python"), "-m", "pip", "uninstall", "-y"]
    gone = subprocess.run([*pip, "pylatexenc"], capture_output=True, text=True, check=False)
    assert gone.returncode == 0, gone.stderr
    plain = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out), "-f", "2")
    assert plain.returncode != 0 and "--repair" in plain.stdout, plain.stdout[-3000:]
    assert "FAILED node-b: install exit 1" in plain.stdout and "FAILED node-a" not in plain.stdout
    out = playbook(tmp_path, built_bundle[0], capsys, "--quick", "--repair")
    repaired = ansible(ansible_core, tmp_path, "-i", str(hosts), str(out), "-f", "2")
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert list((b / "lib").glob("python3*/site-packages/pylatexenc-*.dist-info"))
    assert "fleet: 2 node(s) agree" in repaired.stdout
    assert (recap(repaired)["node-a"]["changed"], recap(repaired)["node-b"]["changed"]) == (0, 1)


@pytest.mark.slow
def test_two_hosts_install_from_one_served_copy_with_no_other_network(
    ansible_core: str,
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from support.served import BASE, serving

    out = tmp_path / "install.yml"
    pin = __import__("hashlib").sha256((built_bundle[1] / "SHA256SUMS").read_bytes()).hexdigest()
    r = run(
        [
            *("ansible", "install", "--from-url", f"{BASE}/", "--hosts", "nodes"),
            *("--bundle-sha256", pin),
            *("--gather", str(tmp_path / "results"), "-o", str(out)),
        ],
        capsys,
    )
    assert r.code == 0, r.err
    assert f'verl_from_url: !unsafe "{BASE}"' in out.read_text()
    env = {**clean_environ(tmp_path), "LC_ALL": "C.UTF-8"}
    env["ANSIBLE_LOCAL_TEMP"], env["ANSIBLE_HOME"] = str(tmp_path / "a-tmp"), str(tmp_path / "a")
    env["ANSIBLE_REMOTE_TEMP"] = str(tmp_path / "a-remote-tmp")
    hosts = inventory(tmp_path, python310())
    cmd = f"{ansible_core} -i {hosts} {out}"
    done = serving(built_bundle[1], cmd, env, tmp_path, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for host in HOSTS:
        assert (tmp_path / f"prefix-{host}" / "bin" / "python").exists()
        (work,) = (tmp_path / f"work-{host}").iterdir()
        assert (work / "bundle" / "SHA256SUMS").is_file() and len(work.name) == 64
        assert (work / "SHA256SUMS.pinned").read_bytes() == (
            work / "bundle" / "SHA256SUMS"
        ).read_bytes()
        record = json.loads((tmp_path / "results" / f"{host}.json").read_text())["result"]
        assert (
            record["install"]["rc"] == 0
            and json.loads(record["doctor_output"])["result"]["host"]["fingerprint"]
        )
    report = run(["fleet", "report", str(tmp_path / "results")], capsys)
    assert report.code == 0 and report.last_line == "fleet: 2 node(s) agree", report.out
