"""Names that come from outside (a lock, an index page, a manifest, a profile) are checked here
before they become paths: a file name is one plain component, a bundle path is relative and
stays inside the bundle. Standard library only; the host imports the same functions."""

from __future__ import annotations

import re

from verl_bundle.airgap.errors import DamagedError

# Windows-reserved and control characters never appear in a wheel, sdist or bundle file name.
_BAD_CHARS = re.compile(r'[\x00-\x1f\x7f\\:*?"<>|]')


class UnsafeNameError(DamagedError, ValueError):
    """A name that would leave its folder or is not a plain file name."""


def plain_filename(name: str, where: str = "a file name") -> str:
    """`name` itself when it is one plain path component (no `/`, no `..`, no control
    characters); otherwise UnsafeNameError naming `where` it came from."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or name.startswith("-")
        or _BAD_CHARS.search(name)
        or name != name.strip()
    ):
        raise UnsafeNameError(f"{where}: {name!r} is not a plain file name")
    return name


def bundle_path(path: str, where: str = "a bundle path") -> str:
    """`path` itself when it is a relative POSIX path of plain components (e.g.
    `wheels/torch-2.6.0-....whl`), so that joining it to a directory stays inside it."""
    if not isinstance(path, str) or not path or path.startswith("/"):
        raise UnsafeNameError(f"{where}: {path!r} is not a relative path inside the bundle")
    for part in path.split("/"):
        plain_filename(part, where)
    return path
