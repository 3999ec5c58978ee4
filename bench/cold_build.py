"""Cold build: `verl-bundle build` with empty caches vs a parallel fetch of the same URLs (8
curls at once: the strongest baseline, the network and disk limit) and `pip download` (the
familiar one, one file at a time).

All fetch the same wheels from the same index on 127.0.0.1 with nothing cached; ours also
resolves (uv), hashes each file once as it streams in, checks each wheel (its structure: the
index publishes its hash) in worker processes as it arrives, and writes the tarball, hashing
it for its .sha256 as it is written (not fsync'ed). Ours and the curls also run both on one and
the same core (taskset): ours spreads over every core, curl barely needs one, so on a busy
machine the wall-time ratio moves with the load.
Target: ours at most 1.2x the parallel fetch.

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

TARGET = 1.2
JOBS = 8  # parallel transfers: as many as verl-bundle uses


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


def build_once(stack: synthetic.Stack, work: Path, log: Path) -> Path:
    """Build the stack's bundle into work/b (untimed; caches removed after): its tarball."""
    with synthetic.serving(stack) as index:
        env = harness.clean_env(
            UV_CACHE_DIR=str(work / "uv-cache"), XDG_CACHE_HOME=str(work / "xdg")
        )
        cmd = build_cmd(stack.write_profile(work), index.index_url, work / "cache", work / "b")
        harness.run(cmd, log, env)
    harness.remove(work / "cache", work / "uv-cache")
    return next((work / "b").glob("*.tar"))


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
        urls = work / "urls.txt"
        urls.write_text("".join(f"{index.url}/files/{w.filename}\n" for w in stack.wheels))
        curl_cmd = [
            "sh",
            "-c",
            f"xargs -P {JOBS} -n 1 curl -sS --fail -O < {urls}",
        ]
        # The same passes over the bytes as ours, one after another, by the fastest standard
        # tools and without a resolver: fetch with each file hashed as it streams in, read each
        # wheel's zip directory (ours checks each wheel's structure, in worker processes, as
        # it arrives), then tar the files with the tarball hashed as it is written. OpenSSL's
        # sha256 (coreutils' sha256sum is 4x slower here). Ours overlaps the first two.
        floor_tar = work / "floor.tar"
        sha = "openssl dgst -sha256 >/dev/null"
        floor_cmd = [
            "sh",
            "-c",
            f"xargs -P {JOBS} -n 1 sh -c "
            f"""'curl -sS --fail "$1" | tee "${{1##*/}}" | {sha}' _ """
            f"< {urls} && ls | xargs -P {JOBS} -n 1 zipinfo -1 >/dev/null "
            f"&& tar cf - * | tee {floor_tar} | {sha}",
        ]
        sent: dict[str, int] = {}

        def counted(
            name: str, cmd: list[str], env: dict[str, str], cwd: Path | None = None
        ) -> float:
            index.reset_counters()
            seconds = harness.run(cmd, log, env, cwd)
            sent[name] = index.bytes_sent
            return seconds

        def check(who: str, *also: Path) -> None:
            got = sorted(p.name for p in dest.iterdir())
            want = sorted(w.filename for w in stack.wheels)
            if got != want:
                raise harness.BenchError(f"{who} downloaded {got}, not the bundle's {want}")
            harness.remove(dest, *also)

        ours = Contender(
            "verl-bundle build (cold)",
            harness.show(ours_cmd, env),
            lambda: counted("ours", ours_cmd, env),
            prepare=lambda: harness.remove(cache, uv_cache, out),
            cleanup=lambda: harness.remove(cache, uv_cache, out),
        )
        curl = Contender(
            f"{JOBS} parallel curls",
            f"cd {dest} && {harness.show(curl_cmd)}",
            lambda: counted("curl", curl_cmd, harness.clean_env(), dest),
            prepare=lambda: harness.fresh(dest),
            cleanup=lambda: check("curl"),
        )
        pip = Contender(
            "pip download (no cache)",
            harness.show(pip_cmd),
            lambda: counted("pip", pip_cmd, harness.clean_env()),
            prepare=lambda: harness.fresh(dest),
            cleanup=lambda: check("pip"),
        )
        floor = Contender(
            "same passes by standard tools",
            f"cd {dest} && {harness.show(floor_cmd)}",
            lambda: counted("floor", floor_cmd, harness.clean_env(), dest),
            prepare=lambda: harness.fresh(dest),
            cleanup=lambda: check("floor", floor_tar),
        )
        everyone = [ours, curl, pip, floor]
        everyone += harness.paired(everyone, ours.name, curl.name)
        if opts.before is not None:
            old_cmd, old_env = harness.older(ours_cmd, env, opts.before)
            everyone.append(
                Contender(
                    f"build (cold), code in {opts.before.name}",
                    harness.show(old_cmd, old_env),
                    # Run from the work directory: `-m` puts the current one first on the path.
                    lambda: counted("before", old_cmd, old_env, work),
                    prepare=lambda: harness.remove(cache, uv_cache, out),
                    cleanup=lambda: harness.remove(cache, uv_cache, out),
                )
            )
        harness.interleave(everyone, opts.runs, progress)
    results = harness.measured(everyone)
    return Report(
        bench="cold_build",
        title="cold build vs a parallel fetch and pip download",
        setup=stack.describe(),
        runs=opts.runs,
        measured=results,
        comparisons=(
            harness.ratio("ratio build/parallel fetch", results[0], results[1], TARGET),
            harness.ratio("ratio build/pip download", results[0], results[2], None),
            harness.ratio(
                "ratio build/same passes by standard tools", results[0], results[3], None
            ),
            harness.ratio(
                "ratio same passes/parallel fetch (the floor)", results[3], results[1], None
            ),
            *harness.paired_ratios("ratio build/parallel fetch", results[4:6]),
            *(
                [harness.ratio("ratio build/build before", results[0], results[-1], None)]
                if opts.before is not None
                else []
            ),
        ),
        notes=(
            f"the index sent {sent['ours'] / 1e9:.2f} GB to verl-bundle build, "
            f"{sent['curl'] / 1e9:.2f} GB to curl and {sent['pip'] / 1e9:.2f} GB to pip "
            "(last run)",
            "ours also resolves with uv, hashes each file once as it arrives, checks each "
            "wheel's structure in worker processes as it arrives and writes the tarball "
            "(hashed while written, not fsync'ed); curl and pip only download; 'same passes "
            "by standard tools' is curl | tee | openssl dgst per file (8 at once), zipinfo per "
            "wheel (its directory) and tar | tee | openssl dgst, one after another: our passes "
            "without a resolver (ours checks the wheels while the others download)",
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
