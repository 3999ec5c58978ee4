"""Fetching a model or dataset repository with the real huggingface_hub client.

The revision asked for is resolved to its commit sha through the repository info, and every file
is downloaded at that commit into the client's own cache (under --cache-dir), so a rerun reuses
every finished file. Each file is then checked against what the Hub states: the LFS sha256 for
large files, the git blob id for the rest; a file for which the mirror states neither is hashed
here, pinned by that hash, and marked so in the manifest (`hash_by: host`). HF_ENDPOINT / --hf-endpoint (an intranet mirror) and
HF_TOKEN (gated repositories) are honoured; the token is never printed, logged or stored.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verl_bundle.credentials import Redactor, redact_url
from verl_bundle.errors import FetchError, UsageError

if TYPE_CHECKING:
    from verl_bundle.progress import Reporter

# Duplicate weight formats: dropped when the repository has safetensors (the default rule).
DUPLICATE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.h5", "*.msgpack", "*.onnx", "*.gguf")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
CHUNK = 1 << 20


@dataclass(frozen=True)
class AssetSpec:
    """`--model ID[@REV]` / `--dataset ID[@REV]`."""

    kind: str  # "model" or "dataset"
    repo_id: str
    revision: str = "main"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.repo_id}@{self.revision}"


def parse_spec(kind: str, text: str) -> AssetSpec:
    repo_id, _, revision = text.partition("@")
    if not _REPO_ID.match(repo_id) or ".." in repo_id or (_ and not revision):
        raise UsageError(
            f"--{kind} {text!r}: expected ID[@REVISION], e.g. Qwen/Qwen2.5-0.5B-Instruct@main"
        )
    return AssetSpec(kind, repo_id, revision or "main")


@dataclass(frozen=True)
class Hub:
    """Where and as whom to fetch: the endpoint (None: the client's default), the token
    (None: anonymous), and the client's cache directory."""

    endpoint: str | None
    token: str | None
    cache_dir: Path

    @classmethod
    def from_env(cls, endpoint: str | None, cache_dir: Path) -> Hub:
        token = os.environ.get("HF_TOKEN") or None
        return cls(endpoint or os.environ.get("HF_ENDPOINT") or None, token, cache_dir)

    @property
    def shown(self) -> str:
        return redact_url(self.endpoint) if self.endpoint else "the Hugging Face Hub"

    @property
    def redact(self) -> Redactor:
        secrets = [self.token] if self.token else []
        secrets += Redactor.for_urls([self.endpoint] if self.endpoint else []).secrets
        return Redactor(tuple(secrets))


@dataclass(frozen=True)
class FetchedFile:
    name: str  # the repository path
    path: Path  # the cached file
    sha256: str
    size: int
    hub_stated: bool = True  # False: the Hub stated no hash (no LFS sha256, no blob id)


@dataclass(frozen=True)
class Fetched:
    spec: AssetSpec
    commit: str
    files: tuple[FetchedFile, ...]


def select(names: list[str], allow: list[str], deny: list[str]) -> list[str]:
    """The repository files to fetch: --allow/--deny as the client matches them, and by
    default no duplicate weight formats when safetensors are there."""
    # The client's own matching (fnmatch, `dir/` means everything under it), as snapshot_download.
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]

    ignore = list(deny)
    if not allow and any(n.endswith(".safetensors") for n in names):
        ignore += DUPLICATE_WEIGHTS
    return sorted(filter_repo_objects(names, allow_patterns=allow or None, ignore_patterns=ignore))


def _git_blob_id(path: Path, size: int) -> str:
    h = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _error(spec: AssetSpec, hub: Hub, exc: BaseException) -> FetchError:
    """The client's exception as one line that says what to do."""
    from huggingface_hub import errors

    where = f"{spec.label} at {hub.shown}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, errors.RevisionNotFoundError):
        msg = f"{where}: revision {spec.revision!r} not found; give a branch, tag or commit sha"
    elif isinstance(exc, errors.GatedRepoError):
        how = "your HF_TOKEN has no access" if hub.token else "no HF_TOKEN is set"
        msg = (
            f"{where}: gated repository (HTTP {status}), {how}: accept its terms on the Hub "
            "with your account, then set HF_TOKEN to a read token"
        )
    elif isinstance(exc, errors.RepositoryNotFoundError):
        private = "" if hub.token else "; a private repository needs HF_TOKEN"
        msg = f"{where}: repository not found (HTTP {status}); check the id and --hf-endpoint{private}"
    elif status in (401, 403):
        how = "your HF_TOKEN has no access" if hub.token else "no HF_TOKEN is set"
        msg = f"{where}: access denied (HTTP {status}), {how}; set HF_TOKEN to a read token"
    elif isinstance(exc, errors.LocalEntryNotFoundError) or _unreachable(exc):
        msg = f"{where}: cannot reach the Hub ({_first_line(exc)}); {UNREACHABLE_FIX}"
    elif isinstance(exc, errors.HfHubHTTPError):
        msg = f"{where}: HTTP {status}; run again (finished files are cached)"
    else:  # a transfer that broke after it started: a rerun continues it
        msg = f"{where}: {_first_line(exc)}; run again (finished files are cached)"
    return FetchError(hub.redact(msg))


