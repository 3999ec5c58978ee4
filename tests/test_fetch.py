from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.pkgindex import Server, build_wheel, make_certificates

from verl_bundle.errors import FetchError
from verl_bundle.net import download
from verl_bundle.net.cache import Cache
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import Http

BIG = 3 * 1024 * 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    build_wheel(root, "big", "1.0", payload_bytes=BIG)
    build_wheel(root, "small", "1.0")
    return root


def want(server: Server, files: Path, name: str, *, sha: str | None = "auto") -> Want:
    path = next(files.glob(f"{name}-*.whl"))
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if sha == "auto" else sha
    return Want(
        name, path.name, f"{server.url}/files/{path.name}", "test-loc", digest, path.stat().st_size
    )


def fetcher(tmp_path: Path, **kw: object) -> Downloader:
    return Downloader(Cache(tmp_path / "cache"), Http(), backoff=0.01, **kw)  # type: ignore[arg-type]


def test_download_lands_in_the_cache_by_hash(tmp_path: Path, server: Server, files: Path) -> None:
    w = want(server, files, "big")
    got = fetcher(tmp_path).fetch(w)
    assert got.sha256 == w.sha256
    assert w.sha256 is not None
    assert got.path == tmp_path / "cache" / "sha256" / w.sha256[:2] / w.sha256
    assert got.downloaded == BIG + got.size - BIG
    assert not list((tmp_path / "cache" / "partial").glob("*.part"))


def test_cached_file_is_not_downloaded_again(tmp_path: Path, server: Server, files: Path) -> None:
    f = fetcher(tmp_path)
    w = want(server, files, "small")
    first = f.fetch(w)
    server.clear()
    again = f.fetch(w)
    assert again.downloaded == 0
    assert server.file_requests() == []
    # Hashed while it streamed in: the tar writer trusts that; a cache hit it hashes itself.
    assert first.fresh and not again.fresh


def test_dropped_connection_resumes_with_a_range_request(
    tmp_path: Path, server: Server, files: Path
) -> None:
    w = want(server, files, "big")
    server.faults.truncate_once[w.filename] = BIG // 3
    got = fetcher(tmp_path).fetch(w)
    assert got.sha256 == w.sha256
    ranges = [r.range for r in server.file_requests() if r.method == "GET"]
    assert ranges[0] is None
    assert ranges[1] == f"bytes={BIG // 3}-", ranges


class Pieces:
    """A reporter that keeps the size of every piece a download advances by."""

    def __init__(self) -> None:
        self.pieces: list[int] = []

    def start(self, label: str, total: int | None) -> object:
        return label

    def advance(self, handle: object, amount: int) -> None:
        self.pieces.append(amount)

    def done(self, handle: object) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def status(self, message: str) -> None:
        pass

    def progress(self, message: str) -> None:
        pass


