"""Placing assets on the server under hostile conditions (issue 22 #4 and #5): two nodes with
one pid sharing --assets-dir, a placement killed half-way, a bundle member replaced by a
symbolic link, a Hub file with the installer's record's name. Each runs the real
./install-assets.sh with no network, against an asset bundle fetched from the fake Hub."""

from __future__ import annotations

import fcntl
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.airgap import extract, netns_prefix
from support.assets import PY38, TOKEN, assets, install, one_line
from support.fakehub import FakeHub, Repo, tiny_model

from verl_bundle.airgap.assets.place import load_record
from verl_bundle.airgap.assets.ready import check_placed


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    """A fake Hub whose model also has a file named like the installer's old record."""
    with FakeHub(TOKEN) as fake:
        files = {**tiny_model(), ".verl-asset.json": b'{"from": "the Hub"}\n'}
        fake.add(Repo("model", "tiny/model", files))
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home-host"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield fake


@pytest.fixture
def carried(hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    code, out, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 0, err
    return extract(Path(out.strip().splitlines()[-1]), tmp_path / "carried")


@pytest.fixture
def plain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    """An asset bundle of the tiny model alone (no file named like the record)."""
    with FakeHub(TOKEN) as fake:
        fake.add(Repo("model", "tiny/plain", tiny_model(weights=1 << 20)))
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home-plain"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        code, out, err = assets(tmp_path, capsys, "--model", "tiny/plain")
    assert code == 0, err
    return extract(Path(out.strip().splitlines()[-1]), tmp_path / "plain")


def placed_dir(prefix_or_dir: Path) -> Path:
    (final,) = [p for p in prefix_or_dir.rglob("*") if p.is_dir() and len(p.name) == 40]
    return final


def test_a_hub_file_named_like_the_record_is_placed_and_stays_intact(
    carried: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "prefix"
    assert (carried / "models/tiny--model/.verl-asset.json").is_file()
    for _ in range(2):
        proc = install(carried, prefix)
        assert proc.returncode in (0, 5), proc.stderr  # 5: no venv here to load it with
    final = placed_dir(prefix / "assets")
    assert (final / ".verl-asset.json").read_bytes() == b'{"from": "the Hub"}\n'
    assert "already in place: model tiny/model" in proc.stdout
    assert check_placed(str(final), load_record(str(final))) == []


def test_a_member_that_is_a_symbolic_link_is_never_followed(carried: Path, tmp_path: Path) -> None:
    weights = carried / "models/tiny--model/model.safetensors"
    weights.unlink()
    weights.symlink_to("/dev/zero")  # copied until the disk fills, if followed
    proc = install(carried, tmp_path / "prefix", limit=64 << 20)
    assert proc.returncode == 3
    assert one_line(proc.stderr).endswith(
        "models/tiny--model/model.safetensors: not a regular file (a symbolic link, a device "
        "or a directory): the bundle is damaged; extract the asset tarball again"
    )
    assert list((tmp_path / "prefix/assets/models/tiny--model").iterdir()) == []


def test_what_a_killed_placement_left_goes_and_a_live_one_stays(
    carried: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    proc = install(carried, tmp_path / "first", "--assets-dir", str(shared))
    assert proc.returncode in (0, 5), proc.stderr
    final = placed_dir(shared)
    parent, commit = final.parent, final.name
    # A node killed half-way (its lock file no longer held), an older installer's partial,
    # and a node still placing (its lock held, here by this test).
    dead = parent / f".{commit}.partial-node7-0123456789abcdef"
    old = parent / f".{commit}.partial-1"
    live = parent / f".{commit}.partial-node8-fedcba9876543210"
    for d in (dead, old, live):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"\0" * 4096)
    (parent / f"{dead.name}.lock").touch()
    with open(parent / f"{live.name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (final / "model.safetensors").write_bytes(b"damaged")  # so the next run places again
        proc = install(carried, tmp_path / "second", "--assets-dir", str(shared))
        assert proc.returncode in (0, 5), proc.stderr
        left = sorted(p.name for p in parent.iterdir())
    assert left == sorted([commit, f".{commit}.verl-asset.json", live.name, f"{live.name}.lock"])
    assert check_placed(str(final), load_record(str(final))) == []


def test_two_nodes_with_the_same_pid_place_into_one_shared_directory(
    plain: Path, tmp_path: Path
) -> None:
    """Each node in a pid namespace of its own, where both are pid 1 (containers)."""
    if not PY38.exists():
        pytest.skip("no Python 3.8 (pyenv install 3.8.18)")
    probe = subprocess.run(["unshare", "-p", "-f", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the kernel refuses a pid namespace here")
    env = {"PATH": "/usr/bin:/bin", "VERL_BUNDLE_PYTHON": str(PY38), "HOME": str(tmp_path)}
    for attempt in range(8):  # the collision is a race: several rounds make it show
        shared = tmp_path / f"shared{attempt}"
        nodes = [
            subprocess.Popen(
                [
                    *netns_prefix(),
                    *("unshare", "-p", "-f"),
                    *(str(plain / "install-assets.sh"), "--json"),
                    *("--prefix", str(tmp_path / f"node{attempt}-{i}")),
                    *("--assets-dir", str(shared)),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(2)
        ]
        results = [n.communicate(timeout=300) for n in nodes]
        for node, (out, err) in zip(nodes, results, strict=True):
            assert node.returncode in (0, 5), err
            assert "Traceback" not in err
            doc = json.loads(out)
            intact = [c for c in doc["result"]["checks"] if c["status"] == "fail"]
            assert intact == [], intact
        final = placed_dir(shared)
        assert check_placed(str(final), load_record(str(final))) == []
        assert [p.name for p in final.parent.iterdir() if "partial" in p.name] == []
