"""The fetch stage: every locked file into the cache, pure sdists built into wheels.

A lock may have been made against other locations than the ones used now (a lock committed
upstream, built inside the intranet with --mirror): each file is then looked up by name on the
mirror, and its hash must still match the lock.
"""

from __future__ import annotations

import html.parser
import json
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

from verl_bundle.credentials import redact_url, split_credentials
from verl_bundle.errors import FetchError
from verl_bundle.fetch import Cached, Fetcher, Want
from verl_bundle.hostbuild import build_pure_wheel
from verl_bundle.lock import Lock, LockedFile, LockedPackage
from verl_bundle.net import Http
from verl_bundle.profile import DEFAULT_INDEX, Profile
from verl_bundle.progress import Reporter


@dataclass(frozen=True)
class Artifact:
    """One file as it goes into the bundle."""

    package: LockedPackage
    path: str  # in the cache
    filename: str  # in the bundle
    sha256: str
    size: int
    built_from: LockedFile | None = None  # set for wheels built on the online host


@dataclass(frozen=True)
class Wheelhouse:
    artifacts: tuple[Artifact, ...]
    downloaded_files: int  # by this run, lock-time downloads included
    downloaded_bytes: int
    cached_files: int
    host_built: int


def prepare(lock: Lock, profile: Profile, fetcher: Fetcher, reporter: Reporter) -> Wheelhouse:
    wants = [_want(p, lock, profile, fetcher.http) for p in lock.packages]
    results: list[Cached] = fetcher.fetch_all(wants)
    by_name = {r.want.package: r for r in results}
    artifacts: list[Artifact] = []
    built = 0
    index = profile.location(DEFAULT_INDEX).url
    for pkg in lock.packages:
        got = by_name[pkg.name]
        if pkg.kind == "host-build":
            reporter.status(f"building {pkg.file.filename} into a wheel on this host")
            wheel = build_pure_wheel(
                pkg.name,
                got.path,
                pkg.file.filename,
                got.sha256,
                fetcher.cache,
                index,
                fetcher.http.redact,
            )
            built += 1
            artifacts.append(
                Artifact(pkg, str(wheel.path), wheel.filename, wheel.sha256, wheel.size, pkg.file)
            )
        else:
            artifacts.append(Artifact(pkg, str(got.path), pkg.file.filename, got.sha256, got.size))
    return Wheelhouse(
        artifacts=tuple(artifacts),
        downloaded_files=fetcher.downloaded_files,
        downloaded_bytes=fetcher.downloaded_bytes,
        # Every package's file was either downloaded in this run (lock-time included) or not.
        cached_files=max(0, len(lock.packages) - fetcher.downloaded_files),
        host_built=built,
    )


def _want(pkg: LockedPackage, lock: Lock, profile: Profile, http: Http) -> Want:
    url = pkg.file.url
    loc = profile.locations.get(pkg.location)
    locked_base = lock.locations.get(pkg.location, "")
    if loc is not None and loc.url and split_credentials(loc.url)[0] != locked_base:
        url = _relocate(pkg, locked_base, loc.url, loc.kind, http)
    return Want(pkg.name, pkg.file.filename, url, pkg.location, pkg.file.sha256, pkg.file.size)


def _relocate(pkg: LockedPackage, locked_base: str, new_base: str, kind: str, http: Http) -> str:
    """Where the locked file lives on the location's current (mirror) URL."""
    clean_new = split_credentials(new_base)[0]
    if locked_base and pkg.file.url.startswith(locked_base + "/"):
        return clean_new + pkg.file.url[len(locked_base) :]
    if kind != "index":
        return clean_new + "/" + urlsplit(pkg.file.url).path.lstrip("/")
    page = f"{clean_new}/{pkg.name}/"
    try:
        resp = http.get(page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html"})
    except Exception as exc:
        raise FetchError(
            f"{pkg.name}: cannot read {redact_url(page)} (location {pkg.location}): {exc}; "
            "was the mirror reachable?"
        ) from None
    if resp.status_code != 200:
        raise FetchError(
            f"{pkg.name}: {redact_url(page)} (location {pkg.location}) answered "
            f"{resp.status_code}; the mirror does not serve this project"
        )
    links = _links(resp.text, resp.headers.get("Content-Type", ""), page)
    url = links.get(pkg.file.filename)
    if url is None:
        raise FetchError(
            f"{pkg.name}: {pkg.file.filename} is not on {redact_url(page)} "
            f"(location {pkg.location}); the mirror lacks the locked file"
        )
    return split_credentials(url)[0]


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _links(text: str, content_type: str, base: str) -> Mapping[str, str]:
    out: dict[str, str] = {}
    if "json" in content_type:
        for f in json.loads(text).get("files", []):
            out[f["filename"]] = urljoin(base, f["url"]).split("#", 1)[0]
        return out
    parser = _Anchors()
    parser.feed(text)
    for href in parser.hrefs:
        url = urljoin(base, href).split("#", 1)[0]
        out[unquote(urlsplit(url).path.rsplit("/", 1)[-1])] = url
    return out
