"""Your verl, not only ours: `lock`/`build --verl SPEC` for each SPEC form (a source tree, a
wheel, an sdist, a git repository from a git daemon or a file:// mirror) and a profile's own
`name @ file://...` / `name @ git+URL@REV` requirements, on the local indexes of the toy
cu118-legacy stack; the fork's own module ships, its origin is in the lock, the manifest, the
SBOM and `inspect`, and clashes with the profile's pins are one line each."""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, Stack
from support.cli import run
from support.gitserve import GitDaemon, bare_clone, commit_tree
from support.pkgindex import build_sdist, build_wheel, write_source_tree

from verl_bundle.resolve.lock import read_lock

CU118 = (ROOT / "profiles" / "cu118-legacy.toml").read_text()
# What the toy verl 0.2.0.post2 requires (tests/support/stack.py): the fork keeps it.
VERL_REQUIRES = [
    "tensordict<0.6",
    "ray>=2.10",
    "transformers",
    "pylatexenc",
    "antlr4-python3-runtime==4.9.3",
    "hydra-core>=1.3",
    "numpy",
]
# The modules readiness imports for verl 0.2 (readiness.json), as the toy verl has them.
VERL_MODULES = {
    "verl": "__version__ = '0.2.0.post2'\n",
    "verl/trainer/main_ppo": "",
    "verl/workers/fsdp_workers": "",
    "verl/workers/actor/dp_actor": "from flash_attn import __version__ as _fa\n",
    "verl/third_party/vllm": "",
    "verl/workers/rollout/vllm_rollout": "",
    "verl/fork_ext": "FORKED = True\n",  # the fork's own module
}


def fork(where: Path, *, requires: list[str] | None = None) -> Path:
    return write_source_tree(
        where,
        "verl",
        "0.2.0.post2",
        requires=VERL_REQUIRES if requires is None else requires,
        modules=VERL_MODULES,
        files={"verl/trainer/config/ppo_trainer.yaml": b"trainer: {}\n"},
        pyproject_extra=(
            "\n[tool.uv.sources]\n"  # never reaches uv: the host builds a wheel first
            'torch = { index = "pytorch-cu130" }\n'
            'mbridge = { git = "https://git.invalid/ISEEKYAN/mbridge.git", rev = "641a5a0" }\n'
        ),
    )


def profile_with(tmp_path: Path, old: str, new: str) -> Path:
    assert old in CU118
    path = tmp_path / "mine.toml"
    path.write_text(CU118.replace(old, new).replace('name = "cu118-legacy"', 'name = "mine"'))
    return path


def lock(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, code: int = 0
) -> tuple[Path, str]:
    out = tmp_path / "pylock.toml"
    result = run(stack.args("lock", out, tmp_path / "cache", *extra), capsys)
    assert result.code == code, result.out + result.err
    assert "Traceback" not in result.err
    return out, result.err


