"""uv's error text, made into one actionable line: a conflict names the profile's pins; a
network failure says what kind (TLS, credentials, DNS, unreachable) and which location."""

from __future__ import annotations

import re

from verl_bundle.credentials import split_credentials
from verl_bundle.errors import FetchError, ResolutionError
from verl_bundle.net.http import CA_HINT, CREDENTIALS_HINT, shown_url
from verl_bundle.profile.model import Profile
from verl_bundle.profile.target import Target


def _cause_lines(stderr: str) -> list[str]:
    out = []
    for raw in stderr.splitlines():
        line = re.sub(r"^[\s×│├╰─▶]*", "", raw).strip()  # noqa: RUF001 - uv's tree glyphs
        line = re.sub(r"^(error|cause|hint):\s*", "", line)
        if line and not line.startswith("warning:"):
            out.append(line)
    return out


# What uv's error text says went wrong on the network, most specific first.
_UV_FAILURES = (
    (
        "tls",
        r"invalid peer certificate|certificate verify failed|UnknownIssuer|unknown ?issuer|"
        r"self[- ]signed certificate|unable to get local issuer",
    ),
    ("auth", r"\b401 Unauthorized|\b403 Forbidden|status code:? 40[13]\b|missing credentials"),
    ("dns", r"dns error|failed to lookup address|Name or service not known|nodename nor servname"),
    ("connect", r"Connection refused|error sending request|tcp connect|timed out"),
)


def explain_failure(profile: Profile, target: Target, stderr: str, project: str) -> Exception:
    """One actionable error from uv's stderr; `project` is the name of the throwaway project
    that stands for the profile in uv's words."""
    lines = _cause_lines(stderr)
    text = " ".join(lines)
    text = text.replace(f"{project} depends on", f"profile {profile.name} requires")
    text = text.replace(f"{project}==0 depends on", f"profile {profile.name} requires")
    text = text.replace(project, f"profile {profile.name}")
    if "No solution found" in text:
        why = re.sub(r"^.*?No solution found when resolving dependencies:?\s*", "", text)
        return ResolutionError(
            f"profile {profile.name} ({profile.path}) does not resolve for {target.describe()}: "
            f"{why} Change the conflicting pins in the profile."
        )
    failed = next(
        (
            loc
            for loc in profile.locations.values()
            if loc.url and (shown_url(loc.url) in text or split_credentials(loc.url)[0] in text)
        ),
        None,
    )
    where = f"location {failed.describe()}" if failed else "an index"
    kind = next((k for k, pattern in _UV_FAILURES if re.search(pattern, text, re.I)), None)
    if kind == "tls":
        return FetchError(
            f"resolving {profile.name}: {where}: TLS verification failed: {text} ({CA_HINT})"
        )
    if kind == "auth":
        return FetchError(
            f"resolving {profile.name}: {where} refused access: {text} ({CREDENTIALS_HINT})"
        )
    if kind == "dns":
        return FetchError(
            f"resolving {profile.name}: {where}: the host cannot be resolved: {text} "
            "Check the host name in the URL (--mirror), this host's DNS, or HTTPS_PROXY."
        )
    if failed is not None or kind == "connect":
        return FetchError(
            f"resolving {profile.name}: {where} failed: {text} "
            "Was the index reachable? Check --mirror, HTTPS_PROXY and credentials."
        )
    return ResolutionError(f"resolving {profile.name} for {target.describe()} failed: {text}")
