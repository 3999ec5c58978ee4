"""Sources that are not an index's files (profile/sources.py, fetch/sourcebuild.py): each SPEC
form parsed, and made into a wheel by its own build system, from a tree, a wheel, an sdist and
git (a bare repository read in place, a file:// URL, and a real git daemon on 127.0.0.1)."""

from __future__ import annotations

import socket
import zipfile
from pathlib import Path

import pytest
from support.gitserve import GitDaemon, bare_clone, commit_tree, git
from support.pkgindex import build_sdist, build_wheel, write_source_tree

from verl_bundle.credentials import Redactor
from verl_bundle.errors import HostBuildError, UsageError
from verl_bundle.net.cache import Cache
from verl_bundle.profile.sources import (
    Git,
    Release,
    SdistFile,
    Tree,
    WheelFile,
    parse_spec,
    requirement_source,
)
from verl_bundle.progress import Silent
from verl_bundle.sources.sourcebuild import SourceBuilder
from verl_bundle.sources.tree import tree_sha256, tree_state


def fork_tree(where: Path, version: str = "0.2.0.post2") -> Path:
    """A verl-like source tree with a module of the fork's own (verl/fork_ext), a directory
    without __init__.py (which setuptools' find_packages would leave out) and a
    [tool.uv.sources] pointing at a git host that does not exist (never to be asked)."""
    return write_source_tree(
        where,
        "verl",
        version,
        requires=["numpy"],
        modules={"verl": f"__version__ = {version!r}\n", "verl/fork_ext": "FORKED = True\n"},
        files={"verl/fork_pkg/mod.py": b"LEFT = 'out'\n", "docs/manual.pdf": b"%PDF-1.4\n"},
        pyproject_extra=(
            "\n[tool.uv.sources]\n"
            'mbridge = { git = "https://git.invalid/ISEEKYAN/mbridge.git", rev = "641a5a0" }\n'
        ),
    )


def builder(tmp_path: Path, **mirrors: str) -> SourceBuilder:
    # No index: the in-tree backend needs no build requirements, so nothing is downloaded.
    return SourceBuilder(Cache(tmp_path / "cache"), None, Redactor(), Silent(), mirrors)


def names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


# -- SPEC forms ------------------------------------------------------------------------------


