"""The README's exit-code table, walked: every code it lists is the one exit table's, and each is
what a real command ends with when the table says so. The quick ones run here; the ones that
need an install or a compile name the test that proves them, which must exist and assert it."""

from __future__ import annotations

import re
import socket
import tarfile
from pathlib import Path

import pytest
from conftest import ROOT
from support.cli import Result, run

from verl_bundle.airgap.errors import EXIT_CODES

README = (ROOT / "README.md").read_text(encoding="utf-8")
ROW = re.compile(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \|$", re.M)

# Codes proven by a slower test elsewhere: (file, test function, the assertion it makes).
PROVEN_ELSEWHERE = {
    5: ("test_install_verdict.py", "test_leaving_out_any_phase_ends_not_ready_naming_it"),
    130: ("test_compile_stop.py", "test_a_stopped_compile_leaves_no_process_and_resumes"),
    143: ("test_compile_stop.py", "test_a_stopped_compile_leaves_no_process_and_resumes"),
}


def table() -> dict[int, str]:
    start = README.index("## Exit codes")
    rows = ROW.findall(README[start : README.index("\n## ", start + 1)])
    return {int(code): meaning.strip() for code, meaning, _ in rows}


def test_the_readme_table_is_the_one_exit_table() -> None:
    assert sorted(table()) == sorted(EXIT_CODES)


def _one_line(result: Result, code: int) -> str:
    assert result.code == code, result.out + result.err
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert lines[-1].startswith("error: "), result.err
    return lines[-1]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_0_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert "done" in table()[0] or "ready" in table()[0]
    result = run(["profiles"], capsys)
    assert result.code == 0, result.err


def test_1_a_download_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "a download" in table()[1]
    port = _closed_port()
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{port}")  # nothing may leave this machine
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    args = ["lock", "--profile", "cu124", "--mirror", f"pypi=http://127.0.0.1:{port}/simple"]
    args += ["-o", str(tmp_path / "l.toml"), "--cache-dir", str(tmp_path / "c")]
    line = _one_line(run(args, capsys), 1)
    assert f"127.0.0.1:{port}" in line


def test_2_usage_an_output_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o FILE` where FILE exists: exit 2 with what to do, before anything is fetched (no
    index is given: a fetch would fail with 1)."""
    assert "usage error" in table()[2]
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    args = ["build", "--profile", "cu124", "-o", str(afile), "--cache-dir", str(tmp_path / "c")]
    line = _one_line(run(args, capsys), 2)
    assert line == (
        f"error: -o {afile}: {afile} exists and is not a directory; -o names the directory for "
        "the tarball (made when missing): give another path"
    )
    assert afile.read_text() == "mine\n" and not (tmp_path / "c").exists()
    below = afile / "bundles"  # a directory to make below a file: the same
    assert "exists and is not a directory" in _one_line(
        run([*args[:-4], "-o", str(below)], capsys), 2
    )


def test_2_usage_an_unknown_phase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(run(["doctor", "--profile", "cu124", "--skip-phase", "nope"], capsys), 2)
    assert "--skip-phase nope" in line


def test_3_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "damaged" in table()[3]
    (tmp_path / "a.txt").write_text("not a bundle\n")
    tarball = tmp_path / "x.tar"
    with tarfile.open(tarball, "w") as tf:
        tf.add(tmp_path / "a.txt", "a.txt")
    result = run(["verify", str(tarball)], capsys)
    assert result.code == 3, result.out + result.err
    assert result.last_line.startswith("damaged: ")


def test_4_this_server_cannot_install_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The doctor finds a failure: a --python that does not run (a pyenv shim's exit 127)."""
    assert "wrong or old Python" in table()[4]
    shim = tmp_path / "python3.10"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.10: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    result = run(["doctor", "--profile", "cu124", "--python", str(shim)], capsys)
    assert result.code == 4, result.out + result.err
    assert result.last_line.startswith("doctor: not ready to install: python: ")


@pytest.mark.parametrize("code", sorted(PROVEN_ELSEWHERE))
def test_the_slow_codes_are_proven_by_a_named_test(code: int) -> None:
    name, function = PROVEN_ELSEWHERE[code]
    source = (ROOT / "tests" / name).read_text(encoding="utf-8")
    body = source.split(f"def {function}(", 1)
    assert len(body) == 2, f"{name} has no {function}"
    text = body[1].split("\ndef ", 1)[0]
    words = {5: "EXIT_NOT_READY", 130: "SIGINT: 130", 143: "SIGTERM: 143"}[code]
    assert words in text, f"{function} does not assert exit {code}"
