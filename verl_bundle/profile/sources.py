"""Where a package comes from when it is not an index's file: a source tree (a checkout or a
fork, dirty or not), a wheel or sdist file, a git URL with a revision, or a released version.

`build --verl SPEC` and the profile's `verl = "SPEC"` name verl's; a profile requirement
`name @ file://...` or `name @ git+URL@rev` names another's. Parsing only: sources/sourcebuild.py
makes the wheel."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verl_bundle.credentials import redact_url, split_credentials
from verl_bundle.errors import UsageError

# The URL schemes git itself fetches from; uv's own git support has no git:// (a git daemon).
GIT_SCHEMES = ("https", "http", "file", "git", "ssh")
SDIST_SUFFIXES = (".tar.gz", ".tgz", ".zip")


@dataclass(frozen=True)
class Tree:
    """A source tree on this host: a checkout, a fork, an unpacked sdist."""

    path: Path

    def describe(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class WheelFile:
    path: Path

    def describe(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class SdistFile:
    path: Path

    def describe(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class Git:
    """A git repository (its URL as given, credentials and all: `clean` drops them) at a
    revision: a branch, a tag or a commit (abbreviated or whole); "" for the repository's HEAD."""

    url: str
    rev: str = ""
    asked: str = ""  # the revision named upstream, when `rev` is the commit it resolved to

    @property
    def clean(self) -> str:
        return split_credentials(self.url)[0]

    def describe(self) -> str:
        return f"git+{redact_url(self.url)}" + (f"@{self.rev}" if self.rev else "")


@dataclass(frozen=True)
class Release:
    """A version of the package on the default index (no build: the pin changes)."""

    version: str

    def describe(self) -> str:
        return self.version


SourceSpec = Tree | WheelFile | SdistFile | Git | Release
BUILT = (Tree, WheelFile, SdistFile, Git)  # the forms a wheel is made from on this host


def parse_spec(text: str, what: str) -> SourceSpec:
    """`--verl SPEC` (or a profile's `verl`) as a source; `what` names the option or key in the
    one line a bad SPEC gets."""
    text = text.strip()
    if not text:
        raise UsageError(
            f"{what} is empty; give a directory, a wheel or sdist, git+URL@REV or X.Y.Z"
        )
    if text.startswith("git+"):
        return parse_git(text[4:], what)
    if text.startswith("file:"):
        return _local(Path(unquote(urlsplit(text).path)), what)
    path = Path(text).expanduser()
    if path.exists() or "/" in text or text.endswith((".whl", *SDIST_SUFFIXES)):
        return _local(path, what)
    try:
        Version(text)
    except InvalidVersion:
        raise UsageError(
            f"{what} {text!r}: not a directory, a wheel or sdist file, a git URL (git+URL@REV) "
            "or a version; check the spelling or the path"
        ) from None
    return Release(text)


def _local(path: Path, what: str) -> SourceSpec:
    path = path.expanduser().absolute()
    if path.is_dir():
        return Tree(path)
    if not path.exists():
        raise UsageError(f"{what} {path}: no such file or directory")
    if path.name.endswith(".whl"):
        return WheelFile(path)
    if path.name.endswith(SDIST_SUFFIXES):
        return SdistFile(path)
    raise UsageError(
        f"{what} {path}: not a source tree (a directory), a wheel (.whl) or an sdist "
        "(.tar.gz, .zip)"
    )


def parse_git(text: str, what: str) -> Git:
    """`URL[@REV]` after `git+`, as PEP 508 and pip write it (`#subdirectory=` is not
    supported: one line says so)."""
    url, _, fragment = text.partition("#")
    if fragment and not fragment.startswith("egg="):
        raise UsageError(
            f"{what} {redact_url(url)}#{fragment}: a URL fragment (subdirectory=) is not "
            "supported; give the repository's root, or the tree as a directory"
        )
    parts = urlsplit(url)
    rev = ""
    path = parts.path
    if "@" in path:
        path, _, rev = path.rpartition("@")
    if parts.scheme not in GIT_SCHEMES or (parts.scheme != "file" and not parts.hostname):
        raise UsageError(
            f"{what} {redact_url(url)!r}: not a git URL; write git+https://HOST/REPO.git@REV "
            "(or git+file:///PATH@REV)"
        )
    if rev and not re.fullmatch(r"[A-Za-z0-9._/+-]+", rev):
        raise UsageError(f"{what} {rev!r}: not a git revision (a branch, tag or commit)")
    return Git(parts._replace(path=path).geturl(), rev)


@dataclass(frozen=True)
class RequirementSource:
    """A profile requirement that names its source by URL: `name[extras] @ URL ; marker`."""

    name: str  # canonical
    extras: tuple[str, ...]
    marker: str
    spec: SourceSpec


def requirement_source(text: str) -> RequirementSource | None:
    """The source of a direct-URL requirement (`file://` or `git+`); None for a plain one."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None  # the profile reader has already reported it
    if not req.url:
        return None
    what = f"{req.name} @"
    if req.url.startswith(("git+", "file:")):
        spec = parse_spec(req.url, what)
    else:
        raise UsageError(
            f"{what} {redact_url(req.url)}: a direct URL; give a local path (file://), a git "
            "URL (git+https://...@REV), or the file as an [[artifacts]] entry with a hash"
        )
    return RequirementSource(
        canonicalize_name(req.name),
        tuple(sorted(req.extras)),
        str(req.marker) if req.marker else "",
        spec,
    )


def with_extras(name: str, extras: tuple[str, ...]) -> str:
    return f"{name}[{','.join(extras)}]" if extras else name
