"""What an install leaves in <prefix>/.verl-bundle/ so that a rerun knows where it stands.

- `venv`: this installer made the venv (a --prefix without it is not ours to change);
- `done-<phase>`: the phase is installed, keyed by the content of its requirements file (every
  pin with its hash), so a rebuilt bundle with one pin changed reinstalls that phase;
- `started-<phase>`: the phase began and did not finish (killed, Ctrl-C, failure);
- `installed.json`: the distributions the bundle put there, so an upgrade removes what left;
- the logs (install.log, phase-<name>.log, checks.log).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

STATE = ".verl-bundle"
VENV_MARK = "venv"
INSTALLED = "installed.json"


def content_key(path: str) -> str:
    """The marker value of a phase: the sha256 of its requirements file."""
    with open(path, "rb") as fh:
        return "sha256:" + hashlib.sha256(fh.read()).hexdigest()


class State:
    """The state directory of one target environment. Reading never creates it."""

    def __init__(self, target: str) -> None:
        self.dir = os.path.join(target, STATE)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def exists(self) -> bool:
        return os.path.isdir(self.dir)

    def create(self) -> None:
        os.makedirs(self.dir, exist_ok=True)

    def _read(self, name: str) -> str | None:
        try:
            with open(self.path(name), encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError:
            return None

    def _write(self, name: str, text: str) -> None:
        tmp = self.path(name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        os.replace(tmp, self.path(name))  # a marker is whole or absent, even after kill -9

    # -- phases --------------------------------------------------------------------------------

    def done(self, phase: str, key: str) -> bool:
        return self._read(f"done-{phase}") == key

    def was_done(self, phase: str) -> bool:
        """Installed by an earlier run, whatever bundle it was (an upgrade changes the key)."""
        return os.path.exists(self.path(f"done-{phase}"))

    def interrupted(self, phase: str) -> bool:
        return os.path.exists(self.path(f"started-{phase}"))

    def start(self, phase: str) -> None:
        self._write(f"started-{phase}", "")

    def finish(self, phase: str, key: str) -> None:
        self._write(f"done-{phase}", key)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path(f"started-{phase}"))

    # -- the venv mark and what was installed -------------------------------------------------

    def made_venv(self) -> bool:
        return os.path.exists(self.path(VENV_MARK))

    def mark_venv(self, bundle: str) -> None:
        self._write(VENV_MARK, json.dumps({"made_by": "verl-bundle install.sh", "bundle": bundle}))

    def legacy_venv(self) -> bool:
        """A venv made by an earlier install.sh (before the mark existed): it left done-pip."""
        return os.path.exists(self.path("done-pip"))

    def installed(self) -> dict[str, str]:
        """name -> version of what the bundle installed (empty when unknown)."""
        text = self._read(INSTALLED)
        if not text:
            return {}
        try:
            doc = json.loads(text)
        except ValueError:
            return {}
        if not isinstance(doc, dict):
            return {}
        return {str(k): str(v) for k, v in doc.items()}

    def record_installed(self, dists: dict[str, str]) -> None:
        self._write(INSTALLED, json.dumps(dict(sorted(dists.items())), indent=1))
