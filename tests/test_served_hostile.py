"""A served copy that is hostile (issue 22 #1-#4): redirects to another host, bodies sent
endlessly, cut short or trickled, a copy replaced consistently, a --work directory holding
someone else's files, a planted default work directory, lists that clash. The server is a real
threaded HTTP server on a loopback address (tests/hostile_http.py); the node is the real
`python -m verl_bundle.airgap install --from` subprocess."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, clean_environ
from support.airgap import python310, resign
from support.hostile_http import Hostile, hostile

from verl_bundle.airgap.contract import manifest as mf

pytestmark = pytest.mark.slow

SECRET = "s3cret-pass"  # noqa: S105 - must never be shown or sent elsewhere


@pytest.fixture
def bundle(built_bundle: tuple[Path, Path, dict[str, object]]) -> Path:
    return built_bundle[1]  # served read-only


@pytest.fixture
def head(bundle: Path) -> Iterator[Hostile]:
    yield from hostile(bundle)


@pytest.fixture
def other(bundle: Path) -> Iterator[Hostile]:
    yield from hostile(bundle, "127.0.0.2")


def node(
    url: str, tmp: Path, *args: str, timeout: int = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The Python installer's --from on this node: a dry run of the fetched copy."""
    base = {**clean_environ(tmp), "HOME": str(tmp), "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "verl_bundle.airgap", "install", "--from", url, *args],
        capture_output=True,
        text=True,
        env=base,
        cwd=tmp,
        timeout=timeout,
    )


def dry(tmp: Path) -> list[str]:
    return ["--prefix", str(tmp / "p"), "--python", python310(), "--dry-run"]


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed fetch says (progress lines aside); never a traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [
        line
        for line in proc.stderr.splitlines()
        if not line.startswith(("install.sh: fetching ", "install.sh: fetching: "))
    ]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def a_wheel(bundle: Path) -> tuple[str, int]:
    f = next(f for f in mf.load(str(bundle)).files if f.name == "einops")
    return f.path, f.size


