"""Checked reading of a profile's TOML tables: every key looked up through a `Table` is
checked, and a bad value is one `ProfileError` naming the file and the key. The profile's
own shape (which keys, which tables) is `profile_load`'s."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from verl_bundle.errors import ProfileError


class Table:
    """A TOML table being read: every access is checked, every unknown key is an error."""

    def __init__(self, path: Path, data: Mapping[str, Any], prefix: str = "") -> None:
        self.path = path
        self.data = data
        self.prefix = prefix

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def fail(self, name: str, expected: str) -> ProfileError:
        return ProfileError(f"{self.path}: key '{self.key(name)}': {expected}")

    def check_keys(self, allowed: set[str]) -> None:
        for k in self.data:
            if k not in allowed:
                raise ProfileError(
                    f"{self.path}: unknown key '{self.key(k)}'; expected one of: "
                    + ", ".join(sorted(allowed))
                )

    def text(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        if name not in self.data:
            if required:
                raise self.fail(name, "is required (a string)")
            return default
        value = self.data[name]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, f"expected a non-empty string, found {value!r}")
        return value.strip()

    def texts(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(name, f"expected a list of strings, found {value!r}")
        return tuple(v.strip() for v in value)

    def flag(self, name: str, default: bool) -> bool:
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, found {value!r}")
        return value

    def table(self, name: str) -> Table:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(name, f"expected a table, found {value!r}")
        return Table(self.path, value, f"{self.key(name)}.")

    def tables(self, name: str) -> list[Table]:
        value = self.data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(name, f"expected an array of tables ([[{self.key(name)}]])")
        return [Table(self.path, v, f"{self.key(name)}[{i}].") for i, v in enumerate(value)]

    def str_map(self, name: str) -> dict[str, str]:
        t = self.table(name)
        out = {}
        for k, v in t.data.items():
            if not isinstance(v, str):
                raise t.fail(k, f"expected a string, found {v!r}")
            out[k] = v
        return out


def read_requirement(t: Table, name: str, index: int, text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        detail = str(exc).splitlines()[0]
        raise ProfileError(
            f"{t.path}: key '{t.key(name)}[{index}]': {text!r} is not a PEP 508 requirement "
            f"({detail}); write it like 'torch==2.1.2' or 'verl[vllm]>=0.2'"
        ) from None


def read_requirements(t: Table, name: str) -> tuple[str, ...]:
    return tuple(str(read_requirement(t, name, i, r)) for i, r in enumerate(t.texts(name)))


def read_specifier(t: Table, name: str) -> str | None:
    value = t.text(name)
    if value is None:
        return None
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise t.fail(name, f"{value!r} is not a version specifier (e.g. '>=3.8,<3.12')") from None
    return value


def read_version(t: Table, name: str, *, required: bool = False) -> str | None:
    value = t.text(name, required=required)
    if value is None:
        return None
    try:
        Version(value)
    except InvalidVersion:
        raise t.fail(name, f"{value!r} is not a version (e.g. '11.8')") from None
    return value


def read_cutoff(t: Table, name: str) -> str | None:
    value = t.data.get(name)
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise t.fail(name, f"{value!r} is not a date (e.g. 2025-03-01)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
    else:
        raise t.fail(name, f"expected a date such as 2025-03-01, found {value!r}")
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