def verl_wheel_names(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as tf:
        member = next(m for m in tf.getmembers() if "/wheels/verl-" in m.name)
        data = tf.extractfile(member)
        assert data is not None
        with zipfile.ZipFile(data) as zf:
            return set(zf.namelist())


def bundle_doc(tarball: Path, name: str) -> dict[str, object]:
    with tarfile.open(tarball) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/" + name))
        data = tf.extractfile(member)
        assert data is not None
        doc: dict[str, object] = json.loads(data.read())
        return doc


def test_a_forks_tree_is_bundled_with_its_module_and_its_origin(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fork(tmp_path / "fork")
    commit = commit_tree(tree)
    (tree / "src" / "verl" / "fork_ext" / "__init__.py").write_text("FORKED = 'uncommitted'\n")
    out = tmp_path / "out"
    result = run(stack.args("build", out, tmp_path / "cache", "--verl", str(tree)), capsys)
    assert result.code == 0, result.err
    tarball = Path(result.last_line)
    assert "verl/fork_ext/__init__.py" in verl_wheel_names(tarball)
    manifest = bundle_doc(tarball, "manifest.json")
    files = manifest["files"]
    assert isinstance(files, list)
    (verl,) = [f for f in files if f["name"] == "verl"]
    assert verl["location"] == "local"
    assert verl["source"]["kind"] == "tree" and verl["source"]["origin"] == str(tree)
    assert verl["source"]["commit"] == commit and verl["source"]["dirty"] is True
    assert len(verl["source"]["tree_sha256"]) == 64
    # The rest of the stack is the profile's: torch from the PyTorch index, as without --verl.
    (torch,) = [f for f in files if f["name"] == "torch"]
    assert torch["version"] == "2.1.2+cu118" and torch["location"] == "pytorch-cu118"
    sbom = bundle_doc(tarball, "sbom.cdx.json")
    components = sbom["components"]
    assert isinstance(components, list)
    (component,) = [c for c in components if c["name"] == "verl"]
    props = {p["name"]: p["value"] for p in component["properties"]}
    assert props["verl-bundle:source"].startswith(f"{tree} (commit {commit[:12]}, dirty")
    shown = run(["inspect", str(tarball)], capsys)
    assert shown.code == 0, shown.err
    assert f"source:    verl 0.2.0.post2 from {tree} (commit {commit[:12]}, dirty)" in shown.out
    doc = json.loads(run(["inspect", str(tarball), "--json"], capsys).out)
    assert doc["result"]["sources"][0]["commit"] == commit


@pytest.mark.parametrize("form", ["wheel", "sdist"])
def test_verl_from_a_wheel_or_an_sdist_file(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    modules = {"verl": "__version__ = '0.2.0.post2'\n", "verl/fork_ext": "FORKED = True\n"}
    if form == "wheel":
        given = build_wheel(
            tmp_path / "w", "verl", "0.2.0.post2", requires=VERL_REQUIRES, modules=modules
        )
    else:
        given = build_sdist(
            tmp_path / "s", "verl", "0.2.0.post2", requires=VERL_REQUIRES, modules=modules
        )
    path, _ = lock(stack, tmp_path, capsys, "--verl", str(given))
    verl = read_lock(path).package("verl")
    assert verl is not None and verl.location == "local" and verl.kind == "wheel"
    assert verl.source is not None and (verl.source.kind, verl.source.origin) == (form, str(given))
    assert verl.file.filename == "verl-0.2.0.post2-py3-none-any.whl"


def test_verl_from_git_by_a_git_daemon_and_by_a_mirror(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fork(tmp_path / "fork")
    commit = commit_tree(tree)
    (tmp_path / "served").mkdir()
    bare = bare_clone(tree, tmp_path / "served" / "verl.git")
    with GitDaemon(tmp_path / "served") as daemon:
        path, _ = lock(stack, tmp_path, capsys, "--verl", f"git+{daemon.url('verl.git')}@main")
    by_daemon = read_lock(path).package("verl")
    assert by_daemon is not None and by_daemon.source is not None
    assert by_daemon.source.commit == commit and by_daemon.source.rev == "main"
    assert by_daemon.file.url == f"git+{daemon.url('verl.git')}@{commit}"
    # Upstream's URL (unreachable here) served by a mirror on this host.
    upstream = "https://github.com/verl-project/verl.git"
    path, err = lock(
        stack,
        tmp_path,
        capsys,
        "--verl",
        f"git+{upstream}@{commit[:10]}",
        "--mirror",
        f"verl=file://{bare}",
    )
    by_mirror = read_lock(path).package("verl")
    assert by_mirror is not None and by_mirror.source is not None
    assert by_mirror.source.origin == upstream and by_mirror.source.commit == commit
    assert f"read from the mirror file://{bare}" in err
    # One tree, one wheel, whichever way it came.
    assert by_mirror.file.sha256 == by_daemon.file.sha256


def test_a_version_pins_verl_on_the_index(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = lock(stack, tmp_path, capsys, "--verl", "0.2.0.post2")
    verl = read_lock(path).package("verl")
    assert verl is not None and verl.location == "pypi" and verl.source is None


def test_a_profile_with_a_local_path_requirement_locks(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `KeyError: 'version'` in the resolver, a traceback."""
    tiny = write_source_tree(tmp_path / "tinypkg", "tinypkg", "0.1", requires=["numpy"])
    mine = profile_with(
        tmp_path, '"verl==0.2.0.post2",', f'"verl==0.2.0.post2",\n    "tinypkg @ file://{tiny}",'
    )
    path, _ = lock(stack, tmp_path, capsys, "--profile", str(mine))
    pkg = read_lock(path).package("tinypkg")
    assert pkg is not None and pkg.version == "0.1" and pkg.location == "local"
    assert pkg.source is not None and pkg.source.kind == "tree"
    assert read_lock(path).package("numpy") is not None  # its own requirement resolved


def test_a_local_path_requirement_that_is_not_there_is_one_line(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = profile_with(
        tmp_path, '"verl==0.2.0.post2",', '"verl==0.2.0.post2",\n    "tinypkg @ file:///no/such",'
    )
    _, err = lock(stack, tmp_path, capsys, "--profile", str(mine), code=2)
    assert "key 'requirements[5]': tinypkg @ /no/such: no such file or directory" in err
    assert len(err.strip().splitlines()) == 1


def test_a_git_requirement_is_served_by_its_mirror(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = write_source_tree(tmp_path / "tinypkg", "tinypkg", "0.1")
    commit = commit_tree(tiny)
    mine = profile_with(
        tmp_path,
        '"verl==0.2.0.post2",',
        '"verl==0.2.0.post2",\n    "tinypkg @ git+https://git.invalid/tinypkg.git@main",',
    )
    # No mirror: the unreachable host is one line naming the option that fixes it.
    _, err = lock(stack, tmp_path, capsys, "--profile", str(mine), code=1)
    assert "git could not fetch https://git.invalid/tinypkg.git" in err
    assert "--mirror tinypkg=URL" in err
    path, _ = lock(stack, tmp_path, capsys, "--profile", str(mine), "--mirror", f"tinypkg={tiny}")
    pkg = read_lock(path).package("tinypkg")
    assert pkg is not None and pkg.source is not None and pkg.source.commit == commit


def test_a_fork_that_clashes_with_the_profiles_pins_is_one_line_each(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fork(tmp_path / "fork", requires=[*VERL_REQUIRES, "torch==2.2.0", "triton>=3"])
    _, err = lock(stack, tmp_path, capsys, "--verl", str(tree), code=1)
    # the one error, one line per clash, after the steps' progress lines
    lines = err[err.index("error: ") :].splitlines()
    assert len(lines) == 2, err
    assert "requires torch==2.2.0; profile cu118-legacy pins torch==2.1.2" in lines[0]
    assert "requires triton>=3; profile cu118-legacy pins triton==2.1.0" in lines[1]
    assert all("change that requirement" in line for line in lines)


def test_a_forks_direct_reference_needs_a_source_of_the_profile(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verl main requires `TransferQueue @ git+https://...@main`: uv would go to that host."""
    reference = "tinypkg @ git+https://git.invalid/tinypkg.git@main"
    tree = fork(tmp_path / "fork", requires=[*VERL_REQUIRES, reference])
    _, err = lock(stack, tmp_path, capsys, "--verl", str(tree), code=1)
    assert "requires tinypkg @ git+https://git.invalid/tinypkg.git@main" in err
    assert "add `tinypkg @ git+URL@REV`" in err
    # With the package given to the profile (here as a tree), the fork's reference is met by it.
    tiny = write_source_tree(tmp_path / "tinypkg", "tinypkg", "0.1")
    mine = profile_with(
        tmp_path, '"verl==0.2.0.post2",', f'"verl==0.2.0.post2",\n    "tinypkg @ file://{tiny}",'
    )
    path, _ = lock(stack, tmp_path, capsys, "--profile", str(mine), "--verl", str(tree))
    pkg = read_lock(path).package("tinypkg")
    assert pkg is not None and pkg.location == "local"


def test_a_git_pin_is_compared_with_the_release_of_its_version(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default index has einops 1.0.0: a git pin of the same files is its released
    equivalent; one with other content is said to be the same version, not the same thing."""
    einops = write_source_tree(tmp_path / "einops", "einops", "1.0.0")
    commit = commit_tree(einops)
    mine = profile_with(
        tmp_path,
        '"verl==0.2.0.post2",',
        '"verl==0.2.0.post2",\n    "einops @ git+https://git.invalid/einops.git@main",',
    )
    mirror = ("--mirror", f"einops={einops}")
    _, err = lock(stack, tmp_path, capsys, "--profile", str(mine), *mirror)
    assert (
        f"einops 1.0.0 (git {commit[:7]}): the same files as the default index's einops 1.0.0, "
        "a released equivalent (`einops==1.0.0`)" in err
    )
    (einops / "src" / "einops" / "__init__.py").write_text("__version__ = '1.0.0'  # patched\n")
    commit = commit_tree(einops, "patched")
    _, err = lock(stack, tmp_path, capsys, "--profile", str(mine), *mirror)
    assert (
        f"einops 1.0.0 (git {commit[:7]}): the default index's einops 1.0.0 is other content "
        "(1 files differ, e.g. einops/__init__.py)" in err
    )


def test_a_lock_with_a_wheel_made_here_is_built_again_from_its_source(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Building from a lock on a host (or cache) without the wheel: made again from the
    recorded source, and it must be the same wheel."""
    tree = fork(tmp_path / "fork")
    path, _ = lock(stack, tmp_path, capsys, "--verl", str(tree))
    fresh = tmp_path / "fresh-cache"
    build = stack.args("build", tmp_path / "out", fresh, "--lock", str(path))
    result = run(build, capsys)
    assert result.code == 0, result.err
    assert "verl/fork_ext/__init__.py" in verl_wheel_names(Path(result.last_line))
    (tree / "src" / "verl" / "fork_ext" / "__init__.py").write_text("FORKED = 'changed'\n")
    build = stack.args("build", tmp_path / "out2", tmp_path / "fresher", "--lock", str(path))
    result = run(build, capsys)
    assert result.code == 2, result.err
    assert "made again from" in result.err and "not the lock's" in result.err
    assert "make the lock again" in result.err and "Traceback" not in result.err


def test_a_lock_and_a_verl_together_are_one_usage_line(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fork(tmp_path / "fork")
    path, _ = lock(stack, tmp_path, capsys)
    args = stack.args("build", tmp_path / "out", tmp_path / "cache", "--lock", str(path))
    result = run([*args, "--verl", str(tree)], capsys)
    assert result.code == 2
    assert "--lock builds exactly that lock" in result.err and "Traceback" not in result.err


def test_the_committed_locks_versions_stay_the_stack_but_not_its_verl(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a committed lock, --verl keeps the lock's versions as constraints around it: an
    older lock's verl pin must not stand against the verl asked."""
    made, _ = lock(stack, tmp_path, capsys)
    older = made.read_text().replace(
        'name = "verl"\nversion = "0.2.0.post2"', 'name = "verl"\nversion = "0.1.0"'
    )
    assert older != made.read_text()
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "committed.toml").write_text(older)
    mine = profile_with(
        tmp_path, 'name = "cu118-legacy"', 'name = "cu118-legacy"\nlock = "locks/committed.toml"'
    )
    out = tmp_path / "again.toml"
    result = run(
        stack.args(
            "lock", out, tmp_path / "cache", "--profile", str(mine), "--verl", "0.2.0.post2"
        ),
        capsys,
    )
    assert result.code == 0, result.err
    verl = read_lock(out).package("verl")
    assert verl is not None and verl.version == "0.2.0.post2"
