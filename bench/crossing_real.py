"""The real cu130 stack across the gap: a delta between the committed lock and the same lock with
one pin changed (files, bytes, build and install time against the full bundle), and the full
bundle in `--split-size 2G` volumes, checked (sha256sum -c, the server's volume check), joined
and installed. Needs the internet (the default index) and about 40 GB of disk under --work;
not part of `make test`. Prints the figures docs/crossing-the-gap.md records.

    .venv/bin/python bench/crossing_real.py --work /tmp/crossing-real [--keep]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "profiles" / "locks" / "pylock.cu130-cp310.toml"
PACKAGE, TO = "einops", "0.8.1"  # the one pin changed (a pure wheel with no dependencies)


def run(cmd: list[str], **kw: Any) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return took, proc


def default_index() -> str:
    """The default index the resolver uses (uv says it with --emit-index-url)."""
    _, proc = run(
        [sys.executable, "-m", "uv", "pip", "compile", "-", "--emit-index-url", "--no-header"],
        input=f"{PACKAGE}=={TO}\n",
    )
    return next(x.split()[1] for x in proc.stdout.splitlines() if x.startswith("--index-url"))


def changed_lock(out: Path) -> Path:
    """The committed lock with PACKAGE at version TO: its file, URL, size and sha256 read from
    the profile's own index (the default one: PEP 691 JSON)."""
    from verl_bundle.net.http import Http
    from verl_bundle.net.index import read_project
    from verl_bundle.profile.catalog import select_profile

    index = select_profile(None, "cu130").locations["pypi"].url or default_index()
    page = read_project(Http.for_urls([index]), index, PACKAGE, "crossing-real")
    assert page is not None
    wheel = next(f for f in page.files if f.filename == f"{PACKAGE}-{TO}-py3-none-any.whl")
    text = LOCK.read_text()
    block = re.search(rf'(?ms)^name = "{PACKAGE}"\nversion = "[^"]+"\nwheels = \[.*?\]\n', text)
    assert block is not None and wheel.sha256 and wheel.size
    new = (
        f'name = "{PACKAGE}"\nversion = "{TO}"\n'
        f'wheels = [{{ name = "{wheel.filename}", url = "{wheel.url}", size = {wheel.size}, '
        f'hashes = {{ sha256 = "{wheel.sha256}" }} }}]\n'
    )
    path = out / "pylock.changed.toml"
    path.write_text(text.replace(block.group(0), new))
    return path


def build(work: Path, lock: Path, out: str, *extra: str) -> tuple[float, dict[str, Any]]:
    cmd = [sys.executable, "-m", "verl_bundle", "build", "--profile", "cu130", "--lock", str(lock)]
    cmd += ["--compile", "never", "--cache-dir", str(work / "cache"), "-o", str(work / out)]
    took, proc = run([*cmd, *extra, "--json"])
    return took, json.loads(proc.stdout)["result"]


def install(bundle: Path, prefix: Path, python: str) -> float:
    cmd = ["unshare", "-n"] if shutil.which("unshare") else []
    cmd += [str(bundle / "install.sh"), "--prefix", str(prefix), "--python", python]
    took, _ = run([*cmd, "--skip-phase", "flash-attn", "--yes"])
    return took


def untar(source: str, dest: Path) -> float:
    dest.mkdir(parents=True, exist_ok=True)
    took, _ = run(["sh", "-c", f"{source} | tar x -C {shlex.quote(str(dest))}"])
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--keep", action="store_true", help="leave --work in place")
    args = parser.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    from verl_bundle.interpreter import find_python

    py = find_python("3.10")
    assert py, "needs a Python 3.10 to install the cp310 stack"
    fig: dict[str, Any] = {}
    try:
        fig["old_build_cold_s"], old = build(work, LOCK, "old")
        new_lock = changed_lock(work)
        fig["delta_build_s"], delta = build(work, new_lock, "delta", "--base", old["bundle"])
        fig["full_build_s"], full = build(work, new_lock, "full")
        fig["split_build_s"], split = build(work, new_lock, "split", "--split-size", "2G")
        fig["delta"] = delta["delta"]
        fig["delta_size"], fig["full_size"] = delta["size"], full["size"]
        fig["volumes"] = [(Path(v["path"]).name, v["size"]) for v in split["volumes"]]
        listing = Path(split["sidecar"])
        names = " ".join(shlex.quote(Path(v["path"]).name) for v in split["volumes"])
        paths = " ".join(shlex.quote(v["path"]) for v in split["volumes"])
        fig["sha256sum_c_s"], proc = run(
            ["sh", "-c", f"cat {names} | sha256sum -c {shlex.quote(listing.name)}"],
            cwd=listing.parent,
        )
        fig["sha256sum_c"] = proc.stdout.split("\n")
        fig["verify_volumes_s"], _ = run(
            [sys.executable, "-m", "verl_bundle.airgap.verify.volumes", str(listing)]
        )
        # The full bundle from its volumes, installed into a new venv.
        joined = work / "x-split"
        fig["join_extract_s"] = untar(f"cat {paths}", joined)
        (top,) = list(joined.iterdir())
        fig["full_install_s"] = install(top, work / "venv-full", py)
        shutil.rmtree(work / "venv-full")
        # The delta: the old bundle extracted (the server has it), the delta beside it.
        old_dir = work / "x-old"
        fig["old_extract_s"] = untar(f"cat {shlex.quote(old['bundle'])}", old_dir)
        (old_top,) = list(old_dir.iterdir())
        fig["delta_extract_s"] = untar(f"cat {shlex.quote(delta['bundle'])}", work / "x-delta")
        (delta_top,) = list((work / "x-delta").iterdir())
        fig["base_complete_s"], proc = run(
            [sys.executable, "-m", "verl_bundle.airgap.install.base", str(delta_top), str(old_top)]
        )
        fig["base_complete"] = proc.stdout.strip()
        fig["delta_install_s"] = install(delta_top, work / "venv-delta", py)
        shutil.rmtree(work / "venv-delta")
        # The upgrade an operator runs: the old bundle installed, then the delta on the same prefix.
        fig["old_install_s"] = install(old_top, work / "venv-up", py)
        fig["delta_upgrade_s"] = install(delta_top, work / "venv-up", py)
    finally:
        print(json.dumps(fig, indent=2))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
