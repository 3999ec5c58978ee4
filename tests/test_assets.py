"""verl-bundle assets: the real huggingface_hub client against a fake Hub on 127.0.0.1, the asset
bundle installed under `unshare -n`, transformers loading the placed model offline."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import site_packages
from support.airgap import extract, netns_prefix
from support.assets import PY38, TOKEN, assets, install, limit_file_size, one_line
from support.fakehub import GSM8K_TEST, GSM8K_TRAIN, FakeHub, Repo, tiny_gsm8k, tiny_model

ROOT = Path(__file__).resolve().parents[1]


def final_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_fetch_convert_bundle_and_install_offline(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = assets(
        tmp_path, capsys, "--model", "tiny/model", "--dataset", "tiny/gsm8k@main"
    )
    assert code == 0, err
    tarball = Path(out.strip().splitlines()[-1])
    assert tarball.name.startswith("verl-assets-model_gsm8k-") and tarball.suffix == ".tar"
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert (tarball.parent / f"{tarball.name}.sha256").read_text() == f"{digest}  {tarball.name}\n"
    with tarfile.open(tarball) as tf:
        names = {m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile()}
    model = hub.repos[("model", "tiny/model")]
    assert "models/tiny--model/model.safetensors" in names
    assert "models/tiny--model/pytorch_model.bin" not in names  # duplicate format skipped
    assert {"datasets/tiny--gsm8k/train.parquet", "datasets/tiny--gsm8k/test.parquet"} <= names
    root = extract(tarball, tmp_path / "carried")
    lines = (root / "SHA256SUMS").read_text().splitlines()
    sums = {name: value for value, name in (line.split("  ", 1) for line in lines)}
    assert set(sums) == names - {"SHA256SUMS"}  # every file, each with its hash
    for name, value in sums.items():
        assert hashlib.sha256((root / name).read_bytes()).hexdigest() == value, name
    manifest = json.loads((root / "manifest.json").read_text())
    pinned = {a["repo_id"]: (a["revision"], a["commit"]) for a in manifest["assets"]}
    assert pinned["tiny/model"] == ("main", model.commit)
    by_name = {f["source"]: f for f in manifest["assets"][0]["files"]}
    assert by_name["model.safetensors"]["sha256"] == model.etag("model.safetensors")

    prefix = tmp_path / "prefix"
    venv_with_transformers(prefix)
    proc = install(root, prefix, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["command"] == "assets install" and doc["ok"] is True
    checks = {(c["id"], c["status"]) for c in doc["result"]["checks"]}
    assert ("model.load", "ok") in checks and ("dataset.columns", "ok") in checks
    placed = {p["kind"]: Path(p["path"]) for p in doc["result"]["placed"]}
    assert placed["model"] == prefix / "assets/models/tiny--model" / model.commit
    overrides = doc["result"]["overrides"]
    assert f"actor_rollout_ref.model.path={placed['model']}" in overrides
    assert f"critic.model.path={placed['model']}" in overrides
    assert f"data.train_files={placed['dataset'] / 'train.parquet'}" in overrides
    assert f"data.val_files={placed['dataset'] / 'test.parquet'}" in overrides

    env_file = (prefix / "verl-env.sh").read_text()
    for line in ("HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "HF_DATASETS_OFFLINE=1"):
        assert f"export {line}\n" in env_file
    assert f"export HF_HOME={prefix / 'hf-home'}\n" in env_file
    # Activation sets the offline variables (before python starts, as Hugging Face needs).
    shown = subprocess.run(
        ["bash", "-c", f". {prefix}/bin/activate && echo $HF_HUB_OFFLINE:$HF_HOME"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == f"1:{prefix / 'hf-home'}"

    # What the placed data is, read here independently of the installer.
    import pyarrow.parquet as pq

    train = pq.read_table(placed["dataset"] / "train.parquet").to_pylist()
    assert [r["reward_model"] for r in train] == [
        {"style": "rule", "ground_truth": "2"},
        {"style": "rule", "ground_truth": "1000"},
    ]
    assert train[1]["prompt"][0]["content"].startswith(GSM8K_TRAIN[1]["question"] + " Let's think")
    assert train[0]["extra_info"] == {
        "split": "train",
        "index": 0,
        "answer": GSM8K_TRAIN[0]["answer"],
        "question": GSM8K_TRAIN[0]["question"],
    }
    test_rows = pq.read_table(placed["dataset"] / "test.parquet").to_pylist()
    assert [r["extra_info"]["split"] for r in test_rows] == ["test"] * len(GSM8K_TEST)
    assert {r["data_source"] for r in train + test_rows} == {"tiny/gsm8k"}

    # A second install finds the intact copy; a placed file altered afterwards is named.
    again = install(root, prefix)
    assert again.returncode == 0 and "already in place: model tiny/model" in again.stdout
    (placed["model"] / "tokenizer.json").write_text("{}")
    (placed["dataset"] / "test.parquet").unlink()
    check = subprocess.run(
        [
            *netns_prefix(),
            str(PY38),
            "-I",
            "-B",
            "-c",
            BOOT,
            str(root / "lib"),
            "assets",
            "check",
            "--prefix",
            str(prefix),
        ],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 5, check.stdout + check.stderr  # placed, not ready to train
    assert f"{placed['model'] / 'tokenizer.json'}: altered" in check.stdout
    assert f"{placed['dataset'] / 'test.parquet'}: missing" in check.stdout
    assert "NOT READY" in check.stdout


BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from verl_bundle.airgap.__main__ import main; sys.exit(main())"
)


def venv_with_transformers(prefix: Path) -> None:
    """A real venv at the prefix (as the stack installer makes), seeing this test venv's
    packages (transformers, pyarrow) through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    import sysconfig

    purelib = sysconfig.get_paths()["purelib"]
    (site_packages(prefix / "bin/python") / "test-packages.pth").write_text(purelib + "\n")


