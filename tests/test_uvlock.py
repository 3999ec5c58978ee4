"""Upstream's own uv.lock as the stack (resolve/uvlock.py): a real `uv lock` of a verl-like
project against the local indexes (the toy default index, the PyTorch cu118 index, a
wheelhouse index that publishes no hashes) with a git source, then taken as upstream would
hand it over: its git URL rewritten to an upstream host this machine cannot reach. Nothing
is resolved again; each file comes from where the lock says, git built here from a mirror."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Stack
from support.cli import run
from support.gitserve import bare_clone, commit_tree
from support.pkgindex import Server, build_wheel, write_source_tree

from verl_bundle.resolve.lock import read_lock
from verl_bundle.uvcmd import uv_binary

UPSTREAM_GIT = "https://git.invalid/tinygit.git"


@dataclass
class Upstream:
    tree: Path  # verl's checkout: pyproject.toml, uv.lock, the package
    profile: Path
    bare: Path  # tinygit's repository, the mirror
    commit: str
    wheelhouse: Server


def _pyproject(bare: Path, torch_index: str, wheelhouse: str) -> str:
    return f"""
[project]
name = "verl"
version = "0.2.0.post2"
requires-python = ">=3.10"
dependencies = ["numpy"]

[project.optional-dependencies]
vllm = ["einops"]
sglang = ["psutil"]
fsdp = ["torch==2.1.2", "triton==2.1.0", "flash-attn==2.5.8", "tinygit"]

[tool.uv]
environments = ["python_full_version >= '3.10' and python_full_version < '3.11' and sys_platform == 'linux' and platform_machine == 'x86_64'"]
conflicts = [[{{ extra = "vllm" }}, {{ extra = "sglang" }}]]
# Taken on purpose over any package's own numpy requirement (verl main: numpy>=2.0.0), and one
# that applies to the other rollout only.
override-dependencies = ["numpy>=1.0", "psutil>=1 ; extra == 'sglang'"]

[tool.uv.sources]
torch = {{ index = "pytorch-cu118" }}
triton = {{ index = "pytorch-cu118" }}
flash-attn = {{ index = "verl-wheelhouse" }}
tinygit = {{ git = "file://{bare}", rev = "main" }}

[[tool.uv.index]]
name = "pytorch-cu118"
url = "{torch_index}"
explicit = true

[[tool.uv.index]]
name = "verl-wheelhouse"
url = "{wheelhouse}"
explicit = true
"""


def _profile(path: Path, wheelhouse_files: str, extra: str = "") -> Path:
    path.write_text(
        f"""
name = "uvl"
cuda = "11.8"
python = "3.10"
platform = "manylinux_2_17_x86_64"
bootstrap = ["pip", "uv"]

[uv-lock]
extras = ["vllm", "fsdp"]
{extra}

[locations.verl-wheelhouse]
type = "files"
url = "{wheelhouse_files}"

[git]
tinygit = "{UPSTREAM_GIT}"

[[static-metadata]]
name = "flash-attn"
version = "2.5.8"
requires-dist = ["torch", "einops"]

[[source-builds]]
package = "flash-attn"
build-requires = ["setuptools", "wheel", "packaging", "ninja", "psutil", "torch"]

[[phases]]
name = "torch"
packages = ["torch", "triton"]

[[phases]]
name = "wheels"
packages = ["*"]

[[phases]]
name = "flash-attn"
packages = ["flash-attn"]

