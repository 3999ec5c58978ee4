"""flash-attn from every source users use: a profile's direct artifacts for one package tried in
the order listed, each checked against the stack's torch / CUDA / C++ ABI (fetch/origin.py) by
its name's label and by its compiled libraries (fetch/elf.py: the CUDA runtime they link, the
libtorch symbols they import), before the resolver's own pick (the sdist) is the fallback.
The libraries are real ELF files made by gcc here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, Stack
from support.cli import run
from support.pkgindex import Server, build_wheel

from verl_bundle.resolve.lock import read_lock
from verl_bundle.wheel.elf import NotElfError, read_elf
from verl_bundle.wheel.origin import Built, Expect, check, from_libraries, from_name, mismatch

CU118 = (ROOT / "profiles" / "cu118-legacy.toml").read_text()
# A libtorch symbol as a new-ABI (cxx11abi TRUE) extension imports it: c10's check failure,
# taking a std::__cxx11::basic_string. A valid C identifier, so gcc can call it.
NEW_ABI = (
    "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
)
OLD_ABI = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc makes the test's ELF files")


def extension(tmp_path: Path, cuda: int, symbol: str) -> bytes:
    """A shared library like flash_attn_2_cuda.so: it needs libcudart.so.CUDA and imports
    `symbol` (left undefined, as libtorch's symbols are in a real extension)."""
    lib = tmp_path / f"cudart{cuda}"
    lib.mkdir(parents=True)
    (lib / "cudart.c").write_text("int cudaRuntimeGetVersion(int *v) { *v = 0; return 0; }\n")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            f"-Wl,-soname,libcudart.so.{cuda}",
            "-o",
            str(lib / f"libcudart.so.{cuda}"),
            str(lib / "cudart.c"),
        ],
        check=True,
    )
    (lib / "libcudart.so").symlink_to(f"libcudart.so.{cuda}")
    (tmp_path / "ext.c").write_text(
        f"int cudaRuntimeGetVersion(int *v);\nvoid {symbol}(void);\n"
        f"int run(void) {{ int v; {symbol}(); return cudaRuntimeGetVersion(&v); }}\n"
    )
    out = tmp_path / f"ext{cuda}.so"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,--no-as-needed",
            "-o",
            str(out),
            str(tmp_path / "ext.c"),
            f"-L{lib}",
            "-lcudart",
        ],
        check=True,
    )
    return out.read_bytes()


@needs_gcc
def test_elf_says_what_an_extension_links_and_imports(tmp_path: Path) -> None:
    facts = read_elf(extension(tmp_path, 13, NEW_ABI))
    assert "libcudart.so.13" in facts.needed
    assert NEW_ABI in facts.imported
    with pytest.raises(NotElfError):
        read_elf(b"PK\x03\x04 not an ELF file")