def test_each_spec_form_is_told_apart(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "fork")
    wheel = build_wheel(tmp_path / "w", "verl", "0.9.1")
    sdist = build_sdist(tmp_path / "s", "verl", "0.9.1")
    assert parse_spec(str(tree), "--verl") == Tree(tree)
    assert parse_spec(f"file://{tree}", "--verl") == Tree(tree)
    assert parse_spec(str(wheel), "--verl") == WheelFile(wheel)
    assert parse_spec(str(sdist), "--verl") == SdistFile(sdist)
    assert parse_spec("0.9.1", "--verl") == Release("0.9.1")
    got = parse_spec("git+https://github.com/verl-project/verl.git@7bc80c00", "--verl")
    assert got == Git("https://github.com/verl-project/verl.git", "7bc80c00")
    token = parse_spec("git+https://user:s3cret@git.corp/verl.git@main", "--verl")
    assert isinstance(token, Git) and token.clean == "https://git.corp/verl.git"
    assert "s3cret" not in token.describe()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("not-a-version!", "not a directory, a wheel or sdist file, a git URL"),
        ("./missing-dir", "no such file or directory"),
        ("git+ftp://host/repo.git@v1", "not a git URL"),
        ("git+https://host/repo.git@v1#subdirectory=pkg", "fragment (subdirectory=) is not"),
    ],
)
def test_a_bad_spec_is_one_line(spec: str, words: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_spec(spec, "--verl")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_requirement_names_its_source_by_url(tmp_path: Path) -> None:
    found = requirement_source(f"tinypkg[x] @ file://{tmp_path} ; python_version >= '3.8'")
    assert found is not None and found.name == "tinypkg" and found.extras == ("x",)
    assert found.spec == Tree(tmp_path)
    assert requirement_source("torch==2.1.2") is None
    with pytest.raises(UsageError, match="a direct URL; give a local path"):
        requirement_source("tinypkg @ https://host/tinypkg-1.0-py3-none-any.whl")


# -- trees -------------------------------------------------------------------------------------


def test_a_tree_is_built_by_its_own_build_system_with_the_forks_module(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "fork")
    made = builder(tmp_path).make("verl", Tree(tree))
    assert (made.name, made.version) == ("verl", "0.2.0.post2")
    inside = names(made.wheel.path)
    assert "verl/fork_ext/__init__.py" in inside
    # The tree is never written into: its build ran in a copy.
    assert not (tree / "build").exists() and not list(tree.glob("*.egg-info"))
    # The directory without __init__.py is one note, not silence.
    (note,) = made.notes
    assert "src/verl/fork_pkg/mod.py" in note and "has no __init__.py" in note
    assert made.source.kind == "tree" and made.source.origin == str(tree)
    assert made.source.tree_sha256 == tree_sha256(tree, tree_state(tree).files)
    # Stored in the download cache under its own hash, where the fetch stage looks: the wheel
    # built into the cache is linked there, not written a second time.
    blob = Cache(tmp_path / "cache").lookup(made.wheel.sha256)
    assert blob is not None and blob != made.wheel.path
    assert blob.stat().st_ino == made.wheel.path.stat().st_ino


def test_the_tree_hash_follows_content_and_mode_not_place(tmp_path: Path) -> None:
    a = fork_tree(tmp_path / "a")
    b = fork_tree(tmp_path / "b")
    files = tree_state(a).files
    assert tree_sha256(a, files) == tree_sha256(b, files)
    (b / "src" / "verl" / "fork_ext" / "__init__.py").write_text("FORKED = False\n")
    assert tree_sha256(a, files) != tree_sha256(b, files)
    (b / "src" / "verl" / "fork_ext" / "__init__.py").write_text("FORKED = True\n")
    (b / "test_backend.py").chmod(0o755)
    assert tree_sha256(a, files) != tree_sha256(b, files)


def test_a_checkout_records_its_commit_and_whether_it_is_dirty(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "fork")
    (tree / ".gitignore").write_text("*.log\n")
    commit = commit_tree(tree)
    (tree / "build.log").write_text("ignored: never part of the tree\n")
    clean = builder(tmp_path).make("verl", Tree(tree))
    assert clean.source.commit == commit and not clean.source.dirty
    assert "build.log" not in tree_state(tree).files
    (tree / "src" / "verl" / "fork_ext" / "__init__.py").write_text("FORKED = 'dirty'\n")
    dirty = builder(tmp_path).make("verl", Tree(tree))
    assert dirty.source.commit == commit and dirty.source.dirty
    assert dirty.source.tree_sha256 != clean.source.tree_sha256
    assert dirty.wheel.sha256 != clean.wheel.sha256
    assert "dirty" in dirty.source.describe() and commit[:12] in dirty.source.describe()


def test_the_same_tree_gives_the_same_wheel_bytes(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "fork")
    first = builder(tmp_path / "one").make("verl", Tree(tree))
    second = builder(tmp_path / "two").make("verl", Tree(tree))
    assert first.wheel.sha256 == second.wheel.sha256


def test_a_tree_of_another_package_is_one_line(tmp_path: Path) -> None:
    tree = write_source_tree(tmp_path / "other", "notverl", "1.0")
    with pytest.raises(UsageError, match="builds notverl, not verl"):
        builder(tmp_path).make("verl", Tree(tree))


def test_a_tree_that_does_not_build_is_one_line(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "fork")
    (tree / "test_backend.py").write_text("raise SystemExit('the backend is broken')\n")
    with pytest.raises(HostBuildError) as err:
        builder(tmp_path).make("verl", Tree(tree))
    assert "with its own build system failed" in str(err.value)
    assert "\n" not in str(err.value)


# -- files -------------------------------------------------------------------------------------


def test_a_wheel_and_an_sdist_file(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "verl", "0.9.1", modules={"verl": "", "verl/mine": ""})
    made = builder(tmp_path).make("verl", WheelFile(wheel))
    assert made.version == "0.9.1" and made.source.kind == "wheel"
    assert made.wheel.path == wheel
    # The user's own wheel is copied into the cache (a rebuild may rewrite it in place).
    blob = Cache(tmp_path / "cache").lookup(made.wheel.sha256)
    assert blob is not None and blob.read_bytes() == wheel.read_bytes()
    assert blob.stat().st_ino != wheel.stat().st_ino
    sdist = build_sdist(tmp_path / "s", "verl", "0.9.2", modules={"verl": "", "verl/mine": ""})
    made = builder(tmp_path).make("verl", SdistFile(sdist))
    assert made.version == "0.9.2" and made.source.kind == "sdist"
    assert "verl/mine/__init__.py" in names(made.wheel.path)


# -- git ---------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository of the fork at one commit, below tmp_path/served/."""
    tree = fork_tree(tmp_path / "checkout")
    commit = commit_tree(tree)
    (tmp_path / "served").mkdir()
    return bare_clone(tree, tmp_path / "served" / "verl.git"), commit


def test_git_from_a_mirror_read_in_place(tmp_path: Path, repo: tuple[Path, str]) -> None:
    bare, commit = repo
    spec = Git("https://github.com/verl-project/verl.git", commit[:7])
    made = builder(tmp_path, verl=f"file://{bare}").make("verl", spec)
    assert "verl/fork_ext/__init__.py" in names(made.wheel.path)
    s = made.source
    assert (s.kind, s.origin, s.rev, s.commit) == ("git", spec.url, commit[:7], commit)
    assert f"read from the mirror file://{bare}" in made.notes[-1]
    assert not (tmp_path / "cache" / "git").exists()  # nothing was copied
    # The same commit from the checkout itself gives the same wheel.
    again = builder(tmp_path / "b").make("verl", Tree(tmp_path / "checkout"))
    assert again.wheel.sha256 == made.wheel.sha256


def test_git_fetched_from_a_git_daemon(tmp_path: Path, repo: tuple[Path, str]) -> None:
    _, commit = repo
    with GitDaemon(tmp_path / "served") as daemon:
        url = daemon.url("verl.git")
        by_commit = builder(tmp_path).make("verl", parse_spec(f"git+{url}@{commit}", "--verl"))
        by_branch = builder(tmp_path / "b").make("verl", parse_spec(f"git+{url}@main", "--verl"))
    assert by_commit.source.commit == by_branch.source.commit == commit
    assert by_commit.wheel.sha256 == by_branch.wheel.sha256
    assert "verl/fork_ext/__init__.py" in names(by_commit.wheel.path)


def test_a_revision_not_in_the_mirror_is_one_line(tmp_path: Path, repo: tuple[Path, str]) -> None:
    bare, _ = repo
    with pytest.raises(UsageError) as err:
        builder(tmp_path, verl=str(bare)).make("verl", Git("https://h.invalid/v.git", "v9.9"))
    assert "revision 'v9.9' is not in" in str(err.value)


def test_an_unreachable_git_host_names_the_mirror_option(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that was free: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"git://127.0.0.1:{port}/verl.git"
    with pytest.raises(HostBuildError) as err:
        builder(tmp_path).make("verl", Git(url, "main"))
    assert "git could not fetch" in str(err.value) and "--mirror verl=URL" in str(err.value)


def _drop_blob(checkout: Path, path: str) -> None:
    sha = git(checkout, "rev-parse", f"HEAD:{path}")
    (checkout / ".git" / "objects" / sha[:2] / sha[2:]).unlink()


def test_a_mirror_missing_a_blob_outside_the_package_builds_with_a_note(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "checkout")
    commit = commit_tree(tree)
    _drop_blob(tree, "src/docs/manual.pdf")
    made = builder(tmp_path, verl=str(tree)).make("verl", Git("https://h.invalid/v.git", commit))
    assert made.source.note == "less src/docs/manual.pdf (missing from the mirror)"
    assert any("src/docs/manual.pdf missing from its repository" in n for n in made.notes)


def test_a_mirror_missing_a_blob_of_the_package_is_refused(tmp_path: Path) -> None:
    tree = fork_tree(tmp_path / "checkout")
    commit = commit_tree(tree)
    _drop_blob(tree, "src/verl/fork_ext/__init__.py")
    with pytest.raises(HostBuildError, match="which the wheel needs"):
        builder(tmp_path, verl=str(tree)).make("verl", Git("https://h.invalid/v.git", commit))
