"""The progress helper without a terminal: a line at a fixed interval while work is in flight
(downloads: files and bytes done), none once it is over, none at all when quiet."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from support.pkgindex import Server, build_wheel

from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.net.cache import Cache
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import Http
from verl_bundle.progress import Silent, step

SIZE = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    build_wheel(root, "slow", "1.0", payload_bytes=SIZE)
    build_wheel(root, "quick", "1.0", payload_bytes=SIZE // 2)
    return root


def _want(server: Server, path: Path) -> Want:
    url = f"{server.url}/files/{path.name}"
    return Want(path.name.split("-")[0], path.name, url, "mirror", sha256_file(path), None)


def test_a_slow_download_is_reported_at_each_interval_with_files_and_bytes_done(
    tmp_path: Path, server: Server, files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow, quick = sorted(files.glob("slow-*.whl")), sorted(files.glob("quick-*.whl"))
    server.faults.slow[slow[0].name] = (64 << 10, 0.1)  # about 1.6 s for the file
    silent = Silent(every=0.2, first=0)  # the status at once: this step is short
    silent.status("fetching 2 files ...")
    d = Downloader(Cache(tmp_path / "c"), Http(), silent)
    d.fetch(_want(server, quick[0]))
    d.fetch(_want(server, slow[0]))
    time.sleep(0.5)  # more than an interval with nothing in flight: no line
    silent.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert lines[0] == "fetching 2 files ..."  # said as the step starts, off a terminal too
    lines = lines[1:]
    assert len(lines) >= 3, lines  # several intervals passed during the slow download
    assert all(line.split("] ")[1].startswith("fetching 2 files: 1 done (") for line in lines)
    assert all(" 1 in flight (" in line for line in lines)
    quick_mb = f"{quick[0].stat().st_size / 1e6:.1f} MB"
    assert f"1 done ({quick_mb})" in lines[0]
    moved = [float(line.rsplit("(", 1)[1].split(" MB")[0]) for line in lines]
    assert moved == sorted(moved) and moved[-1] > moved[0]  # the bytes in flight grow
    assert silent.line().endswith("0 in flight (0.0 MB of 0.0 MB)")
    assert "2 done (" in silent.line()


def test_quiet_says_nothing_and_a_closed_reporter_stops(
    capsys: pytest.CaptureFixture[str],
) -> None:
    quiet = Silent(quiet=True, every=0.05)
    quiet.advance(quiet.start("a", 10), 5)
    loud = Silent(every=0.05)
    loud.start("b", 10)
    loud.close()
    time.sleep(0.3)
    assert capsys.readouterr().err == ""


def test_a_step_in_flight_is_told_apart_from_the_files() -> None:
    """The tarball written while files download is a step of its own, not one more file."""
    silent = Silent(quiet=True)
    silent.status("fetching 3 files ...")
    tar = silent.start("writing bundle", 3_000_000_000)
    silent.advance(tar, 1_200_000_000)
    wheel = silent.start("torch-2.11.0-cp310-cp310-manylinux_2_28_x86_64.whl", 500_000_000)
    silent.advance(wheel, 200_000_000)
    done = silent.start("einops-0.8.1-py3-none-any.whl", 64_000)
    silent.advance(done, 64_000)
    silent.done(done)
    line = silent.line().split("] ", 1)[1]
    assert line == (
        "fetching 3 files: 1 done (0.1 MB), 1 in flight (0.20 GB of 0.50 GB); "
        "writing bundle 1.20 GB of 3.00 GB"
    )
    silent.done(tar)
    assert silent.line().endswith("1 done (0.1 MB), 1 in flight (0.20 GB of 0.50 GB)")


def test_a_step_is_said_as_it_starts_and_at_each_interval_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off a terminal, a long step with no pieces of its own (the wheel checks, verify) says a
    line as it starts and then the periodic line naming it. stderr is a real pipe read line by
    line: each read waits for the line, nothing waits on a clock."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "r") as reader, os.fdopen(write_fd, "w") as writer:
        monkeypatch.setattr(sys, "stderr", writer)
        silent = Silent(every=0.05, first=0)
        with step(silent, "checking 267 wheels"):
            first = reader.readline().rstrip("\n")
            second = reader.readline().rstrip("\n")
            third = reader.readline().rstrip("\n")
        silent.close()
    assert first == "checking 267 wheels ..."
    for line in (second, third):
        assert line.startswith("[0m") and "] checking 267 wheels: " in line
        assert line.endswith("; checking 267 wheels")  # a step with no bytes: its name
    assert not silent.line().endswith("; checking 267 wheels")  # over: no longer in flight


def test_a_status_said_again_is_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    silent = Silent(first=0)
    silent.status("resolving cu130 for cp310 ...")
    silent.status("resolving cu130 for cp310 ...")
    silent.status("fetching 268 files ...")
    silent.close()
    assert capsys.readouterr().err.splitlines() == [
        "resolving cu130 for cp310 ...",
        "fetching 268 files ...",
    ]


def test_a_status_is_said_once_its_step_has_run_first_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step still under way after `first` seconds is said (the pipe's read waits for it);
    a step over before that (a usage error's) says nothing, so one-line errors stay one line."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "r") as reader, os.fdopen(write_fd, "w") as writer:
        monkeypatch.setattr(sys, "stderr", writer)
        silent = Silent(first=0.05)
        silent.status("resolving cu130 for cp310 ...")
        assert reader.readline() == "resolving cu130 for cp310 ...\n"
        quick = Silent(first=3600)  # a step that ends long before its line is due
        quick.status("fetching 268 files ...")
        quick.status("writing the bundle ...")
        quick.close()
        silent.close()
        print("end", file=writer, flush=True)
        assert reader.readline() == "end\n"  # nothing came before it
