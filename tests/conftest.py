from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.pkgindex import Server
from support.shared import Value, once
from support.stack import UPLOADED, StackDirs, build_stack
from support.toolchain import CLEARED, FakeMachine

# A test run started in the background of a non-interactive shell inherits SIGINT as ignored, and
# so would every subprocess: the Ctrl-C tests need the default disposition to be inherited.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[1]
# The machine's own temporary directory, before the suite points TMPDIR into pytest's (below):
# for a directory another user must reach (pytest's base directory is private to its owner).
SYSTEM_TMP = tempfile.gettempdir()
NAME = "verl-bundle-cu118-legacy-cp310-manylinux_2_17_x86_64"


def site_packages(python: Path) -> Path:
    """The site-packages directory of a venv's (or any) interpreter, as it reports it."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def clean_environ(scratch: Path) -> dict[str, str]:
    """os.environ without this machine's pip/uv settings or proxies, for subprocesses."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_"))
        and k.lower() not in ("https_proxy", "http_proxy", "all_proxy")
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    env.setdefault("UV_CACHE_DIR", str(scratch / "uv-cache"))
    env["XDG_CACHE_HOME"] = str(scratch / "xdg-cache")
    return env


# REQUIRE_ALL=1 (CI sets it): a test skipped for a missing capability (no unshare, no Slurm,
# no Python 3.8, no shellcheck...) fails instead, so a run can never pass by proving less.
REQUIRE_ALL = os.environ.get("REQUIRE_ALL") == "1"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if REQUIRE_ALL and report.skipped and not hasattr(report, "wasxfail"):
        where, _, why = report.longrepr if isinstance(report.longrepr, tuple) else ("", 0, "")
        report.outcome = "failed"
        report.longrepr = f"skipped with REQUIRE_ALL=1 ({where}): {why}"
    return report


# Marks by the resource a test uses, applied from the fixtures it asks for (directly or through
# another fixture): `-m "not engine"` runs without Slurm, Ray and Ansible; `-m bundle` only what
# builds or reads a whole bundle. Every test so marked is `slow` too, as is what a test marks
# itself (nvcc compiles, big wheels): `make test-fast` is the rest.
RESOURCES = {
    "bundle": (
        "built_bundle",
        "bundle",
        "pinned_pair",
        "python_bundle",
        "source_build_bundle",
        "big_bundle",
        "left_to_the_server",
    ),
    "install": ("home",),
    "engine": ("slurm", "ansible_core"),
}


# The order modules are handed to the workers: the longest first (the Slurm group, which one
# worker runs in turn, then the other engines, installs, bundles), so that the run does not end
# waiting on one worker's Slurm or Ansible tests while the others are idle. A module stays whole
# (its module fixtures are set up once) and keeps its own order.
FIRST = ("xdist_group", "engine", "install", "bundle", "slow")


