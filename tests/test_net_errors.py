"""Network failures are told as what they are: TLS (and how to give a CA), refused credentials,
a host name that does not resolve, an invalid URL; each names the (redacted) URL, in one line.
Real servers on 127.0.0.1; the unresolvable name is under `.invalid`, so nothing leaves."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Stack
from support.cli import run
from support.pkgindex import Server, build_wheel, make_certificates

from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.airgap.contract.names import UnsafeNameError
from verl_bundle.errors import FetchError
from verl_bundle.net.cache import Cache
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import Http
from verl_bundle.net.index import parse_project_page, read_project

UNRESOLVABLE = "http://mirror.verl-bundle-test.invalid"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    build_wheel(root, "small", "1.0")
    return root


@contextmanager
def serving(root: Path, **options: Any) -> Iterator[Server]:
    """An index Server over `root` (options as Server's), started, and stopped afterwards."""
    server = Server(root, **options).start()
    try:
        yield server
    finally:
        server.stop()


def _want(server_url: str, files: Path) -> Want:
    path = next(files.glob("small-*.whl"))
    return Want("small", path.name, f"{server_url}/files/{path.name}", "mirror", sha256_file(path))


def _downloader(tmp_path: Path, http: Http | None = None) -> Downloader:
    return Downloader(Cache(tmp_path / "cache"), http or Http(), retries=1, backoff=0.01)


@pytest.fixture
def no_ca_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def tls_certs(tmp_path: Path) -> tuple[Path, Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    return make_certificates(tmp_path)


@pytest.fixture
def tls_server(files: Path, tls_certs: tuple[Path, Path, Path]) -> Iterator[Server]:
    _, cert, key = tls_certs
    with serving(files, tls=(cert, key)) as s:
        yield s


# -- the download, the index page and the probe, each on its own ------------------------------


def test_unknown_ca_says_tls_and_how_to_give_a_ca(
    tls_server: Server, files: Path, tmp_path: Path, no_ca_env: None
) -> None:
    w = _want(tls_server.url, files)
    with pytest.raises(FetchError) as exc:
        _downloader(tmp_path).fetch(w)
    msg = str(exc.value)
    assert "TLS verification failed" in msg and "REQUESTS_CA_BUNDLE" in msg
    assert "SSL_CERT_FILE" in msg and w.url in msg and "\n" not in msg
    # Not retried: a certificate does not change between attempts.
    assert len(tls_server.file_requests()) == 0  # the handshake failed before any request
    with pytest.raises(FetchError, match=r"location pypi: https://127\.0\.0\.1:\d+/simple/small/"):
        read_project(Http(), tls_server.index_url, "small", "location pypi")
    with pytest.raises(FetchError, match="TLS verification failed"):
        _downloader(tmp_path).probe(w.url)


def test_refused_credentials_say_credentials(files: Path, tmp_path: Path) -> None:
    with serving(files, credentials=("bob", "s3cret")) as s:
        w = _want(s.url, files)
        with pytest.raises(FetchError) as exc:
            _downloader(tmp_path).fetch(w)
        msg = str(exc.value)
        assert "401" in msg and "credentials" in msg and w.url in msg and "\n" not in msg
        assert len(s.file_requests()) == 1  # a 401 is not retried
        wrong = Http.for_urls([f"http://bob:wrong-pass@127.0.0.1:{s.port}/simple"])
        with pytest.raises(FetchError) as page:
            read_project(wrong, s.index_url, "small", "location pypi")
        assert "401" in str(page.value) and "credentials" in str(page.value)
        assert "wrong-pass" not in str(page.value)
        with pytest.raises(FetchError, match="credentials"):
            _downloader(tmp_path).probe(w.url)


def test_unresolvable_host_says_so_and_is_not_retried(files: Path, tmp_path: Path) -> None:
    w = Want("small", "small-1.0-py3-none-any.whl", f"{UNRESOLVABLE}/small.whl", "mirror", "0" * 64)
    with pytest.raises(FetchError) as exc:
        _downloader(tmp_path).fetch(w)
    msg = str(exc.value)
    assert "cannot be resolved" in msg and w.url in msg and "\n" not in msg
    assert "gave up after" not in msg
    with pytest.raises(FetchError, match="cannot be resolved"):
        read_project(Http(), f"{UNRESOLVABLE}/simple", "small", "location pypi")
    probe = _downloader(tmp_path).probe(w.url)
    assert not probe.available and "cannot be resolved" in probe.reason


def test_a_bad_url_is_one_line_without_its_secret(tmp_path: Path) -> None:
    for url in ("http://u:s3cret@[::1/x.whl", "http://127.0.0.1:70000/x.whl"):
        w = Want("small", "x.whl", url, "mirror", "0" * 64)
        with pytest.raises(FetchError) as exc:
            _downloader(tmp_path).fetch(w)
        assert "not a valid URL" in str(exc.value) and "s3cret" not in str(exc.value)


# -- index pages: one parser, plain names only -----------------------------------------------


def test_index_pages_parse_html_and_json_alike() -> None:
    digest = "ab" * 32
    html_page = f'<a href="../../files/a-1.0-py3-none-any.whl#sha256={digest}">a</a>'
    page = parse_project_page(html_page, "text/html", "http://h/simple/a/")
    (f,) = page.files
    assert (f.filename, f.url, f.sha256) == (
        "a-1.0-py3-none-any.whl",
        "http://h/files/a-1.0-py3-none-any.whl",
        digest,
    )
    assert not page.is_json
    doc = {
        "files": [
            {
                "filename": "a-1.0.tar.gz",
                "url": "https://f/a-1.0.tar.gz",
                "hashes": {"sha256": digest},
                "size": 12,
                "upload-time": "2024-01-01T00:00:00Z",
            }
        ]
    }
    page = parse_project_page(
        json.dumps(doc), "application/vnd.pypi.simple.v1+json", "http://h/simple/a/"
    )
    (f,) = page.files
    assert (f.filename, f.size, f.upload_time, page.is_json) == (
        "a-1.0.tar.gz",
        12,
        "2024-01-01T00:00:00Z",
        True,
    )


@pytest.mark.parametrize(
    ("ctype", "body"),
    [
        ("text/html", '<a href="/files/..%2F..%2Fevil-1.0.tar.gz">x</a>'),
        (
            "application/vnd.pypi.simple.v1+json",
            json.dumps({"files": [{"filename": "../evil-1.0.tar.gz", "url": "/f/evil.tar.gz"}]}),
        ),
    ],
)
def test_an_index_page_with_a_path_for_a_file_name_is_refused(
    files: Path, ctype: str, body: str
) -> None:
    with pytest.raises(UnsafeNameError):
        parse_project_page(body, ctype, "http://h/simple/evil/")
    with serving(files) as s:
        s.faults.pages["small"] = (ctype, body.encode())
        with pytest.raises(FetchError) as exc:
            read_project(Http(), s.index_url, "small", "small (location pypi)")
        assert "not a plain file name" in str(exc.value) and "\n" not in str(exc.value)


# -- the whole CLI: lock against a mirror that fails in each way ---------------------------------


def _lock(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], pypi: str) -> str:
    result = run(stack.args("lock", tmp_path / "l.toml", tmp_path / "c", pypi=pypi), capsys)
    assert result.code == 1, result.err
    assert "Traceback" not in result.err
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("error:")
    # The old code turned every one of these into a note about upload times, then failed later.
    assert "gives no upload times" not in result.err
    return last


def test_lock_against_a_mirror_with_an_unknown_ca(
    stack: Stack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tls_certs: tuple[Path, Path, Path],
    no_ca_env: None,
) -> None:
    _, cert, key = tls_certs
    with serving(stack.dirs.pypi, json_api=True, tls=(cert, key)) as secure:
        last = _lock(stack, tmp_path, capsys, secure.index_url)
        assert "TLS verification failed" in last and "REQUESTS_CA_BUNDLE" in last
        assert f"https://127.0.0.1:{secure.port}/simple/" in last


def test_lock_against_a_mirror_that_wants_credentials(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(stack.dirs.pypi, json_api=True, credentials=("bob", "s3cret")) as guarded:
        url = f"http://bob:wrong-pass@127.0.0.1:{guarded.port}/simple"
        last = _lock(stack, tmp_path, capsys, url)
        assert "401" in last and "credentials" in last and "wrong-pass" not in last
        assert f"127.0.0.1:{guarded.port}" in last


def test_lock_against_a_mirror_whose_name_does_not_resolve(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _lock(stack, tmp_path, capsys, f"{UNRESOLVABLE}/simple")
    assert "cannot be resolved" in last and "mirror.verl-bundle-test.invalid" in last


@pytest.mark.parametrize(
    "url", ["http://u:s3cret-token@[::1", "http://127.0.0.1:70000/simple", "ftp://h/simple"]
)
def test_an_invalid_mirror_url_is_a_usage_error_without_its_secret(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(
        ["lock", "--cuda", "11.8", "--mirror", f"pypi={url}", "-o", str(tmp_path / "l")], capsys
    )
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "pypi" in lines[0]
    assert "s3cret-token" not in result.err + result.out


def test_the_resolver_failing_on_a_bound_index_is_told_as_what_it_is(
    stack: Stack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tls_certs: tuple[Path, Path, Path],
    no_ca_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The PyTorch index is read by uv alone (no cut-off probe): its errors are uv's text,
    mapped to the same kinds of message."""
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    _, cert, key = tls_certs
    with serving(stack.dirs.pytorch, tls=(cert, key)) as secure:
        for url, expected in (
            (secure.index_url, "TLS verification failed"),
            (f"{UNRESOLVABLE}/whl/cu118", "cannot be resolved"),
        ):
            args = stack.args("lock", tmp_path / "l.toml", tmp_path / "c")
            args[args.index(f"pytorch-cu118={stack.pytorch.index_url}")] = f"pytorch-cu118={url}"
            result = run(args, capsys)
            assert result.code == 1, result.err
            last = result.err.strip().splitlines()[-1]
            assert expected in last and "pytorch-cu118" in last, last
            assert "Traceback" not in result.err