def test_a_fast_link_is_read_in_whole_chunks_and_still_resumes(
    tmp_path: Path, server: Server, files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a link keeps up, a download reads whole chunks (one call each) instead of what
    each TLS record brings; a connection dropped in the middle of one still resumes, from the
    bytes that reached the partial file."""
    monkeypatch.setattr(download, "RATE_WINDOW", 0.0)  # judge the rate after every piece
    w = want(server, files, "big")
    pieces = Pieces()
    got = Downloader(Cache(tmp_path / "one"), Http(), pieces, backoff=0.01).fetch(w)
    assert got.sha256 == w.sha256
    assert max(pieces.pieces) == download.CHUNK and sum(pieces.pieces) == BIG + got.size - BIG
    cut = BIG // 3 + 100
    server.clear()
    server.faults.truncate_once[w.filename] = cut
    again = Downloader(Cache(tmp_path / "two"), Http(), backoff=0.01).fetch(w)
    assert again.sha256 == w.sha256
    ranges = [r.range for r in server.file_requests() if r.method == "GET"]
    assert ranges[0] is None and len(ranges) == 2, ranges
    start = int((ranges[1] or "").removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= cut


def test_partial_file_from_an_earlier_run_is_resumed(
    tmp_path: Path, server: Server, files: Path
) -> None:
    w = want(server, files, "big")
    f = fetcher(tmp_path)
    data = (files / w.filename).read_bytes()
    partial = f.cache.partial(w.sha256 or "")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[:1000])
    got = f.fetch(w)
    assert got.sha256 == w.sha256
    assert got.downloaded == len(data) - 1000
    assert [r.range for r in server.file_requests()] == ["bytes=1000-"]


def test_5xx_is_retried(tmp_path: Path, server: Server, files: Path) -> None:
    w = want(server, files, "small")
    server.faults.fail_5xx[w.filename] = 2
    got = fetcher(tmp_path).fetch(w)
    assert got.sha256 == w.sha256
    assert len(server.file_requests()) == 3


def test_hash_mismatch_is_one_line_and_leaves_nothing(
    tmp_path: Path, server: Server, files: Path
) -> None:
    w = want(server, files, "small")
    server.faults.corrupt.add(w.filename)
    f = fetcher(tmp_path)
    with pytest.raises(FetchError) as exc:
        f.fetch(w)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "small" in msg and w.url in msg and "location test-loc" in msg
    assert "sha256 mismatch" in msg
    assert not (tmp_path / "cache" / "sha256").exists()
    assert not list((tmp_path / "cache" / "partial").glob("*.part"))


def test_404_names_package_url_and_location(tmp_path: Path, server: Server, files: Path) -> None:
    w = want(server, files, "small")
    server.faults.missing.add(w.filename)
    with pytest.raises(
        FetchError, match=r"small: .*small-1.0-py3-none-any.whl \(location test-loc\): 404"
    ):
        fetcher(tmp_path).fetch(w)


def test_unreachable_location_gives_up_with_one_line(tmp_path: Path) -> None:
    w = Want(
        "small",
        "small-1.0-py3-none-any.whl",
        "http://127.0.0.1:9/small-1.0-py3-none-any.whl",
        "mirror",
        "0" * 64,
    )
    with pytest.raises(FetchError) as exc:
        fetcher(tmp_path, retries=1).fetch(w)
    assert "cannot connect" in str(exc.value) and "location mirror" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_credentials_are_sent_but_never_shown(tmp_path: Path, files: Path) -> None:
    s = Server(files, credentials=("bob", "s3cret")).start()
    try:
        path = next(files.glob("small-*.whl"))
        url = f"http://bob:s3cret@127.0.0.1:{s.port}/files/{path.name}"
        http = Http.for_urls([f"http://bob:s3cret@127.0.0.1:{s.port}/simple"])
        f = Downloader(Cache(tmp_path / "c"), http, backoff=0.01)
        got = f.fetch(Want("small", path.name, f"http://127.0.0.1:{s.port}/files/{path.name}", "m"))
        assert got.size == path.stat().st_size
        assert s.file_requests()[-1].authorization is not None
        s.faults.missing.add(path.name)
        with pytest.raises(FetchError) as exc:
            Downloader(Cache(tmp_path / "d"), Http(), backoff=0.01).fetch(
                Want("small", path.name, url, "m")
            )
        assert "s3cret" not in str(exc.value)
    finally:
        s.stop()


def test_parallel_fetch_of_many_files(tmp_path: Path, server: Server, files: Path) -> None:
    wants = [want(server, files, "big"), want(server, files, "small")]
    results = fetcher(tmp_path, jobs=4).fetch_all(wants)
    assert {r.want.package for r in results} == {"big", "small"}
    assert all(r.path.is_file() for r in results)


@pytest.fixture
def tls_server(files: Path, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    ca, cert, key = make_certificates(tmp_path)
    s = Server(files, tls=(cert, key)).start()
    yield s, ca
    s.stop()


def test_tls_is_verified_and_a_custom_ca_bundle_is_honoured(
    tls_server: tuple[Server, Path], files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ca = tls_server
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.delenv(var, raising=False)
    w = want(server, files, "small")
    assert w.url.startswith("https://")
    with pytest.raises(
        FetchError, match=r"TLS verification failed.*REQUESTS_CA_BUNDLE or SSL_CERT_FILE"
    ):
        fetcher(tmp_path / "a").fetch(w)
    for var in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.setenv(var, str(ca))
        got = fetcher(tmp_path / var).fetch(w)
        assert got.sha256 == w.sha256
        monkeypatch.delenv(var)
