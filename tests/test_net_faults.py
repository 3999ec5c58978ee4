"""Faults and hostile input on the fetch side: damaged partial files, a full disk, damaged
wheels, names that are paths, Ctrl-C during downloads, host builds that must be reproducible."""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Stack, clean_environ
from support.cli import run
from support.pkgindex import Server, build_sdist, build_wheel
from support.stack import UPLOADED

from verl_bundle.airgap.contract.hashing import sha256_file
from verl_bundle.credentials import Redactor
from verl_bundle.errors import FetchError
from verl_bundle.fetch.wheelhouse import fetch_order
from verl_bundle.net.cache import Cache
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import Http
from verl_bundle.resolve.lock import Kind, LockedFile, LockedPackage, read_lock
from verl_bundle.sources.hostbuild import build_pure_wheel
from verl_bundle.wheel.integrity import wheel_problem

BIG = 2 * 1024 * 1024
FLASH = "flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
TORCH = "torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl"


class Notes:
    """A reporter that keeps the notes it is given (progress is not shown)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def start(self, label: str, total: int | None) -> object:
        return label

    def advance(self, handle: object, amount: int) -> None:
        pass

    def done(self, handle: object) -> None:
        pass

    def note(self, message: str) -> None:
        self.notes.append(message)

    def status(self, message: str) -> None:
        pass

    def progress(self, message: str) -> None:
        pass


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    build_wheel(root, "big", "1.0", payload_bytes=BIG)
    return root


def big_want(server: Server, files: Path) -> Want:
    path = next(files.glob("big-*.whl"))
    url = f"{server.url}/files/{path.name}"
    return Want("big", path.name, url, "mirror", sha256_file(path), path.stat().st_size)


# -- the cache's own partial files -----------------------------------------------------------


def test_garbage_in_a_partial_file_is_discarded_not_blamed_on_the_mirror(
    tmp_path: Path, server: Server, files: Path
) -> None:
    w = big_want(server, files)
    notes = Notes()
    d = Downloader(Cache(tmp_path / "c"), Http(), notes, backoff=0.01)
    partial = d.cache.partial(w.sha256 or "")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\x00garbage" * 1000)  # not a prefix of the file
    got = d.fetch(w)
    assert got.sha256 == w.sha256 and got.path.read_bytes() == (files / w.filename).read_bytes()
    assert [r.range for r in server.file_requests()] == ["bytes=8000-", None]
    assert len(notes.notes) == 1 and "partial download left by an earlier run" in notes.notes[0]
    assert "mirror is corrupt" not in notes.notes[0]
    assert not partial.exists()


def test_a_partial_file_longer_than_the_file_is_discarded_before_asking(
    tmp_path: Path, server: Server, files: Path
) -> None:
    w = big_want(server, files)
    d = Downloader(Cache(tmp_path / "c"), Http(), Notes(), backoff=0.01)
    partial = d.cache.partial(w.sha256 or "")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"x" * (BIG + 10_000))
    assert d.fetch(w).sha256 == w.sha256
    assert [r.range for r in server.file_requests()] == [None]


def test_a_full_disk_names_the_path_and_what_to_do(
    tmp_path: Path, server: Server, files: Path
) -> None:
    """RLIMIT_FSIZE stands in for a full disk: writing past it fails with EFBIG, as a full
    disk fails with ENOSPC, in the same write call (mounting a small tmpfs needs privileges
    the test suite does not assume). SIGXFSZ is ignored so that the write fails, as on a
    full disk, instead of killing the process."""
    w = big_want(server, files)
    cache = tmp_path / "c"
    code = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
from pathlib import Path
from verl_bundle.errors import FetchError
from verl_bundle.net.cache import Cache
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import Http
want = Want(*{json.dumps([w.package, w.filename, w.url, w.location, w.sha256, w.size])})
try:
    Downloader(Cache(Path({str(cache)!r})), Http(), backoff=0.01).fetch(want)
except FetchError as exc:
    print(exc)
    sys.exit(1)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    line = proc.stdout.strip()
    assert "\n" not in line and "Traceback" not in proc.stderr
    assert f"writing {cache / 'partial'}" in line and "File too large" in line
    assert "--cache-dir" in line and "big:" in line
    assert (cache / "partial" / f"{w.sha256}.part").stat().st_size == 256 * 1024  # kept


@pytest.mark.parametrize("digest", ["../../../../escaped", "AB" * 32, ""])
def test_a_hash_that_is_not_hex_never_becomes_a_cache_path(
    tmp_path: Path, server: Server, files: Path, digest: str
) -> None:
    """Cache paths are made from hashes: a hash from a lock or an index that is not 64 hex
    digits is refused before anything is written."""
    w = big_want(server, files)
    bad = Want(w.package, w.filename, w.url, w.location, digest or None, w.size)
    cache = Cache(tmp_path / "a" / "b" / "c" / "cache")  # ../ x4 would still land in tmp_path
    if digest:
        with pytest.raises(FetchError, match="is not a sha256 hex digest"):
            Downloader(cache, Http(), Notes()).fetch(bad)
        assert server.file_requests() == []
    with pytest.raises(FetchError, match="is not a sha256 hex digest"):
        cache.built(digest or "url-x")
    assert not list(tmp_path.rglob("escaped*"))


# -- wheels are checked whole before they enter a bundle -----------------------------------------


def _rewrite_member(src: Path, dest: Path, member: str, data: bytes) -> None:
    """A copy of a wheel with one member's content replaced (a valid zip; RECORD unchanged)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, data if info.filename == member else zin.read(info))


