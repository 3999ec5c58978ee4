"""A bundle's release number, and what was installed or accepted before it.

Every manifest carries `release` (an integer, covered by both signatures): `build --release N`,
else the lock's time as YYYYMMDDhhmmss, so a later bundle of a line has a higher one and a
rebuild of one lock the same. An install records the bundle it installed in
`<prefix>/.verl-bundle/release.json`; a bundle older than that is refused there (by install.sh,
against accidents) and by the installed verifier (against forgery), unless the operator asks
for the downgrade. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import manifest as mf

RECORD = "release.json"  # in <prefix>/.verl-bundle/, written by the install


def of_time(created: str) -> int:
    """The default release of a bundle made from a lock of time `created` (ISO 8601, UTC):
    its digits as YYYYMMDDhhmmss; 0 when there is no time."""
    digits = "".join(c for c in created[:19] if c.isdigit())
    return int(digits) if len(digits) == 14 else 0


def line_of(m: mf.Manifest) -> str:
    """The line a bundle belongs to: bundles of one line replace each other (profile, Python
    tag and platform), so their releases are compared."""
    return f"{m.profile.name}/{m.target.python_tag}/{m.target.platform}"


@dataclass(frozen=True)
class Release:
    """One bundle, as an install or the verifier recorded it."""

    name: str
    release: int
    line: str
    manifest_sha256: str

    @classmethod
    def of(cls, m: mf.Manifest, manifest_sha256: str) -> Release:
        return cls(m.name, m.release, line_of(m), manifest_sha256)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "release": self.release,
            "line": self.line,
            "manifest_sha256": self.manifest_sha256,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> Release | None:
        """None for anything that is not a record of this shape."""
        if not isinstance(doc, dict):
            return None
        number = doc.get("release")
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            return None
        name, line, sha = (doc.get(k) for k in ("name", "line", "manifest_sha256"))
        if not (isinstance(name, str) and isinstance(line, str) and isinstance(sha, str)):
            return None
        return cls(name, number, line, sha)


def manifest_sha256(root: str) -> str:
    with open(os.path.join(mf.find_root(root), mf.MANIFEST), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def installed(state_dir: str) -> Release | None:
    """What the install in this state directory recorded; None when it recorded nothing
    (a new prefix, or one installed before the record existed)."""
    try:
        with open(os.path.join(state_dir, RECORD), encoding="utf-8") as fh:
            return Release.from_dict(json.load(fh))
    except (OSError, ValueError):
        return None


def record(state: Confined, rel: Release) -> None:
    """Write the record whole or not at all; never through a link planted under its name."""
    state.write_atomic(RECORD, dumps(rel.to_dict()))
    state.chmod(RECORD, 0o644)  # readable whatever the umask: every later check reads it


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def write_json(path: str, doc: Any) -> None:
    """`doc` at `path`, atomically, through the one write helper (airgap/confined.py): a new
    file of its own renamed over the old one, no link followed on the way."""
    folder, name = os.path.split(path)
    with Confined(folder) as where:
        where.write_atomic(name, dumps(doc))
        where.chmod(name, 0o644)  # readable whatever the umask: every later check reads it


def downgrade(new: mf.Manifest, old: Release, where: str) -> str | None:
    """Why `new` must not replace `old` (installed or accepted at `where`): an older release,
    or no release over a numbered one; None when it may."""
    if new.release >= old.release:
        return None
    said = f"release {new.release}" if new.release else "no release number (an older build)"
    return (
        f"{new.name} is {said}, older than release {old.release} ({old.name}) {where}; "
        "nothing was installed. Install the newer bundle, or pass --allow-downgrade to install "
        "this one on purpose"
    )
