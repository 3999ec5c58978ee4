"""HTTP for the online host: TLS verification on, proxies and CA bundles from the environment,
credentials attached per location and never shown, and transport failures told as what they
are (TLS, DNS, proxy, refused, credentials) rather than as a generic "unreachable"."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from verl_bundle import __version__
from verl_bundle.credentials import Redactor, redact_url, split_credentials
from verl_bundle.errors import FetchError, UsageError

if TYPE_CHECKING:  # requests is imported where it is used: a build that fetches nothing skips it
    import requests

TIMEOUT = (15.0, 60.0)  # connect, read (seconds)
CA_HINT = "point REQUESTS_CA_BUNDLE or SSL_CERT_FILE at your organisation's CA bundle"
CREDENTIALS_HINT = (
    "the location wants credentials (or refused the ones given): put them in the mirror URL "
    "(https://user:token@host/...)"
)


def ca_bundle() -> str | bool:
    """The CA bundle to trust: REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, then SSL_CERT_FILE."""
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(var)
        if value:
            return value
    return True


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def shown_url(url: str) -> str:
    """A URL as it may be shown: credentials masked, also in a URL too broken to parse."""
    try:
        return redact_url(url)
    except ValueError:
        return Redactor()(url)


def short(exc: BaseException) -> str:
    """An exception's first line, capped, for a one-line message."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) < 200 else text[:197] + "..."


@dataclass(frozen=True)
class Failure:
    """A transport failure, classified: `retryable` ones (refused, reset, timeout) are worth
    another attempt; the others (TLS, DNS, proxy, a bad URL) will fail the same way again."""

    kind: str  # "tls", "dns", "proxy", "url", "connect"
    detail: str

    @property
    def retryable(self) -> bool:
        return self.kind == "connect"

    def message(self, where: str) -> str:
        """One line for the user: `where` names the package or page and the redacted URL."""
        if self.kind == "tls":
            return f"{where}: TLS verification failed ({self.detail}); {CA_HINT}"
        if self.kind == "dns":
            return (
                f"{where}: the host cannot be resolved ({self.detail}); check the host name in "
                "the URL (--mirror), this host's DNS, or HTTPS_PROXY if the internet is reached "
                "through a proxy"
            )
        if self.kind == "proxy":
            return (
                f"{where}: the proxy failed ({self.detail}); check HTTPS_PROXY/HTTP_PROXY "
                "(and NO_PROXY for intranet mirrors)"
            )
        if self.kind == "url":
            return f"{where}: not a valid URL ({self.detail}); fix the location's URL (--mirror)"
        return f"{where}: cannot connect: {self.detail}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes, and what requests/urllib3 wrapped inside it."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        todo += [e for e in (cur.__cause__, cur.__context__) if e is not None]
        todo += [a for a in cur.args if isinstance(a, BaseException)]
        reason = getattr(cur, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)


def classify(exc: requests.RequestException) -> Failure:
    """What kind of transport failure `exc` is (it never carries credentials: requests is
    given URLs without user info)."""
    import requests
    import urllib3.exceptions

    causes = list(_chain(exc))
    if isinstance(exc, requests.exceptions.SSLError):
        inner = next((c for c in causes if isinstance(c, ssl.SSLError)), exc)
        return Failure("tls", short(inner))
    if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema)):
        return Failure("url", short(exc))
    if isinstance(exc, requests.exceptions.ProxyError):
        return Failure("proxy", short(exc))
    # urllib3 2 raises NameResolutionError; urllib3 1 leaves a socket.gaierror in the chain.
    named = getattr(urllib3.exceptions, "NameResolutionError", None)
    dns: tuple[type[BaseException], ...] = (socket.gaierror, *((named,) if named else ()))
    for cause in causes:
        if isinstance(cause, dns):
            return Failure("dns", short(cause).split(": ", 1)[-1])
    for cause in causes:
        if isinstance(cause, urllib3.exceptions.NewConnectionError):
            return Failure("connect", short(cause).split("): ", 1)[-1])
    return Failure("connect", short(exc))


@dataclass
class Http:
    """Thread-local requests sessions plus the credentials known for each host."""

    credentials: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # netloc -> auth
    redact: Redactor = field(default_factory=Redactor)
    _local: threading.local = field(default_factory=threading.local)

    @classmethod
    def for_urls(cls, urls: list[str]) -> Http:
        creds: dict[str, tuple[str, str]] = {}
        for url in urls:
            try:
                _, auth = split_credentials(url)
                netloc = _netloc(url)
            except ValueError as exc:
                # The URL is not shown: it may hold a secret and cannot be parsed to mask it.
                raise UsageError(f"a location URL is not valid ({exc}); fix --mirror") from None
            if auth is not None:
                creds[netloc] = auth
        return cls(credentials=creds, redact=Redactor.for_urls(urls))

    @property
    def session(self) -> requests.Session:
        s: requests.Session | None = getattr(self._local, "session", None)
        if s is None:
            import requests

            s = requests.Session()
            s.verify = ca_bundle()
            s.headers["User-Agent"] = f"verl-bundle/{__version__}"
            self._local.session = s
        return s

    def auth_for(self, url: str) -> tuple[str, str] | None:
        return self.credentials.get(_netloc(url))

    def _split(self, url: str) -> tuple[str, tuple[str, str] | None]:
        try:
            clean, inline = split_credentials(url)
            return clean, inline or self.auth_for(clean)
        except ValueError as exc:
            import requests

            raise requests.exceptions.InvalidURL(str(exc)) from None

    def get(self, url: str, **kwargs: object) -> requests.Response:
        clean, auth = self._split(url)
        return self.session.get(
            clean,
            auth=auth,
            timeout=TIMEOUT,
            **kwargs,  # type: ignore[arg-type]
        )

    def head(self, url: str) -> requests.Response:
        clean, auth = self._split(url)
        return self.session.head(clean, auth=auth, timeout=TIMEOUT, allow_redirects=True)


def status_error(where: str, resp: requests.Response) -> FetchError | None:
    """The error for an answer that no retry will change (401/403, 404/410, other 4xx), or
    None for success and for answers worth retrying (429, 5xx)."""
    status = resp.status_code
    if status in (401, 403):
        return FetchError(f"{where}: {status} {resp.reason}; {CREDENTIALS_HINT}")
    if status in (404, 410):
        return FetchError(
            f"{where}: {status} Not Found; the location does not have this file. "
            "Check the mirror (--mirror) serves it, or re-run `verl-bundle lock`"
        )
    if 400 <= status < 500 and status not in (416, 429):
        return FetchError(f"{where}: {status} {resp.reason}")
    return None
