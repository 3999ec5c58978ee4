"""What an install leaves in <prefix>/.verl-bundle/ so that a rerun knows where it stands.

- `venv`: this installer made the venv (a --prefix without it is not ours to change);
- `done-<phase>`: the phase is installed, keyed by the content of its requirements file (every
  pin with its hash), so a rebuilt bundle with one pin changed reinstalls that phase;
- `started-<phase>`: the phase began and did not finish (killed, Ctrl-C, failure);
- `installed.json`: the distributions the bundle put there, so an upgrade removes what left;
- the logs (install.log, phase-<name>.log, checks.log).
Every write goes through one `Confined` of the state directory (airgap/confined.py): a link
planted under a marker's or a log's name is replaced or refused, never followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import IO

from verl_bundle.airgap.confined import Confined

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
        self.target = target
        self.dir = os.path.join(target, STATE)
        self._prefix: Confined | None = None  # the install's own, held open (attach)
        self._dir: Confined | None = None

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def exists(self) -> bool:
        return os.path.isdir(self.dir) and not os.path.islink(self.dir)

    def attach(self, prefix: Confined) -> None:
        """Write through the install's descriptor of the prefix (the one its lock holds)."""
        self._prefix = prefix

    @property
    def confined(self) -> Confined:
        """The state directory, made when missing; every write below goes through it."""
        if self._dir is None:
            prefix = self._prefix or Confined(self.target)
            self._dir = prefix.sub(STATE, make=True)
            if prefix is not self._prefix:
                prefix.close()
        return self._dir

    def create(self) -> None:
        self.confined  # noqa: B018 - made and opened

    def close(self) -> None:
        if self._dir is not None:
            self._dir.close()
            self._dir = None

    def write(self, name: str, text: str) -> None:
        """A file of the state directory, whole or not at all."""
        self.confined.write_atomic(name, text)

    def log(self, name: str, fresh: bool = False) -> IO[str]:
        """A log of the state directory to append to (`fresh`: a new one in its place)."""
        return self.confined.append(name, fresh)

    def remove(self, name: str) -> bool:
        """Remove a file, link or directory of the state directory (never a link's target)."""
        if self._dir is None and not self.exists():
            return False
        return self.confined.remove(name)

    def _read(self, name: str) -> str | None:
        """A marker's text; None when it is missing or not a regular file (a link or FIFO
        planted there is not read: not followed, never waited on)."""
        try:
            fd = os.open(self.path(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(os.dup(fd), encoding="utf-8", errors="replace") as fh:
                return fh.read(1 << 20).strip()
        except OSError:
            return None
        finally:
            os.close(fd)

    def _write(self, name: str, text: str) -> None:
        self.write(name, text + "\n")  # a marker is whole or absent, even after kill -9

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
        self.remove(f"started-{phase}")

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
