"""HTTP for the online host: TLS verification on, proxies and CA bundles from the environment,
credentials attached per location and never shown."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests

from verl_bundle import __version__
from verl_bundle.credentials import Redactor, split_credentials

TIMEOUT = (15.0, 60.0)  # connect, read (seconds)


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
            _, auth = split_credentials(url)
            if auth is not None:
                creds[_netloc(url)] = auth
        return cls(credentials=creds, redact=Redactor.for_urls(urls))

    @property
    def session(self) -> requests.Session:
        s: requests.Session | None = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            s.verify = ca_bundle()
            s.headers["User-Agent"] = f"verl-bundle/{__version__}"
            self._local.session = s
        return s

    def auth_for(self, url: str) -> tuple[str, str] | None:
        return self.credentials.get(_netloc(url))

    def get(self, url: str, **kwargs: object) -> requests.Response:
        clean, inline = split_credentials(url)
        return self.session.get(
            clean,
            auth=inline or self.auth_for(clean),
            timeout=TIMEOUT,
            **kwargs,  # type: ignore[arg-type]
        )

    def head(self, url: str) -> requests.Response:
        clean, inline = split_credentials(url)
        return self.session.head(
            clean, auth=inline or self.auth_for(clean), timeout=TIMEOUT, allow_redirects=True
        )
