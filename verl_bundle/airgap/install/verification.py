"""The install's verification, overlapped with the install's own work.

The design (a phase never installs a file that fails its hash):
1. Before anything else runs (`begin`, the verify step): the two lists, lib/ (the code the
   installer runs) and the other files the host generated (requirements, install.sh) are
   hashed and checked against SHA256SUMS.
2. Then the payload is hashed in the order the install reads it - the bundled pip and uv, each
   phase's files in phase order, then the rest - on one thread per core, in large reads, while
   the doctor runs, the venv is made and the first phases install.
3. A step that reads bundle files first waits for exactly those (`require`): one that fails its
   hash stops the install (exit 3) before anything reads it. uv and pip check each wheel's hash
   again as they install it (--require-hashes).
4. Before post-install, `finish` waits for the rest and judges the whole bundle as `verify`
   does. The installer leaves nothing under final names when anything fails: a new prefix is
   emptied again (this run made everything in it); into an existing environment no phase
   starts before `finish` (so it is left as it was). A rerun with a good copy continues.
Any problem is reported from the full judgement, so the lines are the ones `verify` prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.bundle import Problem, Report, judge, parse_sums, scan, workers

READ = 4 << 20  # bytes per read: large reads, few system calls; hashlib drops the GIL on them


class Verification:
    """One bundle's files, hashed ahead of the install that reads them."""

    def __init__(self, bundle: str, m: mf.Manifest) -> None:
        self.root = mf.find_root(bundle)
        self.report = Report(self.root)
        self.files, self.texts = scan(self.root, self.report.problems)
        self.sums = parse_sums(self.texts.get(mf.SUMS, ""))
        self.digests: dict[str, str] = {}
        self._hashed = {path: threading.Event() for path in self.files}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        generated = {g.path for g in m.generated}
        self.first = [
            p
            for p in self.files
            if p in (mf.SUMS, mf.MANIFEST) or p in generated or p.startswith(mf.LIB + "/")
        ]
        self.later = _install_order(m, [p for p in self.files if p not in set(self.first)])
        self._next = 0
        self._judged: Report | None = None

    # -- hashing ---------------------------------------------------------------------------------

    def absent(self) -> list[str]:
        """The files SHA256SUMS lists that are not on disk (a truncated copy): known at once,
        before anything is hashed."""
        return sorted(p for p in self.sums if p not in self.files)

    def quick(self) -> Report:
        """The report for a copy with files missing, without hashing the rest first."""
        report = Report(self.root, len(self.sums), list(self.report.problems))
        report.problems += [Problem(p, "missing") for p in self.absent()]
        return report

    def begin(self) -> bool:
        """Hash the lists, lib/ and the generated files now; start hashing the rest behind
        the install. True when what was hashed now is intact (and no listed file is
        missing: then nothing more is hashed, see `quick`)."""
        if self.absent():
            return False
        with ThreadPoolExecutor(max_workers=workers()) as pool:
            for path, digest in zip(self.first, pool.map(self._hash, self.first)):
                self._done(path, digest)
        for _ in range(min(workers(), len(self.later))):
            threading.Thread(target=self._work, name="verify", daemon=True).start()
        return self.intact(self.first)

    def _work(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._next >= len(self.later):
                    return
                path = self.later[self._next]
                self._next += 1
            self._done(path, self._hash(path))

    def _hash(self, path: str) -> str:
        digest = hashlib.sha256()
        buf = bytearray(READ)
        view = memoryview(buf)
        try:
            with open(self.files[path], "rb", buffering=0) as fh:
                while not self._stop.is_set():
                    n = fh.readinto(buf)
                    if not n:
                        return digest.hexdigest()
                    digest.update(view[:n])
        except OSError as exc:
            return f"unreadable ({exc.strerror or exc})"
        return "not hashed (stopped)"

    def _done(self, path: str, digest: str) -> None:
        self.digests[path] = digest
        self._hashed[path].set()

    def stop(self) -> None:
        """Stop hashing (the install ended early); the threads end at their next read."""
        self._stop.set()

    # -- questions -------------------------------------------------------------------------------

    def intact(self, paths: Iterable[str]) -> bool:
        """Whether these files (hashed already) are on disk and match SHA256SUMS, whose own
        lines all parse, and which vouches for manifest.json. A file neither list names, a
        symbolic link, a line that is not '<sha256>  <path>' all count as damage here."""
        text = self.texts.get(mf.SUMS)
        if self.report.problems or text is None or not self.sums:
            return False
        if len([line for line in text.split("\n") if line]) != len(self.sums):
            return False  # an unreadable line (or one path twice): judge() says which
        if self.digests.get(mf.MANIFEST) != self.sums.get(mf.MANIFEST):
            return False
        return all(
            p in self.files and (p == mf.SUMS or self.digests.get(p) == self.sums.get(p))
            for p in paths
        )

    def require(self, paths: Iterable[str]) -> bool:
        """Wait until these bundle paths are hashed; True when every one is intact."""
        wanted = list(paths)
        for path in wanted:
            event = self._hashed.get(path)
            if event is not None:
                event.wait()
        return self.intact(wanted)

    def finish(self) -> Report:
        """Wait for every file and judge the whole bundle (the report `verify` would give)."""
        if self._judged is None:
            for event in self._hashed.values():
                event.wait()
            judge(self.report, dict(self.digests), self.texts)
            self._judged = self.report
        return self._judged


def _install_order(m: mf.Manifest, paths: list[str]) -> list[str]:
    """The payload in the order the install reads it: the bootstrap pip and uv, each phase's
    files in phase order, then the rest (the bundled CPython, which install.sh checked before
    the installer started, and anything the manifest does not list)."""
    rank = {f.path: 0 for f in m.bootstrap}
    for number, phase in enumerate(m.phases, start=1):
        for f in m.files_of(phase.name):
            rank.setdefault(f.path, number)
    last = len(m.phases) + 1
    return sorted(paths, key=lambda p: (rank.get(p, last), p))


def unlisted_code(bundle: str, m: mf.Manifest) -> list[str]:
    """Files under lib/ (code the installer runs) that the manifest does not list, __pycache__
    included: a planted sitecustomize.py or .pyc must not run."""
    listed = {g.path for g in m.generated}
    out = []
    lib = os.path.join(bundle, mf.LIB)
    for dirpath, dirnames, filenames in os.walk(lib):
        dirnames.sort()
        for name in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, name), bundle).replace(os.sep, "/")
            if rel not in listed:
                out.append(rel)
    return out


def empty_new_prefix(prefix: Confined, keep: bool) -> None:
    """Undo this run in a prefix that was new: remove everything in it but the bundled CPython
    install.sh unpacked there before the installer started, and the prefix itself unless it
    was there before (`keep`). Through the run's descriptor of the prefix: a link in it is
    removed, never followed."""
    for name in prefix.listdir():
        if name != "python":
            prefix.remove(name)
    if not keep and not prefix.listdir():
        with contextlib.suppress(OSError):
            os.rmdir(prefix.root)
