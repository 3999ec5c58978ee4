"""Cold build: `verl-bundle build` with empty caches vs `pip download` of the same files.

Both fetch the same wheels from the same index on 127.0.0.1 with nothing cached; ours also
resolves (uv), hashes, and writes the tarball. Target: ours at most 0.5x pip's time.

    python bench/cold_build.py [--runs N] [--size 1G] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/cold_build.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, synthetic
from bench.harness import Contender, Options, Report

TARGET = 0.5


def pip_download(index_url: str, dest: Path, pins: list[str]) -> list[str]:
    """pip fetching exactly our files: the target's tags on this host, no cache, no deps."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--quiet",
        "--only-binary",
        ":all:",
        "--platform",
        "manylinux_2_17_x86_64",
        "--python-version",
        synthetic.PYTHON,
        "--implementation",
        "cp",
        "--abi",
        "cp310",
        "--index-url",
        index_url,
        "-d",
        str(dest),
        *pins,
    ]


def build_cmd(profile: Path, index_url: str, cache: Path, out: Path) -> list[str]:
    return [
        *harness.verl_bundle(),
        "build",
        "--profile",
        str(profile),
        "--python",
        synthetic.PYTHON,
        "--mirror",
        f"pypi={index_url}",
        "--cache-dir",
        str(cache),
        "-o",
        str(out),
    ]


def bench(opts: Options, progress: TextIO | None) -> Report:
    stack = synthetic.stack(opts.size, opts.cache, progress)
    synthetic.warm_page_cache([stack.index / w.filename for w in stack.wheels])
    with (
        harness.workdir("cold", opts.keep, progress) as work,
        synthetic.serving(stack) as index,
    ):
        profile = stack.write_profile(work)
        log = work / "commands.log"
        cache, uv_cache, out, dest = work / "cache", work / "uv-cache", work / "out", work / "dl"
        env = harness.clean_env(UV_CACHE_DIR=str(uv_cache), XDG_CACHE_HOME=str(work / "xdg"))
        ours_cmd = build_cmd(profile, index.index_url, cache, out)
        pins = [w.pin for w in stack.wheels]
        pip_cmd = pip_download(index.index_url, dest, pins)
        sent: dict[str, int] = {}

        def counted(name: str, cmd: list[str], env: dict[str, str]) -> float:
            index.reset_counters()
            seconds = harness.run(cmd, log, env)
            sent[name] = index.bytes_sent
            return seconds

        def check_pip() -> None:
            got = sorted(p.name for p in dest.iterdir())
            want = sorted(w.filename for w in stack.wheels)
            if got != want:
                raise harness.BenchError(f"pip downloaded {got}, not the bundle's {want}")
            harness.remove(dest)

        ours = Contender(
            "verl-bundle build (cold)",
            harness.show(ours_cmd, env),
            lambda: counted("ours", ours_cmd, env),
            prepare=lambda: harness.remove(cache, uv_cache, out),
            cleanup=lambda: harness.remove(cache, uv_cache, out),
        )
        pip = Contender(
            "pip download (no cache)",
            harness.show(pip_cmd),
            lambda: counted("pip", pip_cmd, harness.clean_env()),
            prepare=lambda: harness.fresh(dest),
            cleanup=check_pip,
        )
        harness.interleave([ours, pip], opts.runs, progress)
    results = harness.measured([ours, pip])
    return Report(
        bench="cold_build",
        title="cold build vs pip download",
        setup=stack.describe(),
        runs=opts.runs,
        measured=results,
        comparisons=(harness.ratio("ratio build/pip", results[0], results[1], TARGET),),
        notes=(
            f"the index sent {sent['ours'] / 1e9:.2f} GB to verl-bundle build and "
            f"{sent['pip'] / 1e9:.2f} GB to pip (last run)",
            "ours also resolves with uv, hashes every file and writes (and fsyncs) the tarball; "
            "pip only downloads",
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
