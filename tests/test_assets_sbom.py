"""The asset bundle's sbom.cdx.json (validated with cyclonedx-python-lib's JSON schema validator)
and LICENSES.txt: each model and dataset with the licence its card states, fetched with the real
huggingface_hub client from a fake Hub on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from support.airgap import extract
from support.fakehub import FakeHub, Repo, tiny_gsm8k, tiny_model

from verl_bundle.airgap.contract import assets as am
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.cli.main import run
from verl_bundle.cli.options import Session

CARD = b"---\nlanguage: en\nlicense: apache-2.0\ntags:\n- tiny\n---\n# a tiny model\n"
DATA_CARD = b"---\nlicense:\n- llama3\n- cc-by-4.0\n---\n# a tiny gsm8k\n"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    with FakeHub("hf_unused_token") as fake:
        fake.add(Repo("model", "tiny/licensed", {**tiny_model(), "README.md": CARD}))
        fake.add(Repo("model", "tiny/model", tiny_model()))  # a card-less repository
        fake.add(Repo("dataset", "tiny/gsm8k", {**tiny_gsm8k(), "README.md": DATA_CARD}))
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home-host"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield fake


def test_models_and_datasets_carry_their_card_licence(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "assets",
        "--model",
        "tiny/licensed",
        "--model",
        "tiny/model",
        "--dataset",
        "tiny/gsm8k",
    ]
    code = run([*args, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")], Session())
    out, err = capsys.readouterr()
    assert code == 0, err
    root = extract(Path(out.strip().splitlines()[-1]), tmp_path / "x")
    m = am.load(str(root))
    licences = {a.repo_id: a.license for a in m.assets}
    assert licences == {
        "tiny/licensed": "apache-2.0",
        "tiny/model": "",
        "tiny/gsm8k": "llama3 OR cc-by-4.0",
    }
    text = (root / mf.SBOM).read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    (model,) = [c for c in doc["components"] if c["name"] == "tiny/licensed"]
    commit = next(a.commit for a in m.assets if a.repo_id == "tiny/licensed")
    assert model["type"] == "machine-learning-model"
    assert model["purl"] == f"pkg:huggingface/tiny/licensed@{commit}"
    assert model["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    inner = {c["name"]: c["hashes"][0]["content"] for c in model["components"]}
    files = {
        f.path.rsplit("/", 1)[-1]: f.sha256
        for a in m.assets
        for f in a.files
        if a.repo_id == "tiny/licensed"
    }
    assert inner == files
    report = (root / mf.LICENSES).read_text()
    assert report.index("unknown  [no licence declared") < report.index("apache-2.0  [open source]")
    assert "llama3 OR cc-by-4.0  [not a licence verl-bundle knows as open source" in report
    sums = (root / mf.SUMS).read_text()
    assert f"  {mf.SBOM}\n" in sums and f"  {mf.LICENSES}\n" in sums
