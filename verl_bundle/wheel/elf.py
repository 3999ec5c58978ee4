"""Just enough ELF reading to tell what a compiled extension was built against, without loading
it: the libraries it needs (DT_NEEDED: `libcudart.so.13` says CUDA 13) and the symbols it
imports (`__cxx11` in a mangled libtorch name says the new C++ ABI). 64-bit little-endian
only, which is every Linux x86_64 and aarch64 wheel."""

from __future__ import annotations

import struct
from dataclasses import dataclass

_DYNAMIC = 6  # SHT_DYNAMIC
_DYNSYM = 11  # SHT_DYNSYM
_NEEDED = 1  # DT_NEEDED
_UNDEF = 0  # SHN_UNDEF


class NotElfError(ValueError):
    """The bytes are not a 64-bit little-endian ELF file."""


@dataclass(frozen=True)
class ElfFacts:
    needed: tuple[str, ...]  # DT_NEEDED, in order
    imported: tuple[str, ...]  # undefined dynamic symbols (what it takes from its libraries)


def _string(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def read_elf(data: bytes) -> ElfFacts:
    if data[:4] != b"\x7fELF" or len(data) < 64:
        raise NotElfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise NotElfError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if base + 64 > len(data):
            raise NotElfError("truncated section table")
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, base
        )
        sections.append((kind, offset, size, link, entsize))

    def body(index: int) -> bytes:
        _, offset, size, _, _ = sections[index]
        return data[offset : offset + size]

    needed: list[str] = []
    imported: list[str] = []
    for kind, offset, size, link, entsize in sections:
        if kind == _DYNAMIC and link < len(sections):
            strings = body(link)
            for pos in range(offset, offset + size, entsize or 16):
                tag, value = struct.unpack_from("<qQ", data, pos)
                if tag == 0:
                    break
                if tag == _NEEDED:
                    needed.append(_string(strings, value))
        elif kind == _DYNSYM and link < len(sections):
            strings = body(link)
            for pos in range(offset + (entsize or 24), offset + size, entsize or 24):
                name, _, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, pos)
                if shndx == _UNDEF and name:
                    imported.append(_string(strings, name))
    return ElfFacts(tuple(needed), tuple(imported))
