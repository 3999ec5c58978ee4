from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pkgindex import Server  # noqa: E402
from stack import UPLOADED, StackDirs, build_stack  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """This machine's pip and uv configuration must not leak into any test (as pip-tools does)."""
    for var in list(os.environ):
        if var.startswith(("PIP_", "UV_")):
            monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "uv-cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    monkeypatch.setenv("COLUMNS", "100")
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@dataclass
class Stack:
    dirs: StackDirs
    pytorch: Server
    pypi: Server
    files: Server

    def mirrors(self) -> list[str]:
        """--mirror options pointing every location of the cu118 profile at 127.0.0.1."""
        return [
            "--mirror",
            f"pypi={self.pypi.index_url}",
            "--mirror",
            f"pytorch-cu118={self.pytorch.index_url}",
            "--mirror",
            f"flash-attn-releases={self.files.url}",
            "--mirror",
            f"vllm-releases={self.files.url}",
        ]

    def servers(self) -> list[Server]:
        return [self.pytorch, self.pypi, self.files]

    def reset(self) -> None:
        for s in self.servers():
            s.clear()
            s.faults.__init__()  # type: ignore[misc]


@pytest.fixture(scope="session")
def stack_dirs(tmp_path_factory: pytest.TempPathFactory) -> StackDirs:
    return build_stack(tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def stack_servers(stack_dirs: StackDirs) -> Iterator[Stack]:
    servers = Stack(
        stack_dirs,
        Server(stack_dirs.pytorch).start(),
        Server(stack_dirs.pypi, json_api=True, upload_time=UPLOADED).start(),
        Server(stack_dirs.files, redirect_files=True).start(),
    )
    servers.pypi.upload_times["transformers-5.0.0-py3-none-any.whl"] = "2026-02-01T00:00:00Z"
    try:
        yield servers
    finally:
        for s in servers.servers():
            s.stop()


@pytest.fixture
def stack(stack_servers: Stack) -> Iterator[Stack]:
    stack_servers.reset()
    yield stack_servers
    stack_servers.reset()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