[[phases]]
name = "verl"
packages = ["verl"]
"""
    )
    return path


@pytest.fixture
def upstream(stack: Stack, tmp_path: Path) -> Iterator[Upstream]:
    tiny = write_source_tree(tmp_path / "tinygit", "tinygit", "0.1")
    commit = commit_tree(tiny)
    bare = bare_clone(tiny, tmp_path / "tinygit.git")
    wh_dir = tmp_path / "wheelhouse"
    build_wheel(
        wh_dir,
        "flash_attn",
        "2.5.8",
        tag="cp310-cp310-linux_x86_64",
        requires=["torch", "einops"],
        modules={"flash_attn": "__version__ = '2.5.8'\n"},
    )
    wheelhouse = Server(wh_dir, publish_hashes=False).start()
    tree = write_source_tree(
        tmp_path / "verl",
        "verl",
        "0.2.0.post2",
        requires=["numpy"],
        modules={"verl": "__version__ = '0.2.0.post2'\n"},
        pyproject_extra=_pyproject(bare, stack.pytorch.index_url, wheelhouse.index_url),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(UV_DEFAULT_INDEX=stack.pypi.index_url, UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    made = subprocess.run(
        [uv_binary(), "lock", "--quiet", "--project", str(tree)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    # As upstream hands it over: its git source on a host this machine cannot reach.
    for name in ("uv.lock", "pyproject.toml"):
        text = (tree / name).read_text()
        (tree / name).write_text(text.replace(f"file://{bare}", UPSTREAM_GIT))
    assert UPSTREAM_GIT in (tree / "uv.lock").read_text()
    profile = _profile(tmp_path / "uvl.toml", f"{wheelhouse.url}/files")
    try:
        yield Upstream(tree, profile, bare, commit, wheelhouse)
    finally:
        wheelhouse.stop()


def lock(
    stack: Stack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
    code: int = 0,
) -> tuple[Path, str]:
    out = tmp_path / "pylock.toml"
    result = run(stack.args("lock", out, tmp_path / "cache", *extra), capsys)
    assert result.code == code, result.out + result.err
    assert "Traceback" not in result.err
    return out, result.err


def test_the_stack_is_the_locks_own(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--profile", str(upstream.profile), "--verl", str(upstream.tree))
    path, _ = lock(stack, tmp_path, capsys, *args, "--mirror", f"tinygit={upstream.bare}")
    lk = read_lock(path)
    names = {p.name for p in lk.packages}
    # The extras asked (vllm, fsdp), not the other rollout (sglang's psutil).
    assert {"numpy", "einops", "torch", "flash-attn", "tinygit", "verl", "pip", "uv"} <= names
    assert "psutil" not in names
    torch = lk.package("torch")
    assert torch is not None and torch.version == "2.1.2+cu118"
    assert torch.location == "pytorch-cu118"
    # The wheelhouse gave no hash: it was hashed on download, from the profile's location.
    flash = lk.package("flash-attn")
    assert flash is not None and flash.location == "verl-wheelhouse" and flash.kind == "wheel"
    assert flash.file.filename == "flash_attn-2.5.8-cp310-cp310-linux_x86_64.whl"
    assert len(flash.file.sha256) == 64
    tiny = lk.package("tinygit")
    assert tiny is not None and tiny.location == "local" and tiny.source is not None
    assert (tiny.source.origin, tiny.source.commit, tiny.source.rev) == (
        UPSTREAM_GIT,
        upstream.commit,
        "main",
    )
    verl = lk.package("verl")
    assert verl is not None and verl.source is not None and verl.source.kind == "tree"
    # The lock's overrides for these extras travel to the server's pip check.
    assert lk.overrides == ("numpy>=1.0",)


def test_a_mirrors_credentials_stay_out_of_the_lock(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A location given with credentials (--mirror NAME=https://user:token@...) is used, and
    the lock names it without them, as a resolved lock does."""
    served = upstream.wheelhouse.url.replace("://", "://alice:s3cret@", 1) + "/files"
    args = ("--profile", str(upstream.profile), "--verl", str(upstream.tree))
    mirrors = ("--mirror", f"tinygit={upstream.bare}", "--mirror", f"verl-wheelhouse={served}")
    path, _ = lock(stack, tmp_path, capsys, *args, *mirrors)
    text = path.read_text()
    assert "s3cret" not in text and "alice" not in text
    assert read_lock(path).locations["verl-wheelhouse"] == f"{upstream.wheelhouse.url}/files"


