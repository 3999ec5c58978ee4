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


# What may precede "://" in a URL's scheme, and what ends a URL's user info. A regular expression
# for "scheme://userinfo@" retries its scheme part at every letter of a long word: quadratic on
# a long line (a 400 KB progress line took minutes). Found from each "://" instead: linear.
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_USERINFO = re.compile(r"[^/@\s]+")  # one quantifier, matched once per "://": linear


def _mask_userinfo(text: str) -> str:
    """Every `scheme://user:secret@` in `text` as `scheme://user:****@` (`scheme://****@` for a
    lone token), in time linear in the length of `text`."""
    out: list[str] = []
    done = 0  # text[:done] is in `out`
    at = text.find("://")
    while at != -1:
        # A scheme is a letter followed by letters, digits, "+", "." or "-", right before "://".
        start = at
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        has_scheme = any(c.isalpha() for c in text[start:at])
        m = _USERINFO.match(text, at + 3)
        if has_scheme and m is not None and text.startswith("@", m.end()):
            userinfo = m.group()
            masked = f"{userinfo.split(':', 1)[0]}:{MASK}" if ":" in userinfo else MASK
            out += [text[done : at + 3], masked, "@"]
            done = m.end() + 1
            at = text.find("://", done)
        else:
            at = text.find("://", at + 1)
    out.append(text[done:])
    return "".join(out)


@dataclass(frozen=True)
class Redactor:
    """Scrubs known secrets, and any user info in URLs, from text before it is shown or kept
    (in time linear in the text's length: logs can hold megabyte-long lines)."""

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
        text = _mask_userinfo(text)
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text
