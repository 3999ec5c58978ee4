"""Behind intranet mirrors a user learns every location a profile needs at once: `profiles show
NAME --mirrors` prints them with what each serves and the whole --mirror line, and the first
build that cannot reach a location names every other one still without a mirror."""

from __future__ import annotations

import json
import socket

import pytest
from conftest import Stack
from support.cli import run

from verl_bundle.errors import FetchError
from verl_bundle.profile.catalog import find_profile
from verl_bundle.profile.mirrors import make_mirrors, mirror_args, name_the_rest, needs

CU118 = "--mirror pypi=URL --mirror pytorch-cu118=URL --mirror flash-attn-releases=URL --mirror vllm-releases=URL"


def test_the_cu118_profile_needs_four_locations_and_says_what_each_serves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run(["profiles", "show", "cu118", "--mirrors"], capsys)
    assert result.code == 0, result.err
    assert result.last_line == CU118  # what a script wants: the line to fill in
    text = result.out
    assert "cu118 builds from 4 locations" in text
    assert "pytorch-cu118" in text and "torch, torchaudio, torchvision, triton, xformers" in text
    assert "vllm (required)" in text and "flash-attn (else its sdist)" in text
    assert "files at <URL>/v{version}/vllm-{version}+cu118-" in text  # the path a mirror serves
    assert 'make bundle PROFILE=cu118 MIRRORS="pypi=URL pytorch-cu118=URL ' in text
    assert "with --with-python also python-build-standalone=URL" in text


def test_a_default_index_profile_needs_only_the_default_index(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run(["profiles", "show", "cu130", "--mirrors", "--json"], capsys)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["command"] == "profiles show" and doc["ok"] is True
    assert doc["result"]["mirror_args"] == "--mirror pypi=URL"
    assert [loc["name"] for loc in doc["result"]["locations"]] == ["pypi"]
    assert doc["result"]["locations"][0] == {
        "name": "pypi",
        "kind": "index",
        "url": None,
        "serves": ["every other package", "pip and uv for the server"],
        "required": True,
        "path": None,
    }


def test_the_mirror_lines_name_every_location_once() -> None:
    found = needs(find_profile("cu118-legacy"))
    assert mirror_args(found) == CU118
    assert make_mirrors(found) == (
        'MIRRORS="pypi=URL pytorch-cu118=URL flash-attn-releases=URL vllm-releases=URL"'
    )


def test_an_error_that_is_not_about_reaching_a_location_is_left_as_it_is() -> None:
    profile = find_profile("cu118")
    error = FetchError("torch-2.5.1.whl: sha256 mismatch; the mirror serves another file")
    assert name_the_rest(error, profile, {}) is error


def test_the_first_unreachable_location_names_all_the_others(
    stack: Stack,
    tmp_path: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default index is mirrored (the test's index), the PyTorch index's mirror refuses
    connections, and the two release hosts have no mirror yet: the one error names both, with
    their public URLs, and the whole --mirror line. Nothing may leave this machine: every
    proxy variable points at a closed local port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    args = [
        *("lock", "--profile", "cu118-legacy", "--python", "3.10"),
        *("--mirror", f"pypi={stack.pypi.index_url}"),
        *("--mirror", f"pytorch-cu118=http://127.0.0.1:{closed}/simple"),
        *("-o", f"{tmp_path}/l.toml", "--cache-dir", f"{tmp_path}/c"),
    ]
    result = run(args, capsys)
    assert result.code == 1, result.err
    line = result.err.strip().splitlines()[-1]
    assert line.startswith("error: ") and f"127.0.0.1:{closed}" in line
    rest = line.split("also needs these locations, given no --mirror: ", 1)[1]
    assert rest.startswith("flash-attn-releases (https://github.com/Dao-AILab/")
    assert "; vllm-releases (https://github.com/vllm-project/vllm/releases/download: vllm" in rest
    assert "pypi (" not in rest and "pytorch-cu118 (" not in rest  # mirrored, or the failed one
    assert f"give every one: {CU118} (`verl-bundle profiles show cu118-legacy --mirrors`" in rest
