"""Names inside a bundle. Kept for the readers not yet moved to `manifest`; the names live there."""

from __future__ import annotations

import json
from typing import Any

from verl_bundle.airgap.manifest import (
    BOOTSTRAP,
    INSTALL,
    LIB,
    LOCK,
    MANIFEST,
    REQUIREMENTS,
    SCHEMA,
    SOURCES,
    SUMS,
    WHEELS,
    find_root,
    load,
    to_dict,
)

MANIFEST_FORMAT = SCHEMA
__all__ = [
    "BOOTSTRAP",
    "INSTALL",
    "LIB",
    "LOCK",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "REQUIREMENTS",
    "SOURCES",
    "SUMS",
    "WHEELS",
    "find_root",
    "read_manifest",
]


def read_manifest(root: str) -> dict[str, Any]:
    """The manifest as a checked JSON document (typed reading first, so that a bad or newer
    manifest is refused in one line)."""
    doc: dict[str, Any] = json.loads(json.dumps(to_dict(load(root))))
    return doc
