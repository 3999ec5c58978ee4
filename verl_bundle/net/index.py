"""Index pages: the one place that reads a project's page on a package index (PEP 503 HTML or
PEP 691 JSON) into typed values. Every file name on a page is checked to be a plain file name
before anything uses it."""

from __future__ import annotations

import html.parser
import json
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.errors import FetchError
from verl_bundle.net.http import Http, classify, shown_url, status_error

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    """One file a project page lists."""

    filename: str
    url: str  # absolute, without the #fragment
    sha256: str | None = None
    size: int | None = None
    upload_time: str | None = None


@dataclass(frozen=True)
class ProjectPage:
    url: str
    files: tuple[IndexFile, ...]
    is_json: bool  # PEP 691: only JSON pages can carry upload times

    def file(self, filename: str) -> IndexFile | None:
        return next((f for f in self.files if f.filename == filename), None)


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _hash_of(fragment: str) -> str | None:
    algo, _, value = fragment.partition("=")
    return value.lower() if algo == "sha256" and value else None


def parse_project_page(text: str, content_type: str, page_url: str) -> ProjectPage:
    """A project page's files. Raises ValueError (UnsafeNameError for a file name that is not
    one plain path component) when the page cannot be read."""
    files: list[IndexFile] = []
    where = f"{shown_url(page_url)} lists"
    if "json" in content_type:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("files", []), list):
            raise ValueError("not a PEP 691 project page")
        for entry in doc.get("files", []):
            url, _, fragment = urljoin(page_url, str(entry["url"])).partition("#")
            hashes = entry.get("hashes") or {}
            size = entry.get("size")
            files.append(
                IndexFile(
                    plain_filename(str(entry["filename"]), where),
                    url,
                    hashes.get("sha256") or _hash_of(fragment),
                    size if isinstance(size, int) else None,
                    entry.get("upload-time"),
                )
            )
        return ProjectPage(page_url, tuple(files), is_json=True)
    parser = _Anchors()
    parser.feed(text)
    for href in parser.hrefs:
        url, _, fragment = urljoin(page_url, href).partition("#")
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        files.append(IndexFile(plain_filename(name, where), url, _hash_of(fragment)))
    return ProjectPage(page_url, tuple(files), is_json=False)


def read_project(http: Http, index_url: str, project: str, where: str) -> ProjectPage | None:
    """GET `index_url`/`project`/ and parse it; None when the index does not have the project
    (404). Transport failures, refused credentials and unreadable pages are FetchError, one
    line that names `where` and the page (redacted)."""
    page = f"{index_url.rstrip('/')}/{project}/"
    shown = f"{where}: {shown_url(page)}"
    import requests  # here, not at the top: a build from the cache never reads an index

    try:
        resp = http.get(page, headers={"Accept": ACCEPT})
        page = resp.url  # without credentials (Http sends them apart), after any redirect
    except requests.RequestException as exc:
        failure = classify(exc)
        hint = "; was the index reachable?" if failure.kind == "connect" else ""
        raise FetchError(failure.message(shown) + hint) from None
    with resp:
        if resp.status_code == 404:
            return None
        error = status_error(shown, resp)
        if error is not None and resp.status_code in (401, 403):
            raise error
        if resp.status_code != 200:
            raise FetchError(
                f"{shown}: answered {resp.status_code} {resp.reason}; was the index reachable?"
            )
        try:
            return parse_project_page(resp.text, resp.headers.get("Content-Type", ""), page)
        except UnsafeNameError as exc:
            raise FetchError(f"{where}: {exc}; the index page is not trustworthy") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise FetchError(f"{shown}: not a readable index page ({exc})") from None
