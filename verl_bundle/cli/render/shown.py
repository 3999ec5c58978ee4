"""The one value every command renders to (`Shown`), the envelope of a failed command, and the
size words every renderer uses. The renderers (results.py, crossing.py, profile.py) import it;
it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verl_bundle.airgap.render import dumps, envelope

if TYPE_CHECKING:
    from verl_bundle.airgap.checks import Verdict


@dataclass(frozen=True)
class Shown:
    """A command's result for both audiences: `text` (stdout; its last line is what a script
    wants, e.g. a path, or the verdict), `notes` (stderr, text mode only), `result` (the JSON
    result) and, for the commands that end with one, the `verdict` (airgap/checks.py), whose
    code is the exit code."""

    command: str
    ok: bool
    result: Any
    text: str
    notes: tuple[str, ...] = ()
    verdict: Verdict | None = None

    def json(self) -> str:
        return dumps(envelope(self.command, self.ok, self.result, self.verdict))


def error_json(command: str, message: str, exit_code: int) -> str:
    """A failed command's envelope (`--json`): `ok` false, no result, and the one-line message
    with the exit code, so that stdout is always one document."""
    doc = envelope(command, False, None)
    doc["error"] = {"message": message, "exit_code": exit_code}
    return dumps(doc)


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"
