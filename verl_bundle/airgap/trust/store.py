"""Where the installed verifier lives, and the state it keeps: one directory, the trust root.

    ROOT/bin/verl-bundle-verify   the command (sh: this copy's python, isolated, on ROOT/lib)
    ROOT/lib/verl_bundle/...      the verifier's code: the approved bundle's lib/, byte for byte
    ROOT/lib.prev/                the code before the last --upgrade
    ROOT/allowed_signers          the approver's keys (ssh allowed-signers, or a GPG keyring)
    ROOT/VERIFIER.json            which bundle the code came from
    ROOT/accepted.json            per line of bundles, the highest release accepted

ROOT is /opt/verl-bundle unless --root names another (a non-root site, a test). Nothing in it,
and no directory above it, may be writable by a user other than root or its owner: a store
another user could write is no root of trust, so the verifier refuses to use it. Standard
library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import tempfile
from typing import Any

from verl_bundle.airgap.errors import ServerNotReadyError, UsageError
from verl_bundle.airgap.trust.release import Release, write_json

DEFAULT_ROOT = "/opt/verl-bundle"
PROGRAM = "verl-bundle-verify"
LIB, PREV, BIN = "lib", "lib.prev", "bin"
SIGNERS, VERIFIER, ACCEPTED = "allowed_signers", "VERIFIER.json", "accepted.json"
# The verifier's package inside lib/, run as a directory by the command.
ENTRY = ("verl_bundle", "airgap", "trust")


def _unsafe_dir(path: str, sticky_ok: bool) -> str | None:
    st = os.stat(path)
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} belongs to uid {st.st_uid}, not to root or this user"
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


class Store:
    """The trust root at `root` (see the module's docstring). Reading never creates it."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def program(self) -> str:
        return self.path(BIN, PROGRAM)

    @property
    def signers(self) -> str:
        return self.path(SIGNERS)

    def installed(self) -> dict[str, Any] | None:
        """VERIFIER.json: which bundle the code came from; None when none is installed."""
        try:
            with open(self.path(VERIFIER), encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    # -- whether it can be trusted -------------------------------------------------------------

    def parents_unsafe(self) -> str | None:
        """Why a directory above the root could let another user replace it (every component
        of its real path: owned by root or this user, writable by no one else unless sticky)."""
        real = os.path.realpath(os.path.dirname(self.root))
        parts = real.split(os.sep)
        for i in range(1, len(parts) + 1):
            folder = os.sep.join(parts[:i]) or os.sep
            if os.path.isdir(folder):
                why = _unsafe_dir(folder, sticky_ok=True)
                if why:
                    return why
        return None

    def unsafe(self) -> str | None:
        """Why this store cannot be trusted: a parent, the root, or anything in it another
        user could write (or owns); a link anywhere in it. None when it can."""
        why = self.parents_unsafe()
        if why:
            return why
        if os.path.islink(self.root):
            return f"{self.root} is a symbolic link"
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in [*dirnames, *filenames]:
                if os.path.islink(os.path.join(dirpath, name)):
                    return f"{os.path.join(dirpath, name)} is a symbolic link"
            why = _unsafe_dir(dirpath, sticky_ok=False)
            for name in filenames:
                why = why or _unsafe_dir(os.path.join(dirpath, name), sticky_ok=False)
            if why:
                return why
        return None

    def require_safe(self) -> None:
        """ServerNotReadyError (exit 4) naming what makes the store untrustworthy."""
        why = self.unsafe()
        if why:
            raise ServerNotReadyError(
                f"{PROGRAM}: the trust root {self.root} cannot be trusted: {why}. Make it "
                "root's (chown -R root: and chmod -R go-w), or install the verifier again"
            )

    # -- the releases accepted -----------------------------------------------------------------

    def accepted(self) -> dict[str, Release]:
        """line -> the highest release accepted of it. A record that is there but cannot be
        read is refused (exit 4), never taken as "nothing accepted yet"."""
        if not os.path.lexists(self.path(ACCEPTED)):
            return {}
        try:
            with open(self.path(ACCEPTED), encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ServerNotReadyError(
                f"{PROGRAM}: cannot read {self.path(ACCEPTED)} ({exc}): the releases accepted "
                "before are unknown, so no downgrade could be refused; restore it from a backup"
            ) from None
        lines = doc.get("lines") if isinstance(doc, dict) else None
        out = {}
        for line, entry in (lines or {}).items():
            rel = Release.from_dict(entry)
            if rel is not None:
                out[line] = rel
        return out

    def accept(self, rel: Release) -> str | None:
        """Record `rel` as accepted when it is the highest of its line; a note when the store
        cannot be written by this user (the check stands; nothing is recorded)."""
        lines = self.accepted()
        if rel.line in lines and lines[rel.line].release >= rel.release:
            return None
        lines[rel.line] = rel
        doc = {"lines": {k: v.to_dict() for k, v in sorted(lines.items())}}
        try:
            write_json(self.path(ACCEPTED), doc)
        except OSError as exc:
            return f"not recorded as accepted ({self.path(ACCEPTED)}: {exc.strerror or exc})"
        return None

    # -- installing the code --------------------------------------------------------------------

    def create(self, signers: bytes) -> None:
        """A new store: the root (parents checked first) and the approver's keys."""
        why = self.parents_unsafe()
        if why:
            raise UsageError(f"{PROGRAM}: cannot make the trust root in {self.root}: {why}")
        if self.installed() is not None:
            raise UsageError(
                f"{PROGRAM}: a verifier is installed in {self.root} already; upgrade it with "
                f"{self.program} --upgrade NAME.tar (it checks the new bundle first)"
            )
        if os.path.lexists(self.root) and os.listdir(self.root):
            raise UsageError(f"{PROGRAM}: {self.root} is not empty; give --root a new directory")
        os.makedirs(self.path(BIN), mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)  # noqa: S103 - every user runs the verifier; none writes
        os.chmod(self.path(BIN), 0o755)  # noqa: S103 - as above
        _write(self.signers, signers, 0o644)

    def install_lib(self, files: dict[str, bytes]) -> None:
        """`files` (paths under lib/ -> their bytes, each checked by the caller) as ROOT/lib:
        written into a new directory of its own, then renamed in place; the old code is kept
        as lib.prev."""
        stage = tempfile.mkdtemp(prefix=".lib.partial-", dir=self.root)
        try:
            for rel, data in sorted(files.items()):
                parts = rel.split("/")
                if any(p in ("", ".", "..") for p in parts):
                    raise UsageError(f"{PROGRAM}: lib/{rel}: not a plain path")
                folder = os.path.join(stage, *parts[:-1])
                os.makedirs(folder, mode=0o755, exist_ok=True)
                _write(os.path.join(folder, parts[-1]), data, 0o644)
            for dirpath, _, _ in os.walk(stage):
                os.chmod(dirpath, 0o755)  # noqa: S103 - read by every user, written by none
            if os.path.isdir(self.path(LIB)):
                shutil.rmtree(self.path(PREV), ignore_errors=True)
                os.replace(self.path(LIB), self.path(PREV))
            os.replace(stage, self.path(LIB))
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def write_program(self, python: str, origin: Release) -> None:
        """ROOT/bin/verl-bundle-verify: this python, isolated, on ROOT/lib (never on the
        bundle being checked)."""
        entry = self.path(LIB, *ENTRY)
        text = (
            "#!/bin/sh\n"
            f"# {PROGRAM}, installed from {origin.name} (release {origin.release}). It checks a\n"
            "# bundle with this code and the allowed signers beside it, never with the bundle's "
            "own;\n"
            f"# upgrade it with: {PROGRAM} --upgrade NAME.tar (the new bundle is checked first).\n"
            f"exec {shlex.quote(python)} -I -B {shlex.quote(entry)} "
            f'--root {shlex.quote(self.root)} "$@"\n'
        )
        tmp = self.program + ".partial"
        if os.path.lexists(tmp):
            os.remove(tmp)
        _write(tmp, text.encode(), 0o755)
        os.replace(tmp, self.program)

    def write_origin(self, origin: Release, signer: str, python: str) -> None:
        doc = {**origin.to_dict(), "signer": signer, "python": python}
        write_json(self.path(VERIFIER), doc)


def _write(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)  # whatever the umask
