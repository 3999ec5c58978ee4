"""The one render path: every command's result as text for people or as JSON for machines.

JSON output is one envelope with a schema number, so that scripts (rehearse, benchmarks, fleet
reports) can tell which shape they read. Standard library only: the host CLI and the server
tools both render through here.
"""

from __future__ import annotations

import json
from typing import Any

JSON_SCHEMA = 1  # the envelope's version; bump when a result's shape changes incompatibly


def envelope(command: str, ok: bool, result: Any) -> dict[str, Any]:
    """{"schema": 1, "command": "doctor", "ok": true, "result": {...}}"""
    return {"schema": JSON_SCHEMA, "command": command, "ok": ok, "result": result}


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=False)