# What to do when the Hub cannot be reached at all: running again would fail the same way.
UNREACHABLE_FIX = (
    "behind a mirror of the Hub, give it with --hf-endpoint URL (or HF_ENDPOINT); without one, "
    "run this command on a host that reaches the Hub and carry the asset bundle in, or copy the "
    "model's directory to the server yourself and give verl its path "
    "(actor_rollout_ref.model.path=DIR) with HF_HUB_OFFLINE=1"
)

# Errors (and words in errors) that mean no connection was made: a name that does not resolve,
# a refused or timed-out connect, a proxy that refused the tunnel.
_NO_CONNECTION = re.compile(
    r"Name or service not known|nodename nor servname|Temporary failure in name resolution|"
    r"getaddrinfo failed|Connection refused|No route to host|Network is unreachable|"
    r"connect(ion)? time(d)? ?out|ProxyError",
    re.I,
)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) says the Hub's host was never reached."""
    seen: BaseException | None = exc
    for _ in range(8):  # the client wraps its HTTP library's error, which wraps the socket's
        if seen is None:
            return False
        if isinstance(seen, (ConnectionRefusedError, socket.gaierror)):
            return True
        if "Connect" in type(seen).__name__ or _NO_CONNECTION.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _client_errors() -> tuple[type[BaseException], ...]:
    """What the client raises for HTTP and network failures (its HTTP library differs by
    version: httpx2, httpx or requests)."""
    from huggingface_hub import errors

    found: list[type[BaseException]] = [errors.HfHubHTTPError, errors.LocalEntryNotFoundError]
    for module, name in (
        ("httpx2", "HTTPError"),
        ("httpx", "HTTPError"),
        ("requests", "RequestException"),
    ):
        try:
            found.append(getattr(__import__(module), name))
        except (ImportError, AttributeError):
            continue
    return (*found, OSError, ValueError)


def fetch(
    spec: AssetSpec, hub: Hub, allow: list[str], deny: list[str], reporter: Reporter
) -> Fetched:
    """Resolve `spec` to a commit, download the selected files at that commit, check them."""
    from huggingface_hub import HfApi, hf_hub_download

    failures = _client_errors()
    api = HfApi(endpoint=hub.endpoint, token=hub.token or False)
    try:
        info = api.repo_info(
            spec.repo_id, repo_type=spec.kind, revision=spec.revision, files_metadata=True
        )
    except failures as exc:
        raise _error(spec, hub, exc) from None
    commit = info.sha
    if not commit or not re.match(r"^[0-9a-f]{40}$", commit):
        raise FetchError(f"{spec.label} at {hub.shown}: the Hub gave no commit sha for it")
    siblings = {s.rfilename: s for s in getattr(info, "siblings", None) or []}
    names = select(list(siblings), allow, deny)
    if not names:
        raise UsageError(f"{spec.label}: no file left after --allow/--deny ({len(siblings)} in it)")
    total = sum(siblings[n].size or 0 for n in names)
    handle = reporter.start(f"{spec.kind} {spec.repo_id}", total)
    out = []
    try:
        for name in names:
            try:
                local = hf_hub_download(
                    spec.repo_id,
                    name,
                    repo_type=spec.kind,
                    revision=commit,
                    cache_dir=hub.cache_dir / "hub",
                    endpoint=hub.endpoint,
                    token=hub.token or False,
                )
            except failures as exc:
                raise _error(spec, hub, exc) from None
            out.append(_checked(spec, name, Path(str(local)), siblings[name]))
            reporter.advance(handle, out[-1].size)
    finally:
        reporter.done(handle)
    return Fetched(spec, commit, tuple(out))


def _checked(spec: AssetSpec, name: str, path: Path, sibling: Any) -> FetchedFile:
    """The file as the Hub states it: size, then the LFS sha256 or the git blob id. A file
    that differs is removed from the cache (a rerun downloads it again) and reported."""
    real = path.resolve()
    size = real.stat().st_size
    digest = _sha256(real)
    lfs = sibling.lfs
    expected_size = lfs.size if lfs else sibling.size
    bad = ""
    if expected_size is not None and size != expected_size:
        bad = f"size {size}, the Hub states {expected_size}"
    elif lfs is not None and digest != lfs.sha256:
        bad = f"sha256 {digest}, the Hub states {lfs.sha256}"
    elif lfs is None and sibling.blob_id and _git_blob_id(real, size) != sibling.blob_id:
        bad = f"git blob id {_git_blob_id(real, size)}, the Hub states {sibling.blob_id}"
    if bad:
        real.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        raise FetchError(
            f"{spec.label}: {name}: hash mismatch ({bad}); the cached copy was removed: run again, "
            "and if it repeats, the mirror serves a different file than it lists"
        )
    return FetchedFile(name, real, digest, size, lfs is not None or bool(sibling.blob_id))
