"""The asset tests' fake Hub (a tiny model, a gated copy, a tiny gsm8k), the assets command run in-
process, an asset bundle built from it, and install-assets.sh run with no network under Python
3.8: shared by the asset and dry-run test modules."""

from __future__ import annotations

import resource
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.airgap import extract, netns_prefix
from support.fakehub import FakeHub, Repo, tiny_gsm8k, tiny_model
from verl_bundle.cli.main import run
from verl_bundle.cli.options import Session

TOKEN = "hf_secret_token_for_tests"  # noqa: S105 - what the fake Hub accepts

PY38 = Path.home() / ".pyenv/versions/3.8.18/bin/python"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    """A fake Hub with a tiny model, a gated copy of it and a tiny gsm8k, as HF_ENDPOINT."""
    with FakeHub(TOKEN) as fake:
        fake.add(Repo("model", "tiny/model", tiny_model()))
        fake.add(Repo("model", "tiny/gated", tiny_model(), gated=True))
        fake.add(Repo("dataset", "tiny/gsm8k", tiny_gsm8k()))
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home-host"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield fake


def assets(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(
        ["assets", *args, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")],
        Session(),
    )
    out, err = capsys.readouterr()
    return code, out, err


def install(
    root: Path, prefix: Path, *args: str, limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    """./install-assets.sh with no network and Python 3.8 (the oldest the server code supports)."""
    if not PY38.exists():
        pytest.skip("no Python 3.8 (pyenv install 3.8.18)")
    env = {"PATH": "/usr/bin:/bin", "VERL_BUNDLE_PYTHON": str(PY38), "HOME": str(prefix.parent)}
    return subprocess.run(
        [*netns_prefix(), str(root / "install-assets.sh"), "--prefix", str(prefix), *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=(lambda: limit_file_size(limit)) if limit else None,
    )


def limit_file_size(limit: int | None) -> None:
    """A full disk, really: writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit or 0, limit or 0))


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def carried(hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    code, out, err = assets(tmp_path, capsys, "--model", "tiny/model", "--dataset", "tiny/gsm8k")
    assert code == 0, err
    return extract(Path(out.strip().splitlines()[-1]), tmp_path / "carried")
