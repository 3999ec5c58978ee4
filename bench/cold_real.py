"""The cold build on a real stack, side by side: `verl-bundle build --lock` of a profile's
committed lock from empty caches, against 8 parallel curls of the same URLs (largest first:
the strongest baseline, the network's limit) and `pip download --no-deps` of the same wheels
(the familiar one). Needs the internet and about 3x the stack's size in free disk; the
download caches live under --workdir (outside the repository) and are removed after each run.

    python bench/cold_real.py [--profile cu130] [--runs 3] [--before DIR] [--json]

--before DIR adds a contender: the same build with the verl_bundle package found in DIR (an
older checkout, e.g. `git archive COMMIT verl_bundle | tar x -C DIR`), run in the same ABBA
order, so a change is measured against the code before it under the same network and load.
Not part of `make bench` (no network there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/cold_real.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness
from bench.harness import Contender, Report
from verl_bundle.resolve.lock import read_lock

ROOT = Path(__file__).resolve().parents[1]
JOBS = 8
TARGET_CURL = 1.1  # issue 39
TARGET_PIP = 0.5


def locked_files(lock: Path) -> list[dict[str, Any]]:
    """Every file of the lock: name, URL, size, and how the bundle takes it (kind)."""
    return [
        {"name": p.file.filename, "url": p.file.url, "size": p.file.size or 0, "kind": p.kind}
        for p in read_lock(lock).packages
    ]


def pip_download(dest: Path, urls: list[str], lock: Path) -> list[str]:
    """pip fetching exactly these files, for the lock's target (its Python and platform tags)."""
    target = read_lock(lock).target
    return [
        sys.executable,
        *("-m", "pip", "download", "--no-deps", "--no-cache-dir", "--quiet"),
        *("--disable-pip-version-check", "--progress-bar", "off", "--only-binary", ":all:"),
        *[arg for tag in target.platform_tags for arg in ("--platform", tag)],
        *("--python-version", target.python_version, "--implementation", "cp"),
        *("--abi", target.python_tag, "-d", str(dest)),
        *urls,
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--profile", default="cu130")
    p.add_argument("--python", default="3.10")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/verl-bundle-cold-real"))
    p.add_argument("--before", type=Path, default=None, help="a checkout of older code")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        report, runs = measure(args.profile, args.python, args.runs, args.workdir, args.before)
    except harness.BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    harness.emit(report, args.json)
    if not args.json:
        print(json.dumps({"runs": runs}))
    return 0


def measure(
    profile: str,
    python: str,
    runs: int,
    workdir: Path,
    before: Path | None = None,
    hogs: bool = False,
) -> tuple[Report, list[list[float]]]:
    """The cold build of `profile`'s committed lock against the curls and pip download, `runs`
    times each in ABBA order (with `hogs`, the build and the curls again beside two CPU
    hogs); the report and every sample. BenchError when one failed."""
    tag = "cp" + python.replace(".", "")
    lock = ROOT / "profiles" / "locks" / f"pylock.{profile}-{tag}.toml"
    files = locked_files(lock)
    work = harness.fresh(workdir)
    log = work / "commands.log"
    cache, uv_cache, out, dest = work / "cache", work / "uv-cache", work / "out", work / "dl"
    env = harness.clean_env(UV_CACHE_DIR=str(uv_cache), XDG_CACHE_HOME=str(work / "xdg"))
    build = [
        *(sys.executable, "-m", "verl_bundle", "build", "--profile", profile),
        *("--python", python, "--lock", str(lock), "--compile", "never"),
        *("--cache-dir", str(cache), "-o", str(out)),
    ]
    urls = work / "urls.txt"  # largest first, as ours starts them
    urls.write_text("".join(f["url"] + "\n" for f in sorted(files, key=lambda f: -f["size"])))
    curl = ["sh", "-c", f"xargs -P {JOBS} -n 1 curl -sS --fail -O < {urls}"]
    wheels = [f["url"] for f in files if f["kind"] == "wheel"]
    pip = pip_download(dest, wheels, lock)

    def clean() -> None:
        harness.remove(cache, uv_cache, out, dest)

    def fetched(who: str) -> None:
        got = {p.name for p in dest.iterdir()}
        want = {f["name"] for f in files if who == "curl" or f["kind"] == "wheel"}
        if got != want:
            raise harness.BenchError(f"{who} fetched {len(got)} files, not the {len(want)} asked")
        clean()

    contenders = [
        Contender(
            "verl-bundle build --lock (cold)",
            harness.show(build, env),
            lambda: harness.run(build, log, env, work),
            prepare=clean,
            cleanup=clean,
        ),
        Contender(
            f"{JOBS} parallel curls (largest first)",
            f"cd {dest} && {harness.show(curl)}",
            lambda: harness.run(curl, log, harness.clean_env(), dest),
            prepare=lambda: harness.fresh(dest),
            cleanup=lambda: fetched("curl"),
        ),
        Contender(
            "pip download --no-deps (the wheels)",
            harness.show(pip[: -len(wheels)]) + f" <the {len(wheels)} wheel URLs of the lock>",
            lambda: harness.run(pip, log, harness.clean_env()),
            prepare=lambda: harness.fresh(dest),
            cleanup=lambda: fetched("pip"),
        ),
    ]
    if before is not None:
        before_env = dict(env, PYTHONPATH=str(before.resolve()))
        contenders.append(
            Contender(
                f"build --lock (cold), code in {before}",
                harness.show(build, before_env),
                # From the work directory: `-m` puts the current one first on the path.
                lambda: harness.run(build, log, before_env, work),
                prepare=clean,
                cleanup=clean,
            )
        )
    hogged = [harness.hogged(c) for c in contenders[:2]] if hogs else []
    try:
        harness.interleave(contenders + hogged, runs, sys.stderr)
    finally:
        clean()
    results = harness.measured(contenders + hogged)
    comparisons = [
        # Wall-time targets (the network sets the pace); the CPU ratio is shown beside them.
        harness.ratio("ratio build/8 parallel curls", results[0], results[1], TARGET_CURL, False),
        harness.ratio("ratio build/pip download", results[0], results[2], TARGET_PIP, False),
    ]
    if before is not None:
        comparisons.append(harness.ratio("ratio build/build before", results[0], results[3], None))
        comparisons.append(harness.ratio("ratio before/pip download", results[3], results[2], None))
    if hogged:
        a, b = results[len(contenders)], results[len(contenders) + 1]
        label = f"ratio build/8 parallel curls, both beside {harness.HOGS} hogs"
        comparisons.append(harness.ratio(label, a, b, None))
    total = sum(f["size"] for f in files)
    report = Report(
        bench="cold_real",
        title=f"cold build of the real {profile} stack vs 8 curls and pip download",
        setup=f"{len(files)} files, {total / 1e9:.2f} GB, from the real index ({lock.name})",
        runs=runs,
        measured=results,
        comparisons=tuple(comparisons),
        notes=(
            "ours fetches every file of the lock, hashes each as it arrives, checks every "
            "wheel, builds its pure sdist into a wheel and writes the tarball with its "
            ".sha256; the curls fetch every file; pip the wheels (it cannot fetch an sdist "
            "without building its metadata)",
        ),
    )
    shutil.rmtree(work, ignore_errors=True)
    return report, [list(m.samples) for m in results]


if __name__ == "__main__":
    sys.exit(main())