def _damage_member(path: Path, suffix: str) -> None:
    """Flip one byte in the middle of the (stored or compressed) data of the member whose name
    ends with `suffix`: the zip's directory is intact, the member's bytes are not."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    name_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.compress_size // 2] ^= 0x20
    path.write_bytes(bytes(raw))


def _flip_stored_byte(path: Path, needle: bytes) -> None:
    """Flip one byte inside a stored member's data: the zip's structure is intact, its CRC not."""
    raw = bytearray(path.read_bytes())
    at = raw.index(needle)
    raw[at] ^= 0x20
    path.write_bytes(bytes(raw))


def test_wheel_problem_finds_crc_and_record_damage(tmp_path: Path) -> None:
    good = build_wheel(tmp_path, "pkg", "1.0", modules={"pkg": "VALUE = 'original'\n"})
    assert wheel_problem(good) is None
    # A member RECORD has a sha256 for is checked by that hash (its CRC pass is skipped) ...
    flipped = tmp_path / "flipped" / good.name
    flipped.parent.mkdir()
    flipped.write_bytes(good.read_bytes())
    _flip_stored_byte(flipped, b"original")
    assert wheel_problem(flipped) == "pkg/__init__.py does not match the hash in its RECORD"
    # ... one it lists no hash for (RECORD itself) by its CRC.
    crc = tmp_path / "crc" / good.name
    crc.parent.mkdir()
    crc.write_bytes(good.read_bytes())
    _flip_stored_byte(crc, b"/RECORD,,")
    assert "damaged" in (wheel_problem(crc) or "") and "CRC" in (wheel_problem(crc) or "")
    record = tmp_path / "record" / good.name
    record.parent.mkdir()
    _rewrite_member(good, record, "pkg/__init__.py", b"VALUE = 'replaced'\n")
    assert wheel_problem(record) == "pkg/__init__.py does not match the hash in its RECORD"
    truncated = tmp_path / "short.whl"
    truncated.write_bytes(good.read_bytes()[:-30])
    assert "damaged" in (wheel_problem(truncated) or "")


@pytest.fixture
def damaged_release_host(stack: Stack, tmp_path: Path) -> Iterator[Server]:
    """A copy of the release hosts whose flash-attn wheel (no published hash) has a bad CRC."""
    root = tmp_path / "release"
    for src in stack.dirs.files.rglob("*.whl"):
        dest = root / src.relative_to(stack.dirs.files)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(src.read_bytes())
    _flip_stored_byte(root / "v2.5.8" / FLASH, b"__version__ = '2.5.8'")
    s = Server(root).start()
    yield s
    s.stop()


def test_a_damaged_release_asset_with_no_published_hash_is_refused_and_evicted(
    stack: Stack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damaged_release_host: Server,
) -> None:
    args = stack.args("lock", tmp_path / "l.toml", tmp_path / "c")
    args[args.index(f"flash-attn-releases={stack.files.url}")] = (
        f"flash-attn-releases={damaged_release_host.url}"
    )
    result = run(args, capsys)
    assert result.code == 1, result.err
    last = result.err.strip().splitlines()[-1]
    assert FLASH in last and f"{damaged_release_host.url}/v2.5.8/" in last and "damaged" in last
    assert "Traceback" not in result.err
    blobs = [p for p in (tmp_path / "c" / "sha256").rglob("*") if p.is_file()]
    bad = (damaged_release_host.root / "v2.5.8" / FLASH).read_bytes()
    assert all(p.read_bytes() != bad for p in blobs)  # evicted
    assert not list((tmp_path / "c" / "urls").glob("*"))  # nor remembered for its URL


# -- one lock for the build-level tests below -----------------------------------------------------


@pytest.fixture(scope="module")
def stack_lock(stack_servers: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("lock")
    out = tmp / "pylock.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "verl_bundle", *stack_servers.args("lock", out, tmp / "c")],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_environ(tmp),
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def _build(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], lock: Path, cache: Path
) -> tuple[int, str]:
    args = stack.args("build", tmp_path / "out", cache, "--lock", str(lock))
    result = run(args, capsys)
    return result.code, result.err


@pytest.mark.slow
def test_a_damaged_host_built_wheel_in_the_cache_is_refused_and_rebuilt(
    stack: Stack, stack_lock: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "c"
    code, err = _build(stack, tmp_path, capsys, stack_lock, cache)
    assert code == 0, err
    (built,) = [p for p in (cache / "built").rglob("*.whl") if p.name.startswith("pylatexenc")]
    _damage_member(built, "__init__.py")
    for marker in (cache / "checked").iterdir():
        marker.unlink()  # as if the damage happened before the check ran
    code, err = _build(stack, tmp_path, capsys, stack_lock, cache)
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert (
        built.name in last
        and "built on this host from" in last
        and "pylatexenc-2.10.tar.gz" in last
    )
    assert not built.exists()
    code, err = _build(stack, tmp_path, capsys, stack_lock, cache)
    assert code == 0, err
    assert wheel_problem(built) is None


@pytest.mark.slow
def test_each_wheel_is_checked_at_the_depth_its_hash_calls_for(
    stack: Stack, stack_lock: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Index wheels (a published sha256) get the structure check; the release assets the
    profile pins no hash for, and the wheels built here, are checked whole."""
    cache = tmp_path / "c"
    code, err = _build(stack, tmp_path, capsys, stack_lock, cache)
    assert code == 0, err
    markers = {p.name for p in (cache / "checked").iterdir()}
    lock = read_lock(stack_lock)
    for pkg in lock.packages:
        if pkg.kind != "wheel":
            continue
        whole = pkg.location in ("flash-attn-releases", "vllm-releases")
        assert (pkg.file.sha256 in markers) == whole, pkg.name
        assert (f"{pkg.file.sha256}.structure" in markers) != whole, pkg.name
    built = [sha256_file(p) for p in (cache / "built").rglob("*.whl")]
    assert len(built) == 2 and all(h in markers for h in built)
    assert fetch_order(lock.packages)[0].kind != "wheel"  # the sources start first


