"""Whether a prebuilt wheel was built for the stack it joins: the torch minor, the CUDA major and
the C++ ABI it was compiled against, from its name where it says (flash-attn's
`+cu130torch2.11`, `+cu12torch2.8cxx11abiFALSE`) and from its compiled libraries always (the
CUDA runtime they link, the libtorch symbols they import). A file name without a label
(verl's wheelhouse: `flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl`, rebuilt under the same
name when its matrix moves) is checked by its libraries alone."""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.wheel.elf import NotElfError, read_elf

_LABEL = re.compile(r"cu(?P<cuda>\d+)torch(?P<torch>\d+\.\d+)(?:cxx11abi(?P<abi>TRUE|FALSE))?")
_CUDART = re.compile(r"libcudart\.so\.(\d+)")
_TORCH_SYMBOL = ("_ZN3c10", "_ZN2at", "_ZN5torch", "_ZNK3c10", "_ZNK2at")


@dataclass(frozen=True)
class Expect:
    """What a prebuilt extension must have been built against (a profile's `expect`)."""

    torch: str | None = None  # "2.11": torch's minor
    cuda: str | None = None  # "13": the CUDA major ("13.0": major and minor, where named)
    cxx11abi: bool | None = None

    def describe(self) -> str:
        parts = []
        if self.torch:
            parts.append(f"torch {self.torch}")
        if self.cuda:
            parts.append(f"CUDA {self.cuda}")
        if self.cxx11abi is not None:
            parts.append(f"cxx11abi {'TRUE' if self.cxx11abi else 'FALSE'}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Built:
    """What was found: None where the file does not say."""

    torch: str | None = None
    cuda: str | None = None
    cxx11abi: bool | None = None


def from_name(filename: str) -> Built:
    """The local label of a wheel's version, where it has one."""
    version = filename.split("-")[1] if filename.count("-") >= 4 else ""
    m = _LABEL.search(version.partition("+")[2])
    if m is None:
        return Built()
    abi = m.group("abi")
    return Built(m.group("torch"), m.group("cuda"), None if abi is None else abi == "TRUE")


def from_libraries(wheel: Path) -> Built:
    """The CUDA major its extensions link (libcudart.so.N) and the C++ ABI of the libtorch
    symbols they import (`__cxx11` in them: the new ABI)."""
    cuda: str | None = None
    abi: bool | None = None
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not re.search(r"\.so(\.\d+)*$", name):
                continue
            try:
                facts = read_elf(zf.read(name))
            except NotElfError:
                continue
            for lib in facts.needed:
                m = _CUDART.fullmatch(lib)
                if m:
                    cuda = m.group(1)
            torch_symbols = [s for s in facts.imported if s.startswith(_TORCH_SYMBOL)]
            if torch_symbols:
                abi = any("__cxx11" in s for s in torch_symbols) or bool(abi)
    return Built(None, cuda, abi)


def _cuda_matches(expected: str, found: str) -> bool:
    """`13` matches cu13 and cu130; `13.0` matches cu130, and cu13 (a label of the major)."""
    major, _, minor = expected.partition(".")
    if len(found) <= len(major):  # a label or library of the major only
        return found == major
    return found.startswith(major) and (not minor or found == major + minor)


def mismatch(expect: Expect, built: Built, where: str) -> str | None:
    """Why `built` is not what `expect` asks, in words; None when nothing disagrees."""
    if expect.torch and built.torch and built.torch != expect.torch:
        return f"{where} says torch {built.torch}, the stack has torch {expect.torch}"
    if expect.cuda and built.cuda and not _cuda_matches(expect.cuda, built.cuda):
        return f"{where} says CUDA {built.cuda}, the stack has CUDA {expect.cuda}"
    known = expect.cxx11abi is not None and built.cxx11abi is not None
    if known and built.cxx11abi != expect.cxx11abi:
        return (
            f"{where} says cxx11abi {'TRUE' if built.cxx11abi else 'FALSE'}, the stack's "
            f"torch is cxx11abi {'TRUE' if expect.cxx11abi else 'FALSE'}"
        )
    return None


def check(expect: Expect, filename: str, wheel: Path | None) -> tuple[str | None, str]:
    """(why it does not fit or None, what could be checked): the name first, then the
    libraries when the wheel is here."""
    named = from_name(filename)
    why = mismatch(expect, named, "its name")
    if why or wheel is None:
        return why, "its name" if named != Built() else "nothing (no label, not downloaded)"
    libs = from_libraries(wheel)
    why = mismatch(expect, libs, "its libraries")
    checked = []
    if named != Built():
        checked.append("its name")
    if libs.cuda or libs.cxx11abi is not None:
        checked.append("its libraries (" + _libs_words(libs) + ")")
    if expect.torch and not named.torch:
        checked.append(f"not its torch minor (its name does not say; torch {expect.torch} asked)")
    return why, "; ".join(checked) or "nothing (no label, no CUDA library)"


def _libs_words(b: Built) -> str:
    words = []
    if b.cuda:
        words.append(f"libcudart.so.{b.cuda}")
    if b.cxx11abi is not None:
        words.append(f"cxx11abi {'TRUE' if b.cxx11abi else 'FALSE'}")
    return ", ".join(words)
