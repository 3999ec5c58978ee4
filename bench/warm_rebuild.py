"""Warm rebuild: `verl-bundle build` with everything cached vs `tar cf` of the same wheels.

The rebuild is timed from a lock (`--lock FILE`, from `verl-bundle lock`) and re-resolving
(no lock). The strongest reference is tar writing the same wheel files into one archive; `cat`
of the same files into one file is the disk/copy limit (info). Every contender runs once
untimed first, so the page cache is warm for all (and the build has written this layout
before). Neither the build nor tar fsyncs its output.
The build hashes every cached file against the lock's sha256 (a damaged cache never ships)
from the same read that copies it into the tarball; the tarball's .sha256 comes from the
earlier build that hashed the same bytes (same layout, same files by hash). The "(cold cache)"
rows drop the cached wheels (ours) and the wheel files (tar's) from the page cache before each
run. `--before DIR` adds the rebuild with older code.
Target: the rebuild with a lock at most 1.1x tar's time, in wall and in CPU seconds.

    python bench/warm_rebuild.py [--runs N] [--size 1G] [--json] [--hogs] [--before DIR]
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/warm_rebuild.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, synthetic
from bench.cold_build import build_cmd
from bench.harness import Contender, Options, Report

TARGET = 1.1
TARGET_RESOLVING = 1.5  # uv's resolution comes on top


def bench(opts: Options, progress: TextIO | None) -> Report:
    stack = synthetic.stack(opts.size, opts.cache, progress)
    with (
        harness.workdir("warm", opts.keep, progress) as work,
        synthetic.serving(stack) as index,
    ):
        profile = stack.write_profile(work)
        log = work / "commands.log"
        cache, out = work / "cache", work / "out"
        lock = work / "pylock.bench.toml"
        env = harness.clean_env(
            UV_CACHE_DIR=str(work / "uv-cache"), XDG_CACHE_HOME=str(work / "xdg")
        )
        resolve_cmd = build_cmd(profile, index.index_url, cache, out)
        lock_cmd = [*resolve_cmd, "--lock", str(lock)]
        # Fill the caches (ours and uv's) and write the lock: untimed.
        harness.run(resolve_cmd, log, env)
        harness.run(
            [
                *harness.verl_bundle(),
                "lock",
                "--profile",
                str(profile),
                "--python",
                synthetic.PYTHON,
                "--mirror",
                f"pypi={index.index_url}",
                "--cache-dir",
                str(cache),
                "-o",
                str(lock),
            ],
            log,
            env,
        )
        tarball = out / "wheels.tar"
        tar_cmd = ["tar", "cf", str(tarball), "-C", str(stack.index), "."]
        cat_cmd = [
            "bash",
            "-c",
            f"find {shlex.quote(str(stack.index))} -type f -print0 | sort -z | "
            f"xargs -0 cat > {shlex.quote(str(out / 'all.bin'))}",
        ]
        # The same work as ours by standard tools: tar writes the files while OpenSSL hashes
        # each of them (ours checks every cached file against the lock as it copies it).
        files = shlex.quote(str(stack.index))
        floor_cmd = [
            "bash",
            "-c",
            f"tar cf {shlex.quote(str(tarball))} -C {files} . & "
            f"find {files} -type f -print0 | xargs -0 openssl dgst -sha256 >/dev/null; wait",
        ]
        contenders = [
            Contender(
                "build --lock (warm)",
                harness.show(lock_cmd, env),
                lambda: harness.run(lock_cmd, log, env),
            ),
            Contender(
                "build, resolving (warm)",
                harness.show(resolve_cmd, env),
                lambda: harness.run(resolve_cmd, log, env),
            ),
            Contender("tar cf", harness.show(tar_cmd), lambda: harness.run(tar_cmd, log)),
            Contender(
                "cat of the same files (info: the copy limit)",
                harness.show(cat_cmd),
                lambda: harness.run(cat_cmd, log),
            ),
            Contender(
                "tar cf + openssl dgst of each file, at once",
                harness.show(floor_cmd),
                lambda: harness.run(floor_cmd, log),
            ),
        ]
        if opts.before is not None:
            old_cmd, old_env = harness.older(lock_cmd, env, opts.before)
            contenders.append(
                Contender(
                    f"build --lock (warm), code in {opts.before.name}",
                    harness.show(old_cmd, old_env),
                    lambda: harness.run(old_cmd, log, old_env, cwd=work),
                )
            )
        harness.warm_up(contenders, lambda: harness.fresh(out), lambda: harness.remove(out))
        # The same with the wheels out of the page cache before each run (read from disk).
        contenders += [
            harness.cold(contenders[0], cache),
            harness.cold(contenders[2], stack.index),
            *(harness.cold(c, cache) for c in contenders[5:6]),
        ]
        # ours hashes as it copies on two threads, tar copies on one: the pair again with both
        # on one core.
        contenders += harness.paired(contenders, contenders[0].name, contenders[2].name)
        contenders = harness.with_hogs(contenders, opts)
        harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    lock_m, resolve_m, tar_m, cat_m, floor_m = results[:5]
    old = f"build --lock (warm), code in {opts.before.name}" if opts.before else None
    rows = harness.side_rows("build --lock", "tar", lock_m.name, tar_m.name, old, TARGET)
    pinned = [m for m in results if "[core " in m.name]
    return Report(
        bench="warm_rebuild",
        title="warm rebuild vs tar cf",
        setup=stack.describe(),
        runs=opts.runs,
        measured=results,
        comparisons=(
            harness.ratio("ratio build --lock/tar", lock_m, tar_m, TARGET),
            harness.ratio("ratio build resolving/tar", resolve_m, tar_m, TARGET_RESOLVING),
            harness.ratio("ratio build --lock/cat", lock_m, cat_m, None),
            harness.ratio("ratio build --lock/tar + openssl at once", lock_m, floor_m, None),
            *harness.ratios(results, rows),
            *harness.paired_ratios("ratio build --lock/tar", pinned),
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
