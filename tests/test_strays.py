"""install/strays.py on a hand-made environment (real directories and links): which links pip
or uv could write through are named, which are removed and which refused, and the baseline of
what no RECORD lists is recorded once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.doctor import unlisted
from verl_bundle.airgap.errors import UsageError
from verl_bundle.airgap.install import strays
from verl_bundle.airgap.install.dists import SitePaths


def environment(tmp_path: Path) -> tuple[Path, SitePaths, Path]:
    """A venv-shaped prefix with one installed distribution (pkg, listed in its RECORD)."""
    prefix, outside = tmp_path / "venv", tmp_path / "outside"
    site = prefix / "lib" / "python3.10" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("pkg/__init__.py,,\npkg-1.0.dist-info/RECORD,,\n")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python3.10").symlink_to("/usr/bin/python3")  # a venv's own: kept
    outside.mkdir()
    paths = SitePaths(str(prefix), str(site), str(site), str(prefix / "bin"), str(prefix))
    return prefix, paths, outside


def test_links_that_leave_are_named_and_removed_never_their_targets(tmp_path: Path) -> None:
    prefix, paths, outside = environment(tmp_path)
    (outside / "tool").write_text("precious\n")
    (prefix / "bin" / "tool").symlink_to(outside / "tool")
    (prefix / "share").mkdir()
    (prefix / "share" / "man").symlink_to(outside)
    said: list[str] = []
    with Confined(str(prefix)) as c:
        assert [rel for rel, _ in strays.leaving(c, paths)] == ["bin/tool", "share/man"]
        with pytest.raises(UsageError, match=r"2 symbolic link\(s\) there lead outside it"):
            strays.clear_links(c, paths, said.append, ours=False)
        assert said == [] and (prefix / "bin" / "tool").is_symlink()
        strays.clear_links(c, paths, said.append, ours=True)
    assert said == [
        f"    bin/tool: a symbolic link to {outside / 'tool'}, outside the prefix: removed (its "
        "target is left as it is)",
        f"    share/man: a symbolic link to {outside}, outside the prefix: removed (its target "
        "is left as it is)",
    ]
    assert (outside / "tool").read_text() == "precious\n"
    assert (prefix / "bin" / "python3.10").is_symlink()


def test_the_baseline_is_recorded_once_and_only_later_strays_are_removed(tmp_path: Path) -> None:
    prefix, _, _ = environment(tmp_path)
    site = Path(_site(prefix))
    (site / "theirs.pth").write_text("")  # there before the first install: the baseline
    with Confined(str(prefix)) as c:
        strays.record_baseline(c)
        (site / "zz.pth").write_text("import os\n")
        strays.record_baseline(c)  # never replaced: the plant does not join it
        recorded = json.loads((prefix / unlisted.BASELINE).read_text())["unlisted"]
        assert recorded == ["lib/python3.10/site-packages/theirs.pth"]
        found = unlisted.check(str(prefix))
        assert (
            found.status == "fail" and "zz.pth" in found.summary and "theirs" not in found.summary
        )
        said: list[str] = []
        strays.remove_unlisted(c, said.append, dry=True)
        assert (site / "zz.pth").exists()
        strays.remove_unlisted(c, said.append)
    assert said == [
        "    --repair: would remove lib/python3.10/site-packages/zz.pth (runs at every start of "
        "python; no RECORD lists it)",
        "    --repair: removed lib/python3.10/site-packages/zz.pth (runs at every start of "
        "python; no RECORD lists it)",
    ]
    assert not (site / "zz.pth").exists() and (site / "theirs.pth").exists()
    assert unlisted.check(str(prefix)).status == "ok"


def _site(prefix: Path) -> str:
    return str(prefix / "lib" / "python3.10" / "site-packages")
