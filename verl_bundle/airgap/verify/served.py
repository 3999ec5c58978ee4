"""Installing from one served copy: `install.sh --from URL` (and `python3 -m verl_bundle.airgap
install --from URL`), for a cluster whose nodes all read one extracted bundle served as it is
(`python3 -m http.server`, nginx) instead of each getting the tarball.

SHA256SUMS is read first; every file it lists is fetched into a local work directory, its
sha256 checked while it streams into `<file>.part`, which takes the file's name only when it
matches (a file already there with the right hash is kept, so a rerun continues). Then the
copy's own install.sh runs with the other options and checks everything once more, exactly as
for a copied tarball. Standard library only, Python 3.8+: install.sh's --from bootstrap
fetches this one file (checked against the sha256 install.sh carries) and runs it alone, so
nothing of verl_bundle is imported before the bundle's lib/ is fetched.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import unquote, urlsplit

SUMS = "SHA256SUMS"
EXECUTABLE = ("install.sh", "doctor")
# Fetched first, by these fixed names, so that every other name is checked by names.py.
CORE = (
    "lib/verl_bundle/__init__.py",
    "lib/verl_bundle/airgap/__init__.py",
    "lib/verl_bundle/airgap/errors.py",  # names.py's errors
    "lib/verl_bundle/airgap/contract/__init__.py",
)
NAMES = "lib/verl_bundle/airgap/contract/names.py"
CHUNK = 1 << 20
TIMEOUT = 60
MAX_SUMS = 64 << 20
EXIT_FAILED, EXIT_USAGE, EXIT_DAMAGED, EXIT_INTERRUPTED = 1, 2, 3, 130
_USE = (
    "give the http:// or https:// URL of an extracted, served bundle, e.g. "
    "http://head:8000/verl-bundle-cu121-cp310-manylinux_2_17_x86_64/"
)
_SUM_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


class TransferError(Exception):
    """Ends the fetch with an exit code and one line. This module runs alone (install.sh
    --from executes it before any of the bundle's lib/ is here), so it cannot import the
    server program's errors.py; its codes are the same table's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def redact(url: str) -> str:
    """`url` with the secret of its user info masked (`user:****@`, or `****@` for a token)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:****" if colon else "****"
    return parts._replace(netloc=f"{masked}@{host}").geturl()


class Source:
    """The served bundle: its base URL without credentials, and the Authorization header
    made from them (given in the URL as http://user:password@host/...)."""

    def __init__(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise TransferError(EXIT_USAGE, f"--from: {_USE}") from None
        shown = redact(parts._replace(query="", fragment="").geturl())
        self.shown = shown if shown.endswith("/") else shown + "/"  # names a file when joined
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransferError(
                EXIT_USAGE,
                f"--from {self.shown}: {_USE}",
            )
        userinfo, at, host = parts.netloc.rpartition("@")
        self.auth = ""
        if at:
            self.auth = "Basic " + base64.b64encode(unquote(userinfo).encode()).decode()
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        self.base = parts._replace(netloc=host, path=path, query="", fragment="").geturl()

    def open(self, rel: str, missing: int) -> Any:
        """The response for bundle path `rel`; TransferError(`missing`) when the server has no
        such file, TransferError(1) when it cannot be reached."""
        where = self.shown + rel
        url = self.base + urllib.request.pathname2url(rel)  # http(s), checked in __init__
        request = urllib.request.Request(url)  # noqa: S310
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - http(s) only
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise TransferError(missing, f"{where}: not found (HTTP 404)") from None
            if exc.code in (401, 403):
                raise TransferError(
                    EXIT_USAGE,
                    f"{where}: HTTP {exc.code}; give the server's credentials in the URL "
                    "(http://user:password@host/...)",
                ) from None
            raise TransferError(EXIT_FAILED, f"{where}: HTTP {exc.code} {exc.reason}") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransferError(
                EXIT_FAILED,
                f"cannot reach {self.shown}: {reason}; is the server up and reachable from this "
                "node? Run again to continue",
            ) from None


def read_sums(source: Source) -> tuple[bytes, dict[str, str]]:
    """SHA256SUMS as served, and path -> sha256 from it."""
    with source.open(SUMS, EXIT_USAGE) as resp:
        try:
            raw = resp.read(MAX_SUMS + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise TransferError(EXIT_FAILED, f"{source.shown}{SUMS}: {exc}") from None
    sums = {}
    for line in raw.decode("utf-8", "replace").split("\n"):  # as verify.parse_sums reads it
        m = _SUM_LINE.match(line)
        if m:
            sums[m.group(2)] = m.group(1).lower()
    if not sums or len(raw) > MAX_SUMS:
        raise TransferError(
            EXIT_USAGE, f"{source.shown}{SUMS} lists no file: no bundle is served there"
        )
    return raw, sums


def _sha256_of(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def fetch_file(source: Source, rel: str, sha256: str, work: str) -> int:
    """Bundle path `rel` into `work`, checked against `sha256` as it streams into a .part file
    that is renamed only when it matches. Returns the bytes fetched (0: it was there already)."""
    final = os.path.join(work, *rel.split("/"))
    if _sha256_of(final) == sha256:
        return 0
    os.makedirs(os.path.dirname(final), exist_ok=True)
    part = final + ".part"
    digest, size = hashlib.sha256(), 0
    try:
        with source.open(rel, EXIT_DAMAGED) as resp, open(part, "wb") as out:
            for block in iter(lambda: resp.read(CHUNK), b""):
                digest.update(block)
                out.write(block)
                size += len(block)
    except (OSError, http.client.HTTPException) as exc:
        _remove(part)
        raise TransferError(
            EXIT_FAILED, f"{source.shown}{rel}: {exc}; run again to continue"
        ) from None
    except BaseException:
        _remove(part)
        raise
    if digest.hexdigest() != sha256:
        _remove(part)
        raise TransferError(
            EXIT_DAMAGED,
            f"the served bundle is damaged: {rel} has sha256 {digest.hexdigest()}, "
            f"{SUMS} says {sha256}; nothing was installed. Copy the bundle to the server again",
        )
    os.replace(part, final)
    return size


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def prepare(work: str, raw_sums: bytes) -> None:
    """`work` new or empty, or an earlier fetch (it holds SHA256SUMS); then the served
    SHA256SUMS written into it, under its name only once complete."""
    if os.path.isdir(work) and os.listdir(work) and not os.path.isfile(os.path.join(work, SUMS)):
        raise TransferError(
            EXIT_USAGE,
            f"--work {work}: not empty and not a bundle fetched before; give a new directory",
        )
    os.makedirs(work, exist_ok=True)
    part = os.path.join(work, SUMS + ".part")
    with open(part, "wb") as fh:
        fh.write(raw_sums)
    os.replace(part, os.path.join(work, SUMS))


def sweep(work: str, listed: set[str]) -> None:
    """Remove what an earlier fetch of another bundle left in `work` (and stale .part files):
    the copy holds exactly what SHA256SUMS lists, as verify requires."""
    for dirpath, dirnames, filenames in os.walk(work, topdown=False):
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, work).replace(os.sep, "/")
            if rel != SUMS and rel not in listed:
                _remove(full)
        for name in dirnames:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(dirpath, name))  # only when empty


def _checked_names(work: str, sums: dict[str, str]) -> dict[str, str]:
    """`sums` with every path checked by the bundle's names.py (fetched first by fixed name)."""
    lib = os.path.join(work, "lib")
    if lib not in sys.path:
        sys.path.insert(0, lib)
    from verl_bundle.airgap.contract.names import UnsafeNameError, bundle_path

    try:
        return {bundle_path(rel, SUMS): sha for rel, sha in sums.items()}
    except UnsafeNameError as exc:
        raise TransferError(EXIT_DAMAGED, f"the served bundle is damaged: {exc}") from None


def fetch(source: Source, work: str, say: Any) -> tuple[int, int]:
    """The served bundle into `work`; returns (files fetched, bytes fetched)."""
    raw, sums = read_sums(source)
    prepare(work, raw)
    for rel in (*CORE, NAMES):
        if rel not in sums:
            raise TransferError(EXIT_DAMAGED, f"the served bundle is damaged: {SUMS} lacks {rel}")
    count = total = 0
    for rel in (*CORE, NAMES):
        got = fetch_file(source, rel, sums[rel], work)
        count, total = count + (got > 0), total + got
    checked = _checked_names(work, sums)
    for rel in sorted(checked):
        got = fetch_file(source, rel, checked[rel], work)
        count, total = count + (got > 0), total + got
    sweep(work, set(checked))
    for name in EXECUTABLE:
        if name in checked:
            os.chmod(os.path.join(work, name), 0o755)  # noqa: S103 - the bundle's entry scripts
    say(f"fetched {count} of {len(checked)} files ({total / 1e6:.1f} MB) into {work}")
    return count, total


def split_options(argv: list[str]) -> tuple[str | None, str | None, str | None, list[str]]:
    """(--from URL, --work DIR, --events FILE, the options passed on to install.sh)."""
    found: dict[str, str] = {}
    rest: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("--from", "--work", "--events"):
            if not eq:
                if not args:
                    raise TransferError(EXIT_USAGE, f"{name} needs a value")
                value = args.pop(0)
            found[name] = value
            if name != "--events":
                continue
            arg = f"--events={value}"
        rest.append(arg)
    return found.get("--from"), found.get("--work"), found.get("--events"), rest


def default_work(source: Source) -> str:
    """Per user and URL, so a rerun continues the same fetch."""
    key = hashlib.sha256(source.base.encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"verl-bundle-{os.getuid()}-{key}")


def _emit(events: str | None, **fields: Any) -> None:
    if not events:
        return
    from verl_bundle.airgap.contract.events import EventLog

    log = EventLog(events)
    log.emit("step", step="fetch", **fields)
    if fields.get("status") == "fail":
        code = fields.get("exit_code", EXIT_FAILED)
        log.emit("result", ok=False, exit_code=code, message=fields.get("detail", ""), log=None)
    log.close()


def main(argv: list[str]) -> int:
    """`--from URL [--work DIR] [install.sh options]` -> exit code."""

    def say(text: str) -> None:
        sys.stderr.write(f"install.sh: {text}\n")
        sys.stderr.flush()

    started = time.monotonic()
    events: str | None = None
    try:
        url, work, events, rest = split_options(argv)
        if url is None:
            raise TransferError(EXIT_USAGE, "--from URL: the URL of a served bundle is missing")
        source = Source(url)
        chosen = os.path.abspath(work) if work else default_work(source)
        say(f"fetching {source.shown} into {chosen}")
        _, total = fetch(source, chosen, say)
    except TransferError as exc:
        say(exc.message)
        with contextlib.suppress(ImportError, OSError):  # before lib/ or --events exists
            _emit(events, status="fail", detail=exc.message, exit_code=exc.code)
        return exc.code
    except KeyboardInterrupt:
        say("interrupted while fetching; run the same command again to continue")
        return EXIT_INTERRUPTED
    _emit(
        events,
        status="ok",
        seconds=round(time.monotonic() - started, 3),
        detail=f"{total} bytes from {source.shown}",
    )
    proc = subprocess.Popen(["/bin/sh", os.path.join(chosen, "install.sh"), *rest])
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            continue  # install.sh got the same Ctrl-C: it stops and says how to continue
    if code == 0 and work is None:
        shutil.rmtree(chosen, ignore_errors=True)  # the default copy; --work DIR is kept
    return code
