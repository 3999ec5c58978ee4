from __future__ import annotations

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
