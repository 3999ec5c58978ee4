"""Just enough TOML writing for the files we generate (pylock.toml, uv's project file)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any


def string(value: str) -> str:
    # JSON's string escapes are valid TOML basic-string escapes.
    return json.dumps(value)


def key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else string(name)


def value(v: Any) -> str:
    """An inline TOML value: bool, int, float, str, list or inline table."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        items = ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def assign(name: str, v: Any) -> str:
    return f"{key(name)} = {value(v)}"
