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
    # ... and it ends by naming the profiles that a host with only the default index can build
    assert line.endswith(
        "These profiles need only the default index: cu121, cu124, cu130 (e.g. --profile cu130)."
    )


def test_an_unreachable_default_index_names_no_profile_as_an_escape() -> None:
    """When the default index itself cannot be reached, no profile builds: none is offered."""
    mirrored = {"pypi": "https://pypi.example/simple"}
    profile = find_profile("cu124").with_mirrors(mirrored)
    error = FetchError("https://pypi.example/simple/torch/: cannot connect: refused")
    said = str(name_the_rest(error, profile, mirrored))
    assert said.startswith(str(error)) and "flash-attn-releases (" in said
    assert "need only the default index" not in said


def test_an_unreachable_release_host_of_a_plain_profile_names_the_others() -> None:
    """cu124 falls back from flash-attn's release host: its error still names the plain ones,
    itself left out."""
    profile = find_profile("cu124")
    url = "https://github.com/Dao-AILab/flash-attention/releases/download"
    error = FetchError(f"{url}/v2.7.4.post1/x.whl: cannot connect: refused")
    said = str(name_the_rest(error, profile, {}))
    assert said.endswith(
        "These profiles need only the default index: cu121, cu130 (e.g. --profile cu130)."
    )


def test_profiles_says_what_each_needs(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(["profiles"], capsys)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    needs_of = {
        lines[i].split()[0]: lines[i + 2].strip()
        for i in range(1, len(lines), 3)
        if lines[i + 2].strip().startswith("needs: ")
    }
    assert needs_of["cu130"] == "needs: only the default index"
    assert needs_of["cu124"] == "needs: only the default index"
    assert needs_of["cu118"] == (
        "needs: the default index and pytorch-cu118, vllm-releases (`profiles show cu118 --mirrors`)"
    )
    doc = json.loads(run(["profiles", "--json"], capsys).out)
    plain = {p["name"] for p in doc["result"] if p["sources"]["default_index_only"]}
    assert plain == {"cu121", "cu124", "cu130"}
