"""Every bundle's sbom.cdx.json (CycloneDX 1.6, written with cyclonedx-python-lib) validated with
the library's own JSON schema validator, and LICENSES.txt, from a real bundle of the toy stack;
the licence table (verl_bundle/wheel/licenses.json), each entry against its own sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from support.pkgindex import build_sdist, build_wheel

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.wheel.licenses import declared, judge, of_file, table


@pytest.fixture(scope="module")
def sbom(built_bundle: tuple[Path, Path, dict[str, object]]) -> dict[str, object]:
    root = built_bundle[1]
    text = (root / mf.SBOM).read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc: dict[str, object] = json.loads(text)
    return doc


def test_the_sbom_is_valid_cyclonedx_and_names_every_file(
    sbom: dict[str, object], built_bundle: tuple[Path, Path, dict[str, object]]
) -> None:
    m = mf.load(str(built_bundle[1]))
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"
    components = {c["bom-ref"]: c for c in sbom["components"]}  # type: ignore[attr-defined]
    assert set(components) == {f.path for f in m.files}
    for f in m.files:
        c = components[f.path]
        assert c["version"] == f.version
        assert c["hashes"] == [{"alg": "SHA-256", "content": f.sha256}]
        if f.url:
            assert c["externalReferences"][0]["url"] == f.url
    torch = next(c for c in components.values() if c["name"] == "torch")
    assert torch["purl"].startswith("pkg:pypi/torch@2.1.2%2Bcu118?file_name=torch-2.1.2%2Bcu118-")
    assert torch["licenses"] == [{"license": {"id": "BSD-3-Clause"}}]
    cupy = next(c for c in components.values() if c["name"] == "cupy-cuda11x")
    assert cupy["licenses"] == [{"license": {"name": "NVIDIA Proprietary Software"}}]
    verl = next(c for c in components.values() if c["name"] == "verl")
    assert verl["licenses"] == [{"license": {"name": "unknown"}}]


def test_the_sbom_carries_the_bundles_own_metadata(
    sbom: dict[str, object], built_bundle: tuple[Path, Path, dict[str, object]]
) -> None:
    root = built_bundle[1]
    m = mf.load(str(root))
    meta = sbom["metadata"]
    assert isinstance(meta, dict)
    props = {p["name"]: p["value"] for p in meta["component"]["properties"]}
    lock = next(g.sha256 for g in m.generated if g.path == mf.LOCK)
    assert props["verl-bundle:lock-sha256"] == lock
    assert props["verl-bundle:profile"] == "cu118-legacy"
    assert props["verl-bundle:target"] == "Python 3.10 (cp310), manylinux_2_17_x86_64, CUDA 11.8"
    assert props["verl-bundle:tool"].startswith("verl-bundle ")
    assert meta["timestamp"].startswith(m.created[:19])
    assert mf.SBOM in {g.path for g in m.generated} and mf.LICENSES in {g.path for g in m.generated}


def test_licenses_txt_puts_the_ones_to_review_first(
    built_bundle: tuple[Path, Path, dict[str, object]],
) -> None:
    text = (built_bundle[1] / mf.LICENSES).read_text()
    review, _, good = text.partition("OPEN SOURCE:")
    assert "TO REVIEW" in review
    assert (
        "NVIDIA Proprietary Software  [NVIDIA's own licence: read its terms]\n    cupy-cuda11x 12.1.0"
        in review
    )
    assert "unknown  [no licence declared" in review
    assert "BSD-3-Clause  (1)\n    torch 2.1.2+cu118" in good
    mit = good.split("MIT  (", 1)[1].split("\n", 1)[1]  # pip's own wheel declares MIT too
    assert "    triton 2.1.0" in mit.split("\n\n")[0].splitlines()
    assert "Apache-2.0  (1)\n    ray 2.10.0" in good


@pytest.mark.parametrize(
    ("lines", "want"),
    [
        (("License-Expression: MIT OR Apache-2.0", "License: BSD"), "MIT OR Apache-2.0"),
        (("License: BSD License",), "BSD License"),
        (
            ("License: " + "x" * 200, "Classifier: License :: OSI Approved :: MIT License"),
            "MIT License",
        ),
        (
            (
                "Classifier: License :: OSI Approved :: MIT License",
                "Classifier: License :: OSI Approved :: Apache Software License",
            ),
            "MIT License; Apache Software License",
        ),
        (("License: UNKNOWN",), ""),
        ((), ""),
    ],
)
def test_declared_takes_the_expression_then_the_field_then_the_classifiers(
    tmp_path: Path, lines: tuple[str, ...], want: str
) -> None:
    wheel = build_wheel(tmp_path, "pkg", "1.0", metadata=lines)
    assert of_file(wheel) == want
    assert declared("Name: x\n" + "".join(f"{x}\n" for x in lines)) == want


def test_a_licence_with_terminal_controls_is_kept_printable(tmp_path: Path) -> None:
    """ESC and BEL in a wheel's License field (a title change, a screen clear) reach the
    manifest, LICENSES.txt and the SBOM as visible escapes, never as raw controls."""
    wheel = build_wheel(
        tmp_path, "evil-licence", "1.0", metadata=("License: MIT\x1b]0;owned\x07\x1b[2J",)
    )
    text = of_file(wheel)
    assert text == "MIT\\x1b]0;owned\\x07\\x1b[2J"
    assert not [c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0]
    assert not judge(text).open


def test_an_sdist_licence_comes_from_its_pkg_info(tmp_path: Path) -> None:
    sdist = build_sdist(tmp_path, "pylatexenc", "2.10")
    assert of_file(sdist) == ""  # the fixture's PKG-INFO declares none: read, and empty


@pytest.mark.parametrize(
    ("text", "name", "is_open"),
    [
        ("MIT OR Apache-2.0", "MIT OR Apache-2.0", True),
        (
            "(Apache-2.0 WITH LLVM-exception) AND BSD-3-Clause",
            "(Apache-2.0 WITH LLVM-exception) AND BSD-3-Clause",
            True,
        ),
        ("bsd-3-clause", "BSD-3-Clause", True),
        ("MIT License; Apache Software License", "MIT OR Apache-2.0", True),
        ("LicenseRef-Vendor-EULA", "LicenseRef-Vendor-EULA", False),
        ("MIT AND Some-Custom-1.0", "MIT AND Some-Custom-1.0", False),
        ("", "unknown", False),
    ],
)
def test_judge(text: str, name: str, is_open: bool) -> None:
    v = judge(text)
    assert (v.name, v.open) == (name, is_open)
    assert bool(v.why) is not is_open


def test_every_entry_of_the_licence_table_matches_its_own_sample() -> None:
    entries = table()
    for alias in entries["aliases"]:
        v = judge(alias["text"])
        assert v.open and v.name == alias["spdx"], alias
        assert alias["spdx"] in entries["open"], alias
    for mark in entries["review"]:
        v = judge(mark["sample"])
        assert not v.open and v.why == mark["why"], mark