def test_credentials_go_only_to_their_own_host(
    bundle: Path, head: Hostile, other: Hostile, tmp_path: Path
) -> None:
    head.need_auth = "Basic " + base64.b64encode(f"node:{SECRET}".encode()).decode()
    same = head.url + "same/"
    head.behaviours["same/"] = lambda h, rel: h.plain(rel)
    head.behaviours["lib/"] = lambda h, rel: h.redirect(f"{same}lib/{rel}")
    head.behaviours["wheels/"] = lambda h, rel: h.redirect(f"{other.url}wheels/{rel}")
    url = head.url.replace("http://", f"http://node:{SECRET}@")
    proc = node(url, tmp_path, "--work", str(tmp_path / "w"), *dry(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert [rel for rel, _ in other.seen if rel.startswith("wheels/")]
    assert all("Authorization" not in headers for _, headers in other.seen)
    followed = [h for rel, h in head.seen if rel.startswith("same/lib/")]
    assert followed and all(h.get("Authorization") == head.need_auth for h in followed)


def test_a_body_sent_endlessly_is_cut_at_the_size_the_manifest_states(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    wheel, size = a_wheel(bundle)
    head.behaviours[wheel] = lambda h, rel: h.endless()
    proc = node(head.url, tmp_path, "--work", str(tmp_path / "w"), *dry(tmp_path), timeout=120)
    assert proc.returncode == 3
    assert last_line(proc) == (
        f"install.sh: the served bundle is damaged: {wheel} is longer than the {size} bytes the "
        "manifest states; nothing was installed. Copy the bundle to the server again"
    )
    assert head.sent < 64 << 20  # the socket buffers, not the endless body
    assert not (tmp_path / "w" / wheel).exists()


def test_a_short_body_is_resumed_and_one_short_every_time_is_a_broken_transfer(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    wheel, size = a_wheel(bundle)
    work = tmp_path / "w"
    head.behaviours[wheel] = lambda h, rel: h.short(wheel)
    proc = node(head.url, tmp_path, "--work", str(work), *dry(tmp_path), timeout=120)
    assert proc.returncode == 1
    line = last_line(proc)
    assert line.startswith(f"install.sh: the transfer of {wheel} broke 4 times (")
    assert f"{size // 2} of {size} bytes arrived" in line
    assert line.endswith("run again to continue: what arrived is kept")
    parts = list((work / ".verl-bundle-fetch" / "parts").iterdir())
    assert [p.stat().st_size for p in parts] == [size // 2]
    # The server mends: the rerun asks only for the rest, and the copy installs.
    del head.behaviours[wheel]
    head.seen.clear()
    proc = node(head.url, tmp_path, "--work", str(work), *dry(tmp_path))
    assert proc.returncode == 0, proc.stderr
    asked = [h.get("Range") for rel, h in head.seen if rel == wheel]
    assert asked == [f"bytes={size // 2}-"]


def test_a_trickling_server_meets_the_deadline_with_progress_lines(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    wheel, _ = a_wheel(bundle)
    head.behaviours[wheel] = lambda h, rel: h.trickle(wheel)
    work = str(tmp_path / "w")
    # The trickle takes minutes; the deadline ends the fetch, not the trickle (the timeout is
    # for a hang, well above the deadline, not a measure of speed).
    proc = node(head.url, tmp_path, "--work", work, "--deadline", "12", *dry(tmp_path), timeout=150)
    assert proc.returncode == 1
    shown = [ln for ln in proc.stderr.splitlines() if ln.startswith("install.sh: fetching: ")]
    assert shown  # a progress line every 10 s
    for ln in shown:  # this pool's files of this pool's count, never more
        done, total = map(int, re.findall(r"fetching: (\d+) of (\d+) files", ln)[0])
        assert done <= total, ln
    line = last_line(proc)
    assert re.match(r"install.sh: gave up after \d+ s \(--deadline\)", line), line
    assert line.endswith("run again to continue: what arrived is kept")


def test_a_copy_replaced_consistently_is_refused_by_the_pin(bundle: Path, tmp_path: Path) -> None:
    pin = hashlib.sha256((bundle / "SHA256SUMS").read_bytes()).hexdigest()
    root = tmp_path / "served"
    shutil.copytree(bundle, root)
    (root / "install.sh").write_text((root / "install.sh").read_text() + "touch /tmp/owned\n")
    resign(root)
    replaced = hashlib.sha256((root / "SHA256SUMS").read_bytes()).hexdigest()
    for server in hostile(root):
        work = tmp_path / "w"
        proc = node(server.url, tmp_path, "--bundle-sha256", pin, "--work", str(work))
        assert proc.returncode == 3
        assert last_line(proc) == (
            f"install.sh: {server.url}SHA256SUMS has sha256 {replaced}, not the {pin} this "
            "node is pinned to (--bundle-sha256): another bundle is served there; nothing "
            "was fetched"
        )
        assert [p.name for p in work.iterdir()] == [".verl-bundle-fetch"]
        proc = node(server.url, tmp_path, "--bundle-sha256", "abc", "--work", str(work))
        assert proc.returncode == 2 and "--bundle-sha256 'abc': give the 64 hex" in proc.stderr


def test_work_never_deletes_what_it_did_not_write(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    work = tmp_path / "theirs"
    (work / "notes").mkdir(parents=True)
    (work / "SHA256SUMS").write_text("someone else's\n")
    (work / "notes" / "thesis.tex").write_text("years of work\n")
    before = sorted(p.relative_to(work).as_posix() for p in work.rglob("*"))
    proc = node(head.url, tmp_path, "--work", str(work), *dry(tmp_path))
    assert proc.returncode == 2
    assert last_line(proc) == (
        f"install.sh: --work {work}: not empty and not a directory a fetch made (no "
        ".verl-bundle-fetch/ in it); give a new or empty directory: nothing in it was touched"
    )
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == before
    assert head.seen == []


def test_the_default_work_directory_is_never_one_another_user_planted(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    tmpdir, theirs = tmp_path / "tmp", tmp_path / "theirs"
    tmpdir.mkdir()
    theirs.mkdir(mode=0o777)
    planted = tmpdir / f"verl-bundle-{os.getuid()}"
    planted.symlink_to(theirs)  # the predictable name, pointing at their directory
    proc = node(head.url, tmp_path, *dry(tmp_path), env={"TMPDIR": str(tmpdir)})
    assert proc.returncode == 0, proc.stderr
    assert f"{planted} is not a directory of ours with mode 0700: a fresh one" in proc.stderr
    assert list(theirs.iterdir()) == []
    assert [p.name for p in tmpdir.iterdir()] == [planted.name]  # the fresh copy went after
    # Ours (mode 0700): the stable place, named per host, removed after success.
    planted.unlink()
    proc = node(head.url, tmp_path, *dry(tmp_path), env={"TMPDIR": str(tmpdir)})
    assert proc.returncode == 0, proc.stderr
    assert f"into {planted}/served-" in proc.stderr
    assert list(tmpdir.iterdir()) == []


def test_a_second_fetch_into_one_work_directory_is_refused_in_one_line(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    (work / ".verl-bundle-fetch").mkdir(parents=True)
    with open(work / ".verl-bundle-fetch" / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another install.sh, still fetching
        proc = node(head.url, tmp_path, "--work", str(work), *dry(tmp_path))
    assert proc.returncode == 1
    assert last_line(proc) == (
        f"install.sh: another install.sh is fetching into {work}; wait for it to end, or "
        "give another --work"
    )


def test_clashing_names_proc_paths_and_redirect_loops_are_one_line(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(bundle, root)
    wheel, _ = a_wheel(bundle)
    digest = hashlib.sha256(b"x").hexdigest()
    with open(root / "SHA256SUMS", "a") as fh:
        fh.write(f"{digest}  {wheel}/x\n")  # the wheel, and a file inside it
    for server in hostile(root):
        proc = node(server.url, tmp_path, "--work", str(tmp_path / "w"))
        assert proc.returncode == 3
        assert last_line(proc) == (
            f"install.sh: the served bundle is damaged: SHA256SUMS lists {wheel} both as a "
            f"file and as the directory of {wheel}/x"
        )
    proc = node(head.url, tmp_path, "--work", "/proc/self/verl-work")
    assert proc.returncode == 2
    assert last_line(proc).startswith("install.sh: --work /proc/self/verl-work: ")
    head.behaviours["SHA256SUMS"] = lambda h, rel: h.redirect(head.url + "SHA256SUMS")
    proc = node(head.url, tmp_path, "--work", str(tmp_path / "w2"))
    assert proc.returncode == 1
    assert last_line(proc) == (
        f"install.sh: {head.url}SHA256SUMS: the server redirects in a loop or more than 5 "
        "times (HTTP 302); serve the bundle itself at --from URL"
    )


def test_serve_gives_each_bundle_its_pin_ranges_and_nothing_outside_it(
    bundle: Path, tmp_path: Path
) -> None:
    """`python3 -m verl_bundle.airgap serve DIR`: the line a node needs (URL and pin), HTTP
    Range for resuming, no file outside DIR through a link, and a pinned install through it."""
    import urllib.error
    import urllib.request

    root = tmp_path / "srv"
    root.mkdir()
    shutil.copytree(bundle, root / bundle.name)
    (tmp_path / "secret.txt").write_text("not served\n")
    (root / "leak").symlink_to(tmp_path / "secret.txt")
    env = {**clean_environ(tmp_path), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "verl_bundle.airgap", "serve", str(root), "--bind", "127.0.0.1"]
    server = subprocess.Popen(
        [*argv, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert server.stdout is not None
        first, second = server.stdout.readline(), server.stdout.readline()
        base = first.split(" at ")[1].split(" ")[0]
        assert first.startswith(f"serving {root} at http://127.0.0.1:") and "backlog 1024" in first
        pin = hashlib.sha256((bundle / "SHA256SUMS").read_bytes()).hexdigest()
        url = f"{base}{bundle.name}/"
        assert second.strip() == f"install.sh --from {url} --bundle-sha256 {pin}"
        wheel, size = a_wheel(bundle)
        request = urllib.request.Request(url + wheel, headers={"Range": "bytes=100-"})  # noqa: S310
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - loopback
            assert resp.status == 206
            assert resp.headers["Content-Range"] == f"bytes 100-{size - 1}/{size}"
            assert resp.read() == (bundle / wheel).read_bytes()[100:]
        with pytest.raises(urllib.error.HTTPError) as leak:
            urllib.request.urlopen(base + "leak", timeout=30)  # noqa: S310 - loopback
        assert leak.value.code == 404
        leak.value.close()
        proc = node(url, tmp_path, "--bundle-sha256", pin, *dry(tmp_path))
        assert proc.returncode == 0, proc.stderr
        assert f"pinned to SHA256SUMS {pin[:16]}" in proc.stderr
    finally:
        server.terminate()
        server.communicate(timeout=30)  # and its pipes closed
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        taken = subprocess.run([*argv, "--port", port], capture_output=True, text=True, env=env)
    assert taken.returncode == 2 and len(taken.stderr.splitlines()) == 1
    assert "cannot listen on 127.0.0.1:" in taken.stderr


# (name, whether contract/names.py's bundle_path takes it as a path inside the bundle)
NAMES = [
    ("wheels/torch-2.6.0-cp310-cp310-linux_x86_64.whl", True),
    ("lib/verl_bundle/airgap/cli.py", True),
    ("SHA256SUMS", True),
    ("lib/../../S5-ESCAPED", False),
    ("..", False),
    ("/etc/passwd", False),
    ("wheels//x.whl", False),
    ("wheels/./x.whl", False),
    ("wheels/-x.whl", False),
    ("wheels/x\x1b[2J.whl", False),
    ("wheels/x\\y.whl", False),
    ("wheels/ x.whl", False),
    ("wheels/x:y.whl", False),
    ("", False),
]


@pytest.mark.parametrize(("name", "good"), NAMES)
def test_the_fetchers_name_rules_agree_with_the_bundles(name: str, good: bool) -> None:
    """served.py keeps its own copy of contract/names.py's rules (it runs before anything of
    the served copy is trusted): both take and refuse the same names."""
    from verl_bundle.airgap.contract.names import UnsafeNameError, bundle_path
    from verl_bundle.airgap.verify import served

    try:
        bundle_path(name, "SHA256SUMS")
        theirs = True
    except UnsafeNameError:
        theirs = False
    try:
        served.bundle_path(name, "SHA256SUMS")
        ours = True
    except served.TransferError as exc:
        ours = False
        assert exc.code == 3 and exc.message.startswith("the served bundle is damaged: SHA256SUMS:")
    assert ours == theirs == good


def test_a_hostile_name_is_refused_by_the_fetcher_not_by_the_served_copy(
    bundle: Path, tmp_path: Path
) -> None:
    """A served copy whose names.py accepts any path and whose SHA256SUMS lists one that
    leaves --work: the approved install.sh, alone and unpinned, refuses it with its own rules
    before anything is fetched, and nothing is written outside --work."""
    import hashlib as h

    root = tmp_path / "served"
    shutil.copytree(bundle, root)
    names = root / "lib/verl_bundle/airgap/contract/names.py"
    marker = 'def bundle_path(path: str, where: str = "a bundle path") -> str:\n'
    names.write_text(names.read_text().replace(marker, marker + "    return path\n", 1))
    payload = b"written outside the work directory\n"
    kept = [
        line
        for line in (root / "SHA256SUMS").read_text().splitlines()
        if not line.endswith("  lib/verl_bundle/airgap/contract/names.py")
    ]
    kept.append(
        f"{h.sha256(names.read_bytes()).hexdigest()}  lib/verl_bundle/airgap/contract/names.py"
    )
    kept.append(f"{h.sha256(payload).hexdigest()}  lib/../../S5-ESCAPED")
    (root / "SHA256SUMS").write_text("\n".join(kept) + "\n")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(bundle / "install.sh", alone / "install.sh")  # "this file may come alone"
    work = tmp_path / "a" / "b" / "w"
    work.parent.mkdir(parents=True)
    for server in hostile(root):

        def give(handler: Any, _rest: str) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)

        server.behaviours["S5"] = give
        server.behaviours["lib/../../S5"] = give
        env = {**clean_environ(tmp_path), "HOME": str(tmp_path)}
        cmd = ["sh", str(alone / "install.sh"), "--from", server.url, "--work", str(work)]
        proc = subprocess.run(
            [*cmd, *dry(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )
        assert proc.returncode == 3, proc.stderr
        assert last_line(proc) == (
            "install.sh: the served bundle is damaged: SHA256SUMS: '..' is not a plain file name"
        )
        assert not [rel for rel, _ in server.seen if "S5" in rel]
    assert not (tmp_path / "a" / "b" / "S5-ESCAPED").exists()
    assert not (tmp_path / "a" / "S5-ESCAPED").exists()


def test_a_link_in_the_work_directory_is_never_written_through(
    bundle: Path, head: Hostile, tmp_path: Path
) -> None:
    work, outside = tmp_path / "w", tmp_path / "outside"
    first = node(head.url, tmp_path, "--work", str(work), *dry(tmp_path))
    assert first.returncode == 0, first.stderr
    outside.mkdir()
    shutil.rmtree(work / "wheels")
    (work / "wheels").symlink_to(outside)
    again = node(head.url, tmp_path, "--work", str(work), *dry(tmp_path))
    assert again.returncode == 2, again.stderr
    assert "would be written outside it, through" in last_line(again)
    assert list(outside.iterdir()) == []