def test_where_the_wheelhouse_cannot_be_reached_the_sdist_is_built_on_the_server(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.wheelhouse.stop()
    args = ("--profile", str(upstream.profile), "--verl", str(upstream.tree))
    path, err = lock(stack, tmp_path, capsys, *args, "--mirror", f"tinygit={upstream.bare}")
    assert "flash-attn: " in err and "is not available" in err
    lk = read_lock(path)
    flash = lk.package("flash-attn")
    assert flash is not None and flash.kind == "sdist" and flash.location == "pypi"
    # Its build requirements the lock lacks join the stack, installed before it.
    wheel = lk.package("wheel")
    assert wheel is not None and wheel.role == "build-dep"


def test_a_named_index_substituted_by_the_default_index(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each package of the substituted index is taken from the default index at its version
    less the label: torch 2.1.2 is there, triton 2.1.0 is not (one line says so)."""
    profile = _profile(
        tmp_path / "sub.toml",
        f"{upstream.wheelhouse.url}/files",
        'substitute = { pytorch-cu118 = "pypi" }',
    )
    args = ("--profile", str(profile), "--verl", str(upstream.tree))
    _, err = lock(stack, tmp_path, capsys, *args, "--mirror", f"tinygit={upstream.bare}", code=1)
    assert "torch 2.1.2+cu118: the lock takes it from index pytorch-cu118; taken as 2.1.2" in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "no version of triton==2.1.0" in line


def test_the_rollout_must_be_named(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock_file = str(upstream.tree / "uv.lock")
    base = ("--profile", str(upstream.profile), "--mirror", f"tinygit={upstream.bare}")
    _, err = lock(
        stack, tmp_path, capsys, *base, "--from-lock", lock_file, "--extra", "fsdp", code=2
    )
    assert "verl's rollout has no default" in err and "--extra vllm or --extra sglang" in err
    _, err = lock(
        stack,
        tmp_path,
        capsys,
        *base,
        "--from-lock",
        lock_file,
        "--extra",
        "vllm",
        "--extra",
        "sglang",
        code=1,
    )
    assert "uv could not read the lock" in err and "incompatible" in err
    assert len(err.strip().splitlines()) == 1


def test_from_lock_builds_verl_from_the_tree_it_lies_in(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--from-lock with the catalog's toy profile: its git sources can be mirrored by name."""
    path, _ = lock(
        stack,
        tmp_path,
        capsys,
        "--from-lock",
        str(upstream.tree / "uv.lock"),
        "--extra",
        "vllm",
        "--extra",
        "fsdp",
        "--mirror",
        f"tinygit={upstream.bare}",
        "--mirror",
        f"verl-wheelhouse={upstream.wheelhouse.url}/files",
    )
    verl = read_lock(path).package("verl")
    assert verl is not None and verl.source is not None
    assert verl.source.origin == str(upstream.tree)


def test_a_bundle_from_the_lock_carries_the_git_built_wheels(
    stack: Stack, upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--profile", str(upstream.profile), "--verl", str(upstream.tree))
    out = tmp_path / "out"
    result = run(
        stack.args("build", out, tmp_path / "cache", *args, "--mirror", f"tinygit={upstream.bare}"),
        capsys,
    )
    assert result.code == 0, result.err
    shown = run(["inspect", result.last_line], capsys)
    assert (
        f"source:    tinygit 0.1 from git+{UPSTREAM_GIT}@main (commit {upstream.commit[:12]}"
        in shown.out
    )
    with tarfile.open(result.last_line) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/sbom.cdx.json"))
        data = tf.extractfile(member)
        assert data is not None
        sbom = json.loads(data.read())
        member = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        data = tf.extractfile(member)
        assert data is not None
        manifest = json.loads(data.read())
    assert manifest["checks"]["overrides"] == ["numpy>=1.0"]
    (tiny,) = [c for c in sbom["components"] if c["name"] == "tinygit"]
    assert tiny["externalReferences"] == [
        {"type": "vcs", "url": f"git+{UPSTREAM_GIT}@{upstream.commit}"}
    ]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ("[uv-lock]\nextras = []\n", "key 'uv-lock.extras': expected the extras to install"),
        (
            '[uv-lock]\nextras = ["vllm"]\nsubstitute = { pytorch-cu130 = "nowhere" }\n',
            "key 'uv-lock.substitute.pytorch-cu130': 'nowhere' is not an index location",
        ),
        ('[uv-lock]\nextras = ["vllm"]\nunknown = 1\n', "unknown key 'uv-lock.unknown'"),
    ],
)
def test_a_bad_uv_lock_table_is_one_line(tmp_path: Path, table: str, words: str) -> None:
    from verl_bundle.errors import ProfileError
    from verl_bundle.profile.load import load_profile

    path = tmp_path / "bad.toml"
    path.write_text(f'name = "bad"\ncuda = "13.0"\n{table}')
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert words in str(err.value) and "\n" not in str(err.value)