def _locked(name: str, kind: Kind, size: int | None) -> LockedPackage:
    file = LockedFile(f"{name}-1.0.whl", f"http://x/{name}", "0" * 64, size)
    return LockedPackage(name, "1.0", file, "pypi", kind, "requirement", "x")


def test_downloads_start_with_the_sources_then_the_largest_files() -> None:
    packages = [
        _locked("a", "wheel", 10),
        _locked("big", "wheel", 900),
        _locked("mid", "wheel", 500),
        _locked("sdist", "sdist", 5),
        _locked("built", "host-build", 3),
        _locked("b", "wheel", 20),
    ]
    assert [p.name for p in fetch_order(packages)] == ["sdist", "built", "big", "mid", "b", "a"]
    odd = _locked("odd", "wheel", None)  # a size nobody gave: at once too
    assert [p.name for p in fetch_order([*packages, odd])][2] == "odd"


@pytest.fixture
def hashless_index(stack: Stack, tmp_path: Path) -> Iterator[Server]:
    """The default index over a copy of its files, publishing no sha256 (as some mirrors do),
    with einops's module replaced inside a sound zip (its CRC right, its RECORD hash not)."""
    root = tmp_path / "hashless"
    shutil.copytree(stack.dirs.pypi, root)
    einops = root / "einops-1.1.0-py3-none-any.whl"
    _rewrite_member(stack.dirs.pypi / einops.name, einops, "einops/__init__.py", b"X = 1\n")
    s = Server(root, json_api=True, upload_time=UPLOADED, publish_hashes=False)
    s.upload_times.update(stack.pypi.upload_times)
    s.start()
    yield s
    s.stop()