def test_the_label_of_a_wheels_name() -> None:
    assert from_name("flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl") == Built(
        "2.11", "130", None
    )
    assert from_name(
        "flash_attn-2.8.3+cu12torch2.8cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    ) == Built("2.8", "12", False)
    assert from_name("flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl") == Built()


def test_what_disagrees_is_said() -> None:
    want = Expect(torch="2.11", cuda="13", cxx11abi=True)
    assert mismatch(want, Built("2.11", "130", None), "its name") is None
    assert mismatch(want, Built("2.11", "13", True), "its name") is None
    assert mismatch(want, Built("2.10", "13", True), "its name") == (
        "its name says torch 2.10, the stack has torch 2.11"
    )
    assert "says CUDA 12" in (mismatch(want, Built("2.11", "12", True), "its name") or "")
    assert "cxx11abi FALSE" in (mismatch(want, Built(None, None, False), "its libraries") or "")
    assert mismatch(Expect(cuda="13.0"), Built(None, "130"), "x") is None
    assert mismatch(Expect(cuda="13.0"), Built(None, "131"), "x") is not None


@needs_gcc
def test_a_wheel_without_a_label_is_judged_by_its_libraries(tmp_path: Path) -> None:
    """verl's wheelhouse names its flash-attn without torch or CUDA, and rebuilds the same name
    when its matrix moves: only the libraries tell a CUDA 12 or old-ABI build apart."""
    want = Expect(torch="2.11", cuda="13", cxx11abi=True)
    name = "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
    good = build_wheel(
        tmp_path / "good",
        "flash_attn",
        "2.8.3",
        tag="cp312-cp312-linux_x86_64",
        data={
            "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so": extension(
                tmp_path / "a", 13, NEW_ABI
            )
        },
    )
    why, checked = check(want, name, good)
    assert why is None
    assert "libcudart.so.13" in checked and "not its torch minor" in checked
    assert from_libraries(good) == Built(None, "13", True)
    cuda12 = build_wheel(
        tmp_path / "c12",
        "flash_attn",
        "2.8.3",
        tag="cp312-cp312-linux_x86_64",
        data={"flash_attn_2_cuda.so": extension(tmp_path / "b", 12, NEW_ABI)},
    )
    assert check(want, name, cuda12)[0] == "its libraries says CUDA 12, the stack has CUDA 13"
    old = build_wheel(
        tmp_path / "old",
        "flash_attn",
        "2.8.3",
        tag="cp312-cp312-linux_x86_64",
        data={"flash_attn_2_cuda.so": extension(tmp_path / "c", 13, OLD_ABI)},
    )
    assert "cxx11abi FALSE" in (check(want, name, old)[0] or "")


def _profile(tmp_path: Path, artifacts: str) -> Path:
    start = CU118.index('[[artifacts]]\npackage = "flash-attn"')
    end = CU118.index('[[artifacts]]\npackage = "vllm"')
    path = tmp_path / "ordered.toml"
    text = CU118[:start] + artifacts + CU118[end:]
    path.write_text(text.replace('name = "cu118-legacy"', 'name = "ordered"'))
    return path


ORDERED = """[[artifacts]]
package = "flash-attn"
location = "flash-attn-releases"
file = "gone/flash_attn-{version}+cu118torch2.1cxx11abiFALSE-{python_tag}-{python_tag}-linux_x86_64.whl"

[[artifacts]]
package = "flash-attn"
location = "flash-attn-releases"
file = "v{version}/flash_attn-{version}+cu118torch2.1cxx11abiFALSE-{python_tag}-{python_tag}-linux_x86_64.whl"
expect = { torch = "2.1", cuda = "11", cxx11abi = false }

"""


def test_artifacts_are_tried_in_order_until_one_is_there_and_fits(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pylock.toml"
    profile = _profile(tmp_path, ORDERED)
    result = run(stack.args("lock", out, tmp_path / "c", "--profile", str(profile)), capsys)
    assert result.code == 0, result.err
    flash = read_lock(out).package("flash-attn")
    assert flash is not None and flash.kind == "wheel"
    assert (
        flash.file.filename
        == "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    )
    assert "checked against torch 2.1, CUDA 11, cxx11abi FALSE: its name" in result.err


def test_a_file_that_does_not_fit_is_passed_over_for_the_sdist(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = ORDERED.replace('cuda = "11"', 'cuda = "12"')
    out = tmp_path / "pylock.toml"
    profile = _profile(tmp_path, wrong)
    result = run(stack.args("lock", out, tmp_path / "c", "--profile", str(profile)), capsys)
    assert result.code == 0, result.err
    flash = read_lock(out).package("flash-attn")
    assert flash is not None and flash.kind == "sdist"
    (note,) = [line for line in result.err.splitlines() if line.startswith("note: flash-attn:")]
    assert "is not available" in note  # the first, then the second that does not fit:
    assert "does not fit: its name says CUDA 118, the stack has CUDA 12" in note
    assert note.endswith("using flash_attn-2.5.8.tar.gz from pypi instead")


@needs_gcc
def test_a_label_less_file_of_another_cuda_is_passed_over(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = tmp_path / "host"
    build_wheel(
        host / "v2.5.8",
        "flash_attn",
        "2.5.8",
        tag="cp310-cp310-linux_x86_64",
        data={"flash_attn_2_cuda.so": extension(tmp_path / "e", 12, OLD_ABI)},
    )
    served = Server(host).start()
    try:
        plain = """[locations.wheelhouse]
type = "files"
url = "%s"

[[artifacts]]
package = "flash-attn"
location = "wheelhouse"
file = "v{version}/flash_attn-{version}-{python_tag}-{python_tag}-linux_x86_64.whl"
expect = { torch = "2.1", cuda = "11", cxx11abi = false }

""" % (served.url + "/files")
        profile = _profile(tmp_path, plain)
        out = tmp_path / "pylock.toml"
        result = run(stack.args("lock", out, tmp_path / "c", "--profile", str(profile)), capsys)
    finally:
        served.stop()
    assert result.code == 0, result.err
    flash = read_lock(out).package("flash-attn")
    assert flash is not None and flash.kind == "sdist"
    assert "does not fit: its libraries says CUDA 12, the stack has CUDA 11" in result.err
