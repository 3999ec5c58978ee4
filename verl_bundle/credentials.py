"""Keeping passwords and tokens in mirror URLs out of every output, log, lock and manifest."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

MASK = "****"


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """Return the URL without user info, and (user, password) when it had any."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    clean = urlunsplit(SplitResult(parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, (unquote(parts.username or ""), unquote(parts.password or ""))


def redact_url(url: str) -> str:
    """Mask the secret part of a URL's user info (the password, or a lone token)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    user = parts.username or ""
    userinfo = f"{user}:{MASK}" if parts.password is not None else MASK
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(SplitResult(parts.scheme, f"{userinfo}@{host}", parts.path, parts.query, ""))


_URL_WITH_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


@dataclass(frozen=True)
class Redactor:
    """Scrubs known secrets, and any user info in URLs, from text before it is shown or kept."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def for_urls(cls, urls: list[str]) -> Redactor:
        found: list[str] = []
        for url in urls:
            _, creds = split_credentials(url)
            if creds is None:
                continue
            user, password = creds
            # A lone token is carried in the user field; a user name next to a password is not
            # a secret, but the password is.
            secret = password if password else user
            if secret:
                found.append(secret)
        return cls(tuple(sorted(set(found), key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        def mask_userinfo(m: re.Match[str]) -> str:
            userinfo = m.group("userinfo")
            if ":" in userinfo:
                return f"{m.group('scheme')}{userinfo.split(':', 1)[0]}:{MASK}@"
            return f"{m.group('scheme')}{MASK}@"

        text = _URL_WITH_USERINFO.sub(mask_userinfo, text)
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text
