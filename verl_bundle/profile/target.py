"""The machine a bundle is for: its Python and platform, and the wheel tags it accepts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from verl_bundle.errors import UsageError

_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(x86_64|aarch64)$")
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_LINUX = re.compile(r"^linux_(x86_64|aarch64)$")


def parse_python(value: str) -> tuple[int, int]:
    """'3.10' -> (3, 10); anything else is a usage error."""
    m = re.fullmatch(r"3\.(\d{1,2})", value.strip())
    if not m:
        raise UsageError(f"--python: {value!r} is not a Python version; write it as X.Y, e.g. 3.10")
    return 3, int(m.group(1))


def normalize_platform(value: str) -> str:
    """Accept manylinux_2_17_x86_64, its legacy alias manylinux2014_x86_64, or linux_x86_64."""
    value = value.strip()
    for legacy, (major, minor) in _LEGACY.items():
        if value.startswith(legacy + "_"):
            arch = value[len(legacy) + 1 :]
            value = f"manylinux_{major}_{minor}_{arch}"
    if _MANYLINUX.match(value) or _LINUX.match(value):
        return value
    raise UsageError(
        f"platform {value!r} is not supported; use a Linux wheel platform tag such as "
        "manylinux_2_17_x86_64 or manylinux_2_28_aarch64"
    )


@dataclass(frozen=True)
class Target:
    """A CPython version on a Linux platform, e.g. cp310 on manylinux_2_17_x86_64."""

    python: tuple[int, int]
    platform: str

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"

    @property
    def python_tag(self) -> str:
        return f"cp{self.python[0]}{self.python[1]}"

    @property
    def arch(self) -> str:
        return "x86_64" if self.platform.endswith("x86_64") else "aarch64"

    @property
    def glibc(self) -> tuple[int, int] | None:
        m = _MANYLINUX.match(self.platform)
        return (int(m.group(1)), int(m.group(2))) if m else None

    @property
    def uv_platform(self) -> str:
        """The name `uv pip compile --python-platform` takes for this platform."""
        glibc = self.glibc
        if glibc is None:
            return f"{self.arch}-unknown-linux-gnu"
        return f"{self.arch}-manylinux_{glibc[0]}_{glibc[1]}"

    @cached_property
    def platform_tags(self) -> list[str]:
        """Platform tags from most to least specific, as pip on such a machine orders them."""
        tags: list[str] = []
        glibc = self.glibc
        if glibc is not None:
            major, top = glibc
            for minor in range(top, 4, -1):
                tags.append(f"manylinux_{major}_{minor}_{self.arch}")
                for legacy, version in _LEGACY.items():
                    if version == (major, minor):
                        tags.append(f"{legacy}_{self.arch}")
        tags.append(f"linux_{self.arch}")
        return tags

    @cached_property
    def tags(self) -> list[Tag]:
        """Every wheel tag the target accepts, best first."""
        platforms = self.platform_tags
        return [
            *cpython_tags(self.python, [self.python_tag], platforms),
            *compatible_tags(self.python, self.python_tag, platforms),
        ]

    @cached_property
    def _rank(self) -> dict[Tag, int]:
        return {tag: i for i, tag in enumerate(self.tags)}

    def wheel_rank(self, filename: str) -> int | None:
        """Position of the wheel's best tag in `tags` (lower is better); None if not installable."""
        _, _, _, wheel_tags = parse_wheel_filename(filename)
        ranks = [self._rank[t] for t in wheel_tags if t in self._rank]
        return min(ranks) if ranks else None

    def highest_glibc(self, filename: str) -> tuple[int, int] | None:
        """The glibc version a manylinux wheel needs on this target (None for pure/linux_ wheels)."""
        _, _, _, wheel_tags = parse_wheel_filename(filename)
        best: tuple[int, int] | None = None
        for tag in wheel_tags:
            m = _MANYLINUX.match(tag.platform)
            version: tuple[int, int] | None = None
            if m:
                version = (int(m.group(1)), int(m.group(2)))
            else:
                for legacy, v in _LEGACY.items():
                    if tag.platform.startswith(legacy + "_"):
                        version = v
            if version is not None and tag in self._rank and (best is None or version < best):
                best = version
        return best

    def markers(self, extra: str = "") -> dict[str, str]:
        """The PEP 508 marker environment of the target (CPython on Linux), for `extra`."""
        return {
            "python_version": self.python_version,
            "python_full_version": f"{self.python_version}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "implementation_version": f"{self.python_version}.0",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "platform_machine": self.arch,
            "platform_release": "",
            "platform_version": "",
            "extra": extra,
        }

    def describe(self) -> str:
        return f"{self.python_tag}/{self.platform}"