# -- bad input on the online host ------------------------------------------------------------


def test_unknown_repository(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/nothing")
    assert code == 1
    assert "model tiny/nothing@main" in one_line(err) and "repository not found" in err
    assert final_files(tmp_path / "out") == []


def test_an_unreachable_hub_names_the_mirror_option_and_the_offline_ways(
    hub: FakeHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Running again would fail the same way: the line says --hf-endpoint and what to do
    without a mirror, not "run again"."""
    with socket.socket() as sock:  # a port on 127.0.0.1 that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 1
    line = one_line(err)
    assert f"model tiny/model@main at http://127.0.0.1:{port}: cannot reach the Hub" in line
    assert "--hf-endpoint URL" in line and "HF_HUB_OFFLINE=1" in line
    assert "run again" not in line
    assert final_files(tmp_path / "out") == []


def test_unknown_revision(hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model@v9.9")
    assert code == 1
    assert "revision 'v9.9' not found" in one_line(err)
    assert final_files(tmp_path / "out") == []


def test_gated_without_token_then_with_it(
    hub: FakeHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/gated")
    assert code == 1
    assert "gated repository" in one_line(err) and "set HF_TOKEN" in err
    assert final_files(tmp_path / "out") == []
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    code, out, err = assets(tmp_path, capsys, "--model", "tiny/gated", "--json")
    assert code == 0, err
    assert f"Bearer {TOKEN}" in hub.auth_seen  # the token was sent to the Hub...
    tarball = Path(json.loads(out)["result"]["bundle"])
    assert TOKEN not in out + err  # ...and is nowhere in the output or the bundle
    assert TOKEN.encode() not in tarball.read_bytes()


def test_token_not_shown_in_errors(
    hub: FakeHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token_value")
    monkeypatch.setenv("HF_ENDPOINT", hub.url.replace("http://", "http://user:pw-secret@"))
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/gated")
    assert code == 1
    assert "your HF_TOKEN has no access" in one_line(err)
    assert "hf_wrong_token_value" not in err and "pw-secret" not in err


def test_hash_mismatch_leaves_nothing_and_is_fetched_again(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.altered.add("model.safetensors")
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 1
    line = one_line(err)
    assert "model.safetensors: hash mismatch" in line and "the Hub states" in line
    assert final_files(tmp_path / "out") == []
    hub.altered.clear()
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 0, err
    assert len(hub.requests("GET", "/model.safetensors")) == 2  # the bad copy was not kept


def test_small_file_checked_against_git_blob_id(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.altered.add("config.json")  # not an LFS file: checked by its git blob id
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 1 and "config.json: hash mismatch (git blob id" in one_line(err)


def test_a_file_the_hub_states_no_hash_for_is_hashed_here_and_said_so(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.add(Repo("model", "tiny/bare", tiny_model(), unstated={"model.safetensors"}))
    code, out, err = assets(tmp_path, capsys, "--model", "tiny/bare")
    assert code == 0, err
    assert (
        "warning: the Hub stated no hash for 1 file(s), so nothing checked them as they were "
        "fetched: tiny/bare/model.safetensors."
    ) in err
    root = extract(Path(out.strip().splitlines()[-1]), tmp_path / "carried")
    files = json.loads((root / "manifest.json").read_text())["assets"][0]["files"]
    by = {f["path"].rsplit("/", 1)[-1]: f.get("hash_by", "hub") for f in files}
    assert by["model.safetensors"] == "host" and by["config.json"] == "hub"
    from verl_bundle.airgap.contract import assets as am

    (asset,) = am.load(str(root)).assets  # the server reads what the host wrote
    assert {f.hash_by for f in asset.files} == {"hub", "host"}


def test_a_dataset_whose_files_the_hub_states_no_hash_for_is_named_too(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """S1: a mirror that lists no hashes, serving altered files: the model's files and the
    dataset's (converted, so no shipped file shows it) are named on stderr and in the JSON.
    The exit stays 0: the real Hub states no sha256 for a repository's small files either."""
    model, data = tiny_model(), tiny_gsm8k()
    hub.add(Repo("model", "tiny/nohash", model, unstated=set(model)))
    hub.add(Repo("dataset", "tiny/nohashdata", data, unstated=set(data)))
    hub.altered.update({"model.safetensors", "config.json"})
    args = ("--model", "tiny/nohash", "--dataset", "tiny/nohashdata")
    code, out, err = assets(tmp_path, capsys, *args, "--json")
    assert code == 0, err
    unhashed = json.loads(out)["result"]["unhashed"]
    assert {"tiny/nohash/model.safetensors", "tiny/nohash/config.json"} <= set(unhashed)
    assert {f"tiny/nohashdata/{n}" for n in data} <= set(unhashed)  # converted, still named
    code, out, err = assets(tmp_path, capsys, *args)
    assert code == 0, err
    (warning,) = [line for line in err.splitlines() if line.startswith("warning:")]
    assert f"the Hub stated no hash for {len(unhashed)} file(s)" in warning
    assert "warning" not in out


def test_cut_connection_resumes_with_range(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 12 MiB of weights: more than the client's 10 MiB read, so the cut comes after a chunk
    # was written and the retry asks only for the rest.
    big = hub.add(Repo("model", "tiny/big", tiny_model(weights=3 << 20)))
    hub.cut_once.add("model.safetensors")
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/big")
    assert code == 0, err
    gets = hub.requests("GET", "/model.safetensors")
    assert [g[2] for g in gets] == ["", "bytes=10485760-"]
    with tarfile.open(next((tmp_path / "out").glob("*.tar"))) as tf:
        names = tf.getnames()
    assert any(n.endswith("models/tiny--big/model.safetensors") for n in names)
    assert len(big.files["model.safetensors"]) > 12 << 20


def test_interrupted_run_resumes_from_cache(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.failing.add("tokenizer.json")
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 1 and "HTTP 500" in one_line(err)
    assert final_files(tmp_path / "out") == []
    hub.failing.clear()
    code, _, err = assets(tmp_path, capsys, "--model", "tiny/model")
    assert code == 0, err
    assert len(hub.requests("GET", "/config.json")) == 1  # finished files were not fetched again
    assert len(hub.requests("GET", "/tokenizer.json")) == 2


def test_full_disk_on_the_host(hub: FakeHub, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "verl_bundle",
        "assets",
        "--model",
        "tiny/model",
        "-o",
        str(out),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    # RLIMIT_FSIZE stands in for a full disk: the write fails (EFBIG) as on ENOSPC.
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        preexec_fn=lambda: limit_file_size(64 * 1024),
    )
    assert proc.returncode == 1
    assert "File too large" in one_line(proc.stderr)
    assert final_files(out) == []  # no tarball, no partial file


# -- bad input on the server -------------------------------------------------------------------


def test_altered_or_missing_file_in_the_bundle(carried: Path, tmp_path: Path) -> None:
    weights = carried / "models/tiny--model/model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    proc = install(carried, tmp_path / "prefix")
    assert proc.returncode == 3
    assert "models/tiny--model/model.safetensors: altered" in one_line(proc.stderr)
    assert not list((tmp_path / "prefix/assets/models/tiny--model").iterdir())  # nothing partial
    weights.unlink()
    proc = install(carried, tmp_path / "prefix")
    assert proc.returncode == 3
    assert "models/tiny--model/model.safetensors: missing" in one_line(proc.stderr)


def test_altered_manifest_is_refused(carried: Path, tmp_path: Path) -> None:
    manifest = carried / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"main"', '"v2"', 1))
    proc = install(carried, tmp_path / "prefix")
    assert proc.returncode == 3 and "manifest.json: altered" in one_line(proc.stderr)
    assert not (tmp_path / "prefix/assets").exists()


def test_full_disk_on_the_server(carried: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    proc = install(carried, prefix, limit=2048)  # the model's weights are larger
    assert proc.returncode == 1
    assert "no space left" in one_line(proc.stderr)
    from verl_bundle.airgap.assets.place import load_record
    from verl_bundle.airgap.assets.ready import check_placed

    finals = [p for p in (prefix / "assets").rglob("*") if p.is_dir() and len(p.name) == 40]
    assert len(finals) < 2  # the install stopped...
    for final in finals:  # ...and what has a final name is complete
        assert check_placed(str(final), load_record(str(final))) == []
    assert list((prefix / "assets").rglob(".*partial*")) == []
    proc = install(carried, prefix)  # with room again, the same command completes
    assert proc.returncode == 0, proc.stderr
    assert "not checked: no python" in proc.stdout  # no venv at this prefix: said, not passed


def test_stack_bundle_is_not_an_asset_bundle(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "manifest.json").write_text(json.dumps({"schema": 2, "name": "verl-bundle-x"}))
    (root / "SHA256SUMS").write_text("")
    from verl_bundle.airgap.assets import place as place_assets

    with pytest.raises(place_assets.AssetsError, match="is this a stack bundle") as info:
        place_assets.install_assets(str(root), str(tmp_path / "prefix"))
    assert info.value.code == 3
    assert os.listdir(tmp_path) == ["b"]


def test_dataset_configuration_is_chosen_per_repository(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = tiny_gsm8k()
    files.update({k.replace("main/", "socratic/"): v for k, v in files.items() if "/" in k})
    hub.add(Repo("dataset", "tiny/multi", files))
    code, _, err = assets(tmp_path, capsys, "--dataset", "tiny/multi")
    assert code == 2
    assert "several configurations (main, socratic)" in one_line(err)
    assert "--allow 'tiny/multi:main/*'" in err
    code, out, err = assets(
        tmp_path,
        capsys,
        "--model",
        "tiny/model",
        "--dataset",
        "tiny/multi",
        "--allow",
        "tiny/multi:socratic/*",
        "--json",
    )
    assert code == 0, err
    found = {a["repo_id"]: a for a in json.loads(out)["result"]["assets"]}
    assert [s["name"] for s in found["tiny/multi"]["converted_from"]] == [
        "socratic/train-00000-of-00001.parquet",
        "socratic/test-00000-of-00001.parquet",
    ]
    assert len(found["tiny/model"]["files"]) == 4  # the dataset's pattern left the model alone


def test_verl_shaped_dataset_passes_through(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.fakehub import parquet_bytes

    from verl_bundle.assets.convert import gsm8k_rows

    rows = gsm8k_rows("openai/gsm8k", "train", ["q?"], ["#### 7"])
    data = parquet_bytes(rows)
    hub.add(Repo("dataset", "tiny/ready", {"data/train.parquet": data}))
    code, out, err = assets(tmp_path, capsys, "--dataset", "tiny/ready", "--json")
    assert code == 0, err
    (asset,) = json.loads(out)["result"]["assets"]
    assert asset["conversion"] == "verl" and asset["splits"] == {"train": "train.parquet"}
    assert asset["files"][0]["sha256"] == hashlib.sha256(data).hexdigest()  # byte for byte


def test_not_a_gsm8k_or_verl_dataset(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.fakehub import parquet_bytes

    hub.add(Repo("dataset", "tiny/other", {"train.parquet": parquet_bytes([{"text": "x"}])}))
    code, _, err = assets(tmp_path, capsys, "--dataset", "tiny/other")
    assert code == 2 and "neither gsm8k-shaped" in one_line(err)


def test_default_selection_keeps_safetensors_only() -> None:
    from verl_bundle.assets.fetch import select

    names = [
        "config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "flax_model.msgpack",
        "onnx/model.onnx",
        "tf_model.h5",
        "model.gguf",
        "tokenizer.json",
    ]
    assert select(names, [], []) == ["config.json", "model.safetensors", "tokenizer.json"]
    no_st = ["config.json", "pytorch_model.bin"]
    assert select(no_st, [], []) == no_st  # nothing to prefer: the only weights are kept
    assert select(names, ["*.json"], ["tokenizer*"]) == ["config.json"]
    assert select(names, ["*.bin"], []) == ["pytorch_model.bin"]  # asked for: kept


def test_manifest_round_trip_and_strict_reading() -> None:
    from verl_bundle.airgap.contract import assets as am
    from verl_bundle.airgap.contract.manifest import ManifestError

    sha = "a" * 64
    m = am.AssetsManifest(
        "verl-assets-x",
        "verl-bundle",
        "2026-11-30T00:00:00Z",
        (
            am.Asset(
                "dataset",
                "o/d",
                "main",
                "b" * 40,
                "datasets/o--d",
                (am.AssetFile("datasets/o--d/train.parquet", sha, 3, ""),),
                splits=(("train", "train.parquet"),),
                converted_from=(am.SourceFile("main/train.parquet", sha, 9),),
                conversion="gsm8k",
            ),
        ),
    )
    assert am.loads(am.dumps(m)) == m
    doc = am.to_dict(m)
    doc["assets"][0]["commit"] = "main"
    with pytest.raises(ManifestError, match=r"manifest.assets\[0\].commit is not a 40-digit"):
        am.from_dict(doc)
    doc = am.to_dict(m)
    doc["assets"][0]["files"][0]["path"] = "models/../../etc/passwd"
    with pytest.raises(ManifestError, match="not a plain file name"):
        am.from_dict(doc)
    doc = am.to_dict(m)
    doc["schema"] = 2
    with pytest.raises(ManifestError, match="schema 2"):
        am.from_dict(doc)
