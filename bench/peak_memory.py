"""Peak memory of `verl-bundle build`, cold and warm, for a bundle of SIZE and one of 5x SIZE.

Each measurement runs in a fresh Python helper whose only child is the build, and reads
getrusage(RUSAGE_CHILDREN).ru_maxrss: the largest resident set of any process in the build's
tree (verl-bundle itself, or uv while it resolves). Cold: empty caches; warm: the same build
again with everything cached (resolving again).
Targets: every peak under 100 MB, and flat as the bundle grows (5x / 1x at most 1.25x).

    python bench/peak_memory.py [--runs N] [--size 1G] [--json]
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/peak_memory.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, synthetic
from bench.cold_build import build_cmd
from bench.harness import BenchError, Comparison, Contender, Options, Report

LIMIT_MB = 100.0
FLAT = 1.25
GROWTH = 5

# The helper: one child, then the peak RSS (kB on Linux) of the children it waited for.
HELPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,"
    " stderr=subprocess.DEVNULL).returncode\n"
    "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def peak_mb(cmd: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", HELPER, *cmd],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    if out[0] != "0":
        raise BenchError(f"{harness.show(cmd)} exited {out[0]} (run it alone to see why)")
    return int(out[1]) / 1024


def _label(size: int) -> str:
    return f"{size / 1e9:g} GB"


def bench(opts: Options, progress: TextIO | None) -> Report:
    sizes = (opts.size, opts.size * GROWTH)
    stacks = [synthetic.stack(s, opts.cache, progress) for s in sizes]
    contenders: list[Contender] = []
    with (
        harness.workdir("memory", opts.keep, progress) as work,
        contextlib.ExitStack() as serving,
    ):
        indexes = [serving.enter_context(synthetic.serving(s)) for s in stacks]
        for stack, index in zip(stacks, indexes, strict=True):
            label = _label(stack.size)
            home = work / label.replace(" ", "")
            profile = stack.write_profile(home)
            cold_dirs = home / "cold-cache", home / "cold-uv", home / "cold-out"
            warm_dirs = home / "warm-cache", home / "warm-uv", home / "warm-out"

            def env_for(uv: Path, home: Path = home) -> dict[str, str]:
                return harness.clean_env(UV_CACHE_DIR=str(uv), XDG_CACHE_HOME=str(home))

            cold = build_cmd(profile, index.index_url, cold_dirs[0], cold_dirs[2])
            warm = build_cmd(profile, index.index_url, warm_dirs[0], warm_dirs[2])
            cold_env, warm_env = env_for(cold_dirs[1]), env_for(warm_dirs[1])
            # The warm build's caches are filled once, untimed.
            harness.run(warm, home / "commands.log", warm_env)
            contenders += [
                Contender(
                    f"cold build, {label}",
                    harness.show(cold, cold_env),
                    partial(peak_mb, cold, cold_env),
                    prepare=partial(harness.remove, *cold_dirs),
                    cleanup=partial(harness.remove, *cold_dirs),
                    unit="MB",
                ),
                Contender(
                    f"warm build, {label}",
                    harness.show(warm, warm_env),
                    partial(peak_mb, warm, warm_env),
                    cleanup=partial(harness.remove, warm_dirs[2]),
                    unit="MB",
                ),
            ]
        harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    small, large = _label(sizes[0]), _label(sizes[1])
    comparisons = [Comparison(f"peak, {m.name}", m.median, "MB", LIMIT_MB) for m in results]
    for kind in ("cold", "warm"):
        a = next(m for m in results if m.name == f"{kind} build, {large}")
        b = next(m for m in results if m.name == f"{kind} build, {small}")
        comparisons.append(harness.ratio(f"{kind}: {large} / {small}", a, b, FLAT))
    return Report(
        bench="peak_memory",
        title="peak RSS of verl-bundle build",
        setup="; ".join(s.describe() for s in stacks),
        runs=opts.runs,
        measured=results,
        comparisons=tuple(comparisons),
        notes=("ru_maxrss is the largest single process of the build's tree (ours or uv)",),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
