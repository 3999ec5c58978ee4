"""Names inside a bundle, shared by the online side that writes it and the server that reads it."""

from __future__ import annotations

import json
import os
from typing import Any

SUMS = "SHA256SUMS"
MANIFEST = "manifest.json"
LOCK = "pylock.toml"
INSTALL = "install.sh"
WHEELS = "wheels"
SOURCES = "sources"
BOOTSTRAP = "bootstrap"
REQUIREMENTS = "requirements"
LIB = "lib"
MANIFEST_FORMAT = 1


def find_root(path: str) -> str:
    """The bundle directory: `path` itself, or the one bundle directory inside it."""
    if os.path.isfile(os.path.join(path, SUMS)) or os.path.isfile(os.path.join(path, MANIFEST)):
        return path
    if os.path.isdir(path):
        inner = [
            os.path.join(path, d)
            for d in sorted(os.listdir(path))
            if os.path.isfile(os.path.join(path, d, SUMS))
        ]
        if len(inner) == 1:
            return inner[0]
    return path


def read_manifest(root: str) -> dict[str, Any]:
    with open(os.path.join(root, MANIFEST), encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ValueError("not a verl-bundle manifest (format {!r})".format(data.get("format")))
    return data