@pytest.mark.slow
def test_wheels_from_an_index_that_publishes_no_hashes_are_checked_whole(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], hashless_index: Server
) -> None:
    """The lock's hashes of such files were computed from a download (uv's), so no published
    hash vouches for them: the build asks the index once, finds no sha256 on its page, and
    checks its wheels whole. The damaged one is refused and evicted."""
    lock = tmp_path / "l.toml"
    args = stack.args("lock", lock, tmp_path / "c", pypi=hashless_index.index_url)
    assert run(args, capsys).code == 0  # a sound zip: the resolver does not notice
    build = stack.args(
        "build",
        tmp_path / "out",
        tmp_path / "c",
        "--lock",
        str(lock),
        pypi=hashless_index.index_url,
    )
    result = run(build, capsys)
    assert result.code == 1, result.err
    last = result.err.strip().splitlines()[-1]
    assert "einops-1.1.0-py3-none-any.whl" in last and "is a damaged wheel" in last, last
    assert "einops/__init__.py does not match the hash in its RECORD" in last
    assert "Traceback" not in result.err
    out = tmp_path / "out"
    assert not out.exists() or not list(out.iterdir())  # no tarball, no partial one
    einops = next(p for p in read_lock(lock).packages if p.name == "einops")
    assert not (tmp_path / "c" / "sha256" / einops.file.sha256[:2] / einops.file.sha256).exists()


# -- names that are paths ------------------------------------------------------------------------


def _edited_lock(stack_lock: Path, tmp_path: Path, old: str, new: str) -> Path:
    text = stack_lock.read_text()
    assert f'name = "{old}"' in text
    path = tmp_path / "edited.toml"
    path.write_text(text.replace(f'name = "{old}"', f'name = "{new}"'))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("pylatexenc-2.10.tar.gz", "../../../escaped-2.10.tar.gz"),
        ("einops-1.1.0-py3-none-any.whl", "../../einops-1.1.0-py3-none-any.whl"),
        ("einops-1.1.0-py3-none-any.whl", "sub/einops-1.1.0-py3-none-any.whl"),
    ],
)
def test_a_lock_with_a_path_for_a_file_name_is_a_usage_error(
    stack: Stack,
    stack_lock: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
) -> None:
    """A file name from the lock becomes a path on this host (the host build copies the sdist
    by name) and in the bundle: `../` is refused before anything is downloaded or written."""
    lock = _edited_lock(stack_lock, tmp_path, old, new)
    work = tmp_path / "deep" / "er"
    code, err = _build(stack, work, capsys, lock, work / "cache")
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and new in last and "not a plain file name" in last
    assert "Traceback" not in err
    written = [p.name for p in tmp_path.rglob("*") if p.name.startswith(("escaped", "einops"))]
    assert written == []
    assert stack.pypi.file_requests() == []  # refused before any download