def _rank(item: pytest.Item) -> int:
    return next((i for i, m in enumerate(FIRST) if item.get_closest_marker(m)), len(FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marked = [mark for mark, fixtures in RESOURCES.items() if names.intersection(fixtures)]
        for mark in marked:
            item.add_marker(mark)
        if marked and item.get_closest_marker("slow") is None:
            item.add_marker("slow")
    rank: dict[str, int] = {}  # a module's: its costliest item's class
    for item in items:
        module = item.nodeid.split("::")[0]
        rank[module] = min(_rank(item), rank.get(module, len(FIRST)))
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: alike on every worker


@pytest.fixture(scope="session", autouse=True)
def scratch_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMPDIR, for the tests and every process they start (installers, uv, Slurm jobs), is a
    directory under pytest's base directory: what they leave in it goes with that directory
    (removed whole after a green run) instead of piling up in the machine's /tmp."""
    where = tmp_path_factory.getbasetemp() / "tmp"
    where.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(where))
        patch.setattr(tempfile, "tempdir", str(where))
        yield where


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

    def mirrors(self, pypi: str | None = None) -> list[str]:
        """--mirror options pointing every location of the cu118 profile at 127.0.0.1 (the
        default index at `pypi` when given: another server over the same files)."""
        return [
            "--mirror",
            f"pypi={pypi or self.pypi.index_url}",
            "--mirror",
            f"pytorch-cu118={self.pytorch.index_url}",
            "--mirror",
            f"flash-attn-releases={self.files.url}",
            "--mirror",
            f"vllm-releases={self.files.url}",
        ]

    def args(
        self, command: str, out: Path, cache: Path, *extra: str, pypi: str | None = None
    ) -> list[str]:
        """A lock/build command line for the cu118 profile (or --profile in `extra`) at cp310."""
        args = [
            command,
            "--python",
            "3.10",
            *self.mirrors(pypi),
            "-o",
            str(out),
            "--cache-dir",
            str(cache),
        ]
        if "--profile" not in extra:
            # The toy stack is the design card's torch 2.1.2 stack (profile cu118-legacy);
            # `--cuda 11.8` picks the newer cu118 stack.
            args += ["--profile", "cu118-legacy"]
        return [*args, *extra]

    def servers(self) -> list[Server]:
        return [self.pytorch, self.pypi, self.files]

    def reset(self) -> None:
        for s in self.servers():
            s.clear()
            s.faults.__init__()  # type: ignore[misc]


def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> StackDirs:
    """The test stack's wheels, built once per run (support/shared.py). Read-only."""

    def build(where: Path) -> Value:
        dirs = build_stack(where)
        return [str(dirs.pytorch), str(dirs.pypi), str(dirs.files)]

    built = once(tmp_path_factory, "stack", build)
    assert isinstance(built, list)
    pytorch, pypi, files = (Path(str(p)) for p in built)
    return StackDirs(pytorch, pypi, files)


@contextlib.contextmanager
def serving(dirs: StackDirs) -> Iterator[Stack]:
    """The three indexes of the test stack over `dirs`, each on its own port of 127.0.0.1."""
    servers = Stack(
        dirs,
        Server(dirs.pytorch).start(),
        Server(dirs.pypi, json_api=True, upload_time=UPLOADED).start(),
        Server(dirs.files, redirect_files=True).start(),
    )
    servers.pypi.upload_times["transformers-5.0.0-py3-none-any.whl"] = "2026-02-01T00:00:00Z"
    try:
        yield servers
    finally:
        for s in servers.servers():
            s.stop()


@pytest.fixture(scope="session")
def stack_dirs(tmp_path_factory: pytest.TempPathFactory) -> StackDirs:
    return shared_stack(tmp_path_factory)


@pytest.fixture(scope="session")
def stack_servers(stack_dirs: StackDirs) -> Iterator[Stack]:
    """This worker's servers over the shared stack (their counters and faults are its own)."""
    with serving(stack_dirs) as servers:
        yield servers


@pytest.fixture
def stack(stack_servers: Stack) -> Iterator[Stack]:
    stack_servers.reset()
    yield stack_servers
    stack_servers.reset()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def build_bundle(stack: Stack, out: Path, cache: Path, *extra: str) -> dict[str, object]:
    """`python -m verl_bundle build` as a real subprocess; returns the result in its JSON."""
    env = clean_environ(out.parent)
    proc = subprocess.run(
        [sys.executable, "-m", "verl_bundle", *stack.args("build", out, cache, *extra), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["command"] == "build" and doc["ok"] is True
    result: dict[str, object] = doc["result"]
    return result


def shared_build(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Stack, Path], Value]
) -> Value:
    """`build(stack, directory)` once per run (support/shared.py), against servers of its own
    over the shared stack, so that no worker's servers (their ports, counters, faults) are the
    ones a shared result was built from: every worker sees the same result the same way."""
    dirs = shared_stack(tmp_path_factory)

    def built(where: Path) -> Value:
        with serving(dirs) as servers:
            return build(servers, where)

    return once(tmp_path_factory, name, built)


@pytest.fixture(scope="session")
def built_bundle(
    stack_dirs: StackDirs, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, dict[str, object]]:
    """One cu118 bundle built from the local indexes: (tarball, extracted dir, build JSON),
    built once per run. Read-only for the tests that use it; copy it before changing anything."""

    def build(stack: Stack, tmp: Path) -> Value:
        doc = build_bundle(stack, tmp / "out", tmp / "cache")
        with tarfile.open(Path(str(doc["bundle"]))) as tf:
            tf.extractall(tmp / "x", filter="data")
        return doc

    doc = shared_build(tmp_path_factory, "built", build)
    assert isinstance(doc, dict)
    tarball = Path(str(doc["bundle"]))
    return tarball, tarball.parents[1] / "x" / NAME, doc


@pytest.fixture
def bundle(built_bundle: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> Path:
    """A fresh extraction of the built test bundle, free to change (install tests)."""
    from support.airgap import extract

    return extract(built_bundle[0], tmp_path / "b")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty HOME for install.sh: a test can check that nothing was written there."""
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """A fake GPU server (tests/support/toolchain.py), none of this machine's CUDA or compiler
    variables inherited."""
    for var in CLEARED:
        monkeypatch.delenv(var, raising=False)
    return FakeMachine(tmp_path / "machine")


@pytest.fixture
def server(files: Path) -> Iterator[Server]:
    """A plain HTTP server on 127.0.0.1 over the test module's own `files` directory."""
    s = Server(files).start()
    yield s
    s.stop()


# Fixtures that more than one test module uses, defined with their helpers in support/: the
# bundled interpreter (an install_only archive, its release host, a bundle with it); the fake Hub
# and an asset bundle made from it; the tiny CUDA extension's index. Imported last: they import
# airgap, which imports clean_environ from here.
from support.assets import carried, hub  # noqa: E402, F401
from support.cpython import cpython_archive, python_bundle, release_host  # noqa: E402, F401
from support.tinycuda import tiny  # noqa: E402, F401


@pytest.fixture(scope="session")
def pinned_pair(stack_dirs: StackDirs, tmp_path_factory: pytest.TempPathFactory) -> object:
    """Two bundles differing in one pin (support/crossing.py's Pair), built once per run.
    Read-only."""
    from support.crossing import Pair, build_pair

    def build(stack: Stack, where: Path) -> Value:
        return build_pair(stack, where).to_json()

    doc = shared_build(tmp_path_factory, "pair", build)
    assert isinstance(doc, dict)
    return Pair.from_json(doc)
