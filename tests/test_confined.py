"""airgap/confined.py: every write below a directory the tool owns, with real symbolic links,
FIFOs and hard links planted where it writes; the file they lead to must keep its bytes."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from verl_bundle.airgap.confined import (
    Beside,
    Confined,
    UnsafePathError,
    append_outside,
    check_output,
)
from verl_bundle.airgap.errors import ServerError

PRECIOUS = b"precious\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(PRECIOUS)
    return victim


@pytest.fixture
def root(tmp_path: Path) -> Path:
    where = tmp_path / "prefix"
    where.mkdir()
    return where


def test_nothing_is_written_through_a_link_on_the_way(root: Path, outside: Path) -> None:
    (root / "site").mkdir()
    (root / "site" / "einops").symlink_to(outside.parent)
    with Confined(str(root)) as c:
        with pytest.raises(UnsafePathError, match="einops: a symbolic link or not a directory"):
            c.write_atomic("site/einops/__init__.py", "x")
        with pytest.raises(UnsafePathError):
            c.append("site/einops/victim")
        with pytest.raises(UnsafePathError):
            c.makedirs("site/einops/sub")
    assert outside.read_bytes() == PRECIOUS
    assert sorted(p.name for p in outside.parent.iterdir()) == ["victim"]


def test_a_link_at_the_final_name_is_replaced_or_refused_never_followed(
    root: Path, outside: Path
) -> None:
    (root / "marker").symlink_to(outside)
    (root / "log").symlink_to(outside)
    (root / "new").symlink_to(outside)
    with Confined(str(root)) as c:
        c.write_atomic("marker", "done\n")  # the link itself replaced
        with pytest.raises(UnsafePathError, match="a symbolic link or not a regular file"):
            c.append("log")
        with c.append("new", fresh=True) as fh:  # the link removed, a real file made
            fh.write("phase log\n")
        with pytest.raises(FileExistsError):
            c.create("log")  # O_EXCL: never an existing name
    assert (root / "marker").read_text() == "done\n" and not (root / "marker").is_symlink()
    assert (root / "new").read_text() == "phase log\n" and not (root / "new").is_symlink()
    assert (root / "log").is_symlink()
    assert outside.read_bytes() == PRECIOUS


def test_a_fifo_or_a_hard_link_is_never_opened_for_a_log(root: Path, outside: Path) -> None:
    os.mkfifo(root / "fifo")
    os.link(outside, root / "hard")
    with Confined(str(root)) as c:
        with pytest.raises(UnsafePathError, match="not a regular file"):
            c.append("fifo")  # O_NONBLOCK: refused at once, no reader needed
        with pytest.raises(UnsafePathError, match="other links"):
            c.append("hard")
    assert outside.read_bytes() == PRECIOUS


def test_remove_takes_the_link_never_its_target(root: Path, outside: Path) -> None:
    (root / "pkg").symlink_to(outside.parent)
    tree = root / "tree" / "deep"
    tree.mkdir(parents=True)
    (tree / "f").write_text("x")
    (tree / "out").symlink_to(outside.parent)
    with Confined(str(root)) as c:
        assert c.remove("pkg") is True
        assert c.remove("tree") is True
        assert c.remove("gone") is False
    assert not os.path.lexists(root / "pkg") and not (root / "tree").exists()
    assert outside.read_bytes() == PRECIOUS


def test_paths_that_leave_by_name_are_refused(root: Path) -> None:
    with Confined(str(root)) as c:
        for bad in ("../x", "/etc/passwd", "a/../../x", "", "a//b"):
            with pytest.raises(UnsafePathError, match="not a plain relative path"):
                c.write_atomic(bad, "x")


def test_a_parent_every_user_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "prefix").mkdir()
    with pytest.raises(UnsafePathError, match="every user can write"):
        Confined(str(shared / "prefix"))
    shared.chmod(0o777 | stat.S_ISVTX)  # like /tmp
    Confined(str(shared / "prefix")).close()


def test_links_leaving_names_only_those_that_leave(root: Path, outside: Path) -> None:
    site = root / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "einops").symlink_to(outside.parent)
    (site / "inside").symlink_to(root / "lib")
    (site / "dangling").symlink_to("/nonexistent/elsewhere")
    (root / "lib64").symlink_to("lib")
    with Confined(str(root)) as c:
        found = c.links_leaving("lib")
        assert found == [
            ("lib/site-packages/dangling", "/nonexistent/elsewhere"),
            ("lib/site-packages/einops", str(outside.parent)),
        ]
        assert c.rel(str(root / "lib64" / "site-packages")) == "lib/site-packages"


def test_an_operator_named_log_refuses_a_link_and_appends_to_a_file(
    tmp_path: Path, outside: Path
) -> None:
    link = tmp_path / "install.log"
    link.symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"--log .*install.log: a symbolic link"):
        append_outside(str(link), "--log")
    plain = tmp_path / "plain.log"
    plain.write_text("before\n")
    with append_outside(str(plain), "--log") as fh:
        fh.write("after\n")
    assert plain.read_text() == "before\nafter\n"
    assert outside.read_bytes() == PRECIOUS


def test_beside_writes_in_a_private_directory_and_renames_into_place(
    tmp_path: Path, outside: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "env.sqfs"
    (out / "env.sqfs.partial").symlink_to(outside)  # the old fixed names: never used
    with Beside(str(target)) as b:
        private = Path(b.path("image")).parent
        assert private.parent == out and stat.S_IMODE(private.stat().st_mode) == 0o700
        Path(b.path("image")).write_bytes(b"hsqs")
        b.work.write_atomic("sha256", "abc  env.sqfs\n")
        b.commit("image", "env.sqfs")
        b.commit("sha256", "env.sqfs.sha256")
    assert target.read_bytes() == b"hsqs" and (out / "env.sqfs.sha256").is_file()
    assert sorted(p.name for p in out.iterdir()) == [
        "env.sqfs",
        "env.sqfs.partial",
        "env.sqfs.sha256",
    ]
    assert outside.read_bytes() == PRECIOUS
    (out / "adir").mkdir()
    with pytest.raises(UnsafePathError, match="a directory is there"):
        check_output(str(out / "adir"), "--image")
    with pytest.raises(UnsafePathError, match="a symbolic link is there"):
        check_output(str(out / "env.sqfs.partial"), "--image")


def test_a_refusal_is_one_server_error_and_an_os_error() -> None:
    exc = UnsafePathError("x: a symbolic link; nothing was written there")
    assert isinstance(exc, ServerError) and isinstance(exc, OSError) and exc.code == 1


def test_runs_on_python38(tmp_path: Path, outside: Path) -> None:
    """The server program's floor: the same refusals on the oldest Python it supports."""
    py38 = Path.home() / ".pyenv" / "versions"
    found = sorted(py38.glob("3.8*/bin/python3.8"))
    if not found:
        pytest.skip("needs a Python 3.8 under ~/.pyenv")
    root = tmp_path / "p"
    root.mkdir()
    (root / "pkg").symlink_to(outside.parent)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from verl_bundle.airgap.confined import Confined, UnsafePathError\n"
        "c = Confined(sys.argv[2])\n"
        "try:\n    c.write_atomic('pkg/victim', 'x')\nexcept UnsafePathError as e:\n    print('refused')\n"
        "c.write_atomic('pkg', 'now a file'); c.remove('pkg'); print(c.links_leaving(''))\n"
    )
    proc = subprocess.run(
        [str(found[-1]), "-I", "-B", "-c", code, str(ROOT), str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["refused", "[]"]
    assert outside.read_bytes() == PRECIOUS