@pytest.mark.slow
def test_a_mirror_page_with_a_path_for_a_file_name_is_refused(
    stack: Stack, stack_lock: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = Server(stack.dirs.pypi).start()  # another URL: each file is looked up by name
    try:
        mirror.faults.pages["einops"] = (
            "text/html",
            b'<a href="/files/..%2F..%2Feinops-1.1.0-py3-none-any.whl">x</a>',
        )
        args = stack.args("build", tmp_path / "out", tmp_path / "c", "--lock", str(stack_lock))
        args[args.index(f"pypi={stack.pypi.index_url}")] = f"pypi={mirror.index_url}"
        result = run(args, capsys)
        assert result.code == 1
        last = result.err.strip().splitlines()[-1]
        assert "einops" in last and "not a plain file name" in last
        assert "Traceback" not in result.err
    finally:
        mirror.stop()


def test_a_profile_artifact_whose_file_name_is_not_plain_is_a_usage_error(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ROOT / "profiles" / "cu118-legacy.toml").read_text()
    old = 'file = "v{version}/flash_attn-'
    assert old in text
    profile = tmp_path / "hostile.toml"
    profile.write_text(
        text.replace(old, 'file = "v{version}/..\\\\flash_attn-').replace(
            'name = "cu118-legacy"', 'name = "hostile"'
        )
    )
    args = stack.args("lock", tmp_path / "l.toml", tmp_path / "c", "--profile", str(profile))
    result = run(args, capsys)
    assert result.code == 2, result.err
    last = result.err.strip().splitlines()[-1]
    assert "hostile.toml" in last and "not a plain file name" in last and "flash-attn" in last
    assert "Traceback" not in result.err


# -- Ctrl-C during downloads ----------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_stops_downloads_at_once_and_a_rerun_resumes(
    stack: Stack, stack_lock: Path, tmp_path: Path
) -> None:
    """SIGINT to a real `verl-bundle build` while torch trickles in (64 bytes a second, so the
    whole file would take minutes): the build stops without waiting for it, the partial file
    stays, and the next build asks for the rest with a Range request."""
    torch = next(p for p in read_lock(stack_lock).packages if p.name == "torch")
    stack.pytorch.faults.slow[TORCH] = (64, 1.0)
    cache = tmp_path / "c"
    partial = cache / "partial" / f"{torch.file.sha256}.part"
    args = stack.args("build", tmp_path / "out", cache, "--lock", str(stack_lock))
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_bundle", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_environ(tmp_path),
        cwd=tmp_path,
        # As from a terminal: a test run started in the background inherits SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while not (partial.exists() and partial.stat().st_size >= 128):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the download never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # the whole file would need minutes more
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    kept = partial.stat().st_size
    assert 128 <= kept < (torch.file.size or 0)
    assert not (cache / "sha256" / torch.file.sha256[:2] / torch.file.sha256).exists()
    del stack.pytorch.faults.slow[TORCH]
    stack.pytorch.clear()
    rerun = subprocess.run(
        [sys.executable, "-m", "verl_bundle", *args],
        capture_output=True,
        text=True,
        env=clean_environ(tmp_path),
        cwd=tmp_path,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr
    ranges = [r.range for r in stack.pytorch.file_requests() if r.path.endswith(TORCH)]
    assert ranges == [f"bytes={kept}-"]


def _ours(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (a test's own scratch path)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_a_build_killed_mid_download_leaves_no_worker_behind(
    stack: Stack, stack_lock: Path, tmp_path: Path
) -> None:
    """kill -9 while torch trickles in and the wheel checks' workers run: whoever reads the
    build's output sees its end at once, and the workers exit on their own."""
    stack.pytorch.faults.slow[TORCH] = (64, 1.0)
    cache = tmp_path / "c"
    args = stack.args("build", tmp_path / "out", cache, "--lock", str(stack_lock))
    env = clean_environ(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_bundle", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while not any((cache / "checked").glob("*")):  # the checks' workers are running
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no wheel was checked"
            time.sleep(0.1)
        proc.kill()
        proc.communicate(timeout=30)  # no worker holds the output open
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = time.monotonic() + 10
    while _ours(env["XDG_CACHE_HOME"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(env["XDG_CACHE_HOME"]) == []


# -- host-built wheels are reproducible -----------------------------------------------------------


def test_two_cold_host_builds_give_byte_identical_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sdist's backend writes entries in random order stamped with the build's time (as
    many real backends do); the host's wheel must not depend on either."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    sdist = build_sdist(
        tmp_path / "src",
        "quantile-python",
        "1.1",
        modules={"quantile": "X = 1\n", "quantile/extra": "Y = 2\n", "zz_last": "Z = 3\n"},
        unstable=True,
    )
    digest = sha256_file(sdist)
    wheels = [
        build_pure_wheel(
            "quantile-python",
            sdist,
            sdist.name,
            digest,
            Cache(tmp_path / f"cache{i}"),
            None,
            Redactor(),
        )
        for i in range(2)
    ]
    assert wheels[0].path != wheels[1].path
    assert wheels[0].path.read_bytes() == wheels[1].path.read_bytes()
    assert wheel_problem(wheels[0].path) is None
    with zipfile.ZipFile(io.BytesIO(wheels[0].path.read_bytes())) as zf:
        names = [i.filename for i in zf.infolist()]
        assert names[-1].endswith(".dist-info/RECORD") and names[:-1] == sorted(names[:-1])
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
