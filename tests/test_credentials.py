from __future__ import annotations

import itertools
import re

import pytest

from verl_bundle.credentials import Redactor, redact_url, split_credentials


def test_redact_url_masks_password_and_lone_token() -> None:
    assert (
        redact_url("https://bob:s3cret@nexus.corp/simple") == "https://bob:****@nexus.corp/simple"
    )
    assert redact_url("https://tok123@nexus.corp/simple") == "https://****@nexus.corp/simple"
    assert redact_url("https://nexus.corp/simple") == "https://nexus.corp/simple"


def test_split_credentials_returns_clean_url_and_auth() -> None:
    clean, auth = split_credentials("https://bob:p%40ss@nexus.corp:8443/simple")
    assert clean == "https://nexus.corp:8443/simple"
    assert auth == ("bob", "p@ss")


def test_redactor_scrubs_secrets_anywhere_in_text() -> None:
    r = Redactor.for_urls(["https://bob:s3cret@nexus.corp/simple", "https://tok123@art.corp/x"])
    text = "failed https://bob:s3cret@nexus.corp/simple/torch/ and header s3cret and tok123"
    out = r(text)
    assert "s3cret" not in out and "tok123" not in out
    assert "https://bob:****@nexus.corp" in out


# The regular expression the redactor used before it was made linear: the reference for what
# counts as user info in a URL (on short text, where its quadratic cost does not matter).
_OLD_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def _old_mask(text: str) -> str:
    def mask(m: re.Match[str]) -> str:
        userinfo = m.group("userinfo")
        if ":" in userinfo:
            return f"{m.group('scheme')}{userinfo.split(':', 1)[0]}:****@"
        return f"{m.group('scheme')}****@"

    return _OLD_USERINFO.sub(mask, text)


def test_redactor_masks_user_info_as_the_url_grammar_says() -> None:
    """Every text of up to 7 characters built from the characters that matter is masked exactly as the
    reference expression masks it: schemes, user names, tokens, several URLs in a row."""
    redact = Redactor()
    for size in range(8):
        for chars in itertools.product("a1:/@ ", repeat=size):
            text = "".join(chars)
            assert redact(text) == _old_mask(text), repr(text)
    text = "see https://bob:s3cret@nexus.corp/a and git+ssh://tok@git.corp:x://u:p@h/ done"
    assert redact(text) == (
        "see https://bob:****@nexus.corp/a and git+ssh://****@git.corp:x://u:****@h/ done"
    )


@pytest.mark.timeout(20)
def test_redactor_is_linear_on_a_2mb_line() -> None:
    """A 2 MB line without newlines (a progress display) is redacted whole: words that look
    like schemes, "://" without user info, and user info at both ends."""
    url = "https://bob:s3cret@nexus.corp/simple"
    body = ("abcdefgh" * 1000 + " ") * 150 + "x://" + "a:" * 300_000 + ("z+.-" * 100_000)
    line = url + " " + body + " tok123 " + "h://tok123@host/x"
    assert len(line) > 2_000_000
    redact = Redactor.for_urls([url, "https://tok123@art.corp/x"])
    out = redact(line)
    assert out == "https://bob:****@nexus.corp/simple " + body + " **** h://****@host/x"
