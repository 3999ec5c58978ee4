"""The real stack's rows, in one run (`make bench-real`): the cold build against 8 parallel curls
and `pip download`, the warm rebuild with the lock against `tar cf`, verify against `openssl dgst`,
and install.sh against `uv venv` + `uv pip install --offline` with the import floor of its
checks, all on one profile's committed lock (cu130 by default: the default index alone).

Each row runs every contender --runs times in ABBA order, with the load average before and
after each sample and every ratio's range over the paired samples. The targets:
- cold build <= 0.5x pip download and <= 1.1x the curls, in wall time (bench/cold_real.py);
- warm rebuild with --lock <= 1.15x `tar cf` of the same cached files, in wall and CPU
  seconds (also with the page cache dropped: the "(cold cache)" rows);
- verify <= 1.15x `openssl dgst -sha256` of the tarball, in wall and CPU seconds (page cache
  warm for both; the "(cold cache)" rows drop it first);
- install.sh <= 1.3x uv, raw; beside it (install.sh - floor) / uv, where the floor is one
  cold import, from source, of the modules post-install proves, taken right after each
  install.sh in its venv; and post-install <= 1.2x that floor. The page cache is
  dropped before every install run of either side (root only; said when it cannot be), so
  both read the wheels from the disk. install.sh runs with --quick (the trainer dry run is
  readiness's own row, not an install cost) and leaves out the phases --skip-phase names
  (flash-attn, built on the server when the host compiles nothing: the verdict is then "not
  ready", exit 5, which the row accepts).

Needs the internet (the cold rows) and about 4x the stack's size in free disk under --workdir.

    python bench/real_rows.py [--profile cu130] [--runs 5] [--workdir DIR] [--cache-dir DIR]
        [--tarball FILE] [--rows warm,verify] [--before DIR] [--hogs] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tarfile
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/real_rows.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cold_real, harness
from bench.harness import Comparison, Contender, Measured, Report
from bench.install import floor_modules, import_floor, timed_steps

NOT_READY = 5  # install.sh's verdict with a phase left out: installed, not ready to train
TARGETS = {"warm": 1.15, "verify": 1.15, "install": 1.3, "checks": 1.2}  # issue 39's
DROP = Path("/proc/sys/vm/drop_caches")


def drop_caches() -> bool:
    """Write back, then drop the page cache (root), so the next run reads from the disk."""
    os.sync()
    try:
        DROP.write_text("3\n")
    except OSError:
        return False
    return True


def build_cmd(profile: str, python: str, lock: Path, cache: Path, out: Path) -> list[str]:
    return [
        *harness.verl_bundle(),
        *("build", "--profile", profile, "--python", python, "--lock", str(lock)),
        *("--compile", "never", "--cache-dir", str(cache), "-o", str(out)),
    ]


def build_once(profile: str, python: str, lock: Path, work: Path, cache: Path) -> Path:
    """Build once into `cache` (untimed: from the network unless it is filled); the tarball."""
    work.mkdir(parents=True, exist_ok=True)
    env = harness.clean_env(UV_CACHE_DIR=str(work / "uv-cache"), XDG_CACHE_HOME=str(work / "x"))
    print("  building once into the cache (untimed) ...", file=sys.stderr, flush=True)
    cmd = build_cmd(profile, python, lock, cache, work / "first")
    harness.run(cmd, work / "commands.log", env)
    return next((work / "first").glob("*.tar"))


def _twins(
    contenders: list[Contender], cold: list[tuple[int, Path]], hogs: bool
) -> list[Contender]:
    """The contenders, the (index, files) ones again with those files out of the page cache,
    and with `hogs` every one of them again beside two CPU hogs."""
    out = contenders + [harness.cold(contenders[i], files) for i, files in cold]
    return out + ([harness.hogged(c) for c in out] if hogs else [])


def warm_rows(
    profile: str,
    python: str,
    lock: Path,
    work: Path,
    cache: Path,
    runs: int,
    before: Path | None = None,
    hogs: bool = False,
) -> Report:
    """The warm rebuild with the lock (the cache build_once filled) against tar cf of the same
    cached files; both again with the page cache dropped; with `before`, ours with older
    code."""
    log, out = work / "commands.log", work / "out"
    env = harness.clean_env(UV_CACHE_DIR=str(work / "uv-cache"), XDG_CACHE_HOME=str(work / "x"))
    ours = build_cmd(profile, python, lock, cache, out)
    files = cache / "sha256"
    tar = ["tar", "cf", str(out / "all.tar"), "-C", str(files), "."]
    q = shlex.quote
    floor = [
        "bash",
        "-c",
        f"tar cf {q(str(out / 'all.tar'))} -C {q(str(files))} . & "
        f"find {q(str(files))} -type f -print0 | xargs -0 openssl dgst -sha256 >/dev/null; wait",
    ]
    contenders = [
        Contender(
            "build --lock (warm)", harness.show(ours, env), lambda: harness.run(ours, log, env)
        ),
        Contender("tar cf of the cached files", harness.show(tar), lambda: harness.run(tar, log)),
        Contender(
            "tar cf + openssl dgst of each file, at once",
            harness.show(floor),
            lambda: harness.run(floor, log),
        ),
    ]
    if before is not None:
        old, old_env = harness.older(ours, env, before)
        contenders.append(
            Contender(
                "build --lock (warm), before",
                harness.show(old, old_env),
                lambda: harness.run(old, log, old_env, cwd=work),
            )
        )
    harness.warm_up(contenders, lambda: harness.fresh(out), lambda: harness.remove(out))
    cold = [(0, cache), (1, files)] + ([(3, cache)] if before is not None else [])
    contenders = _twins(contenders, cold, hogs)
    harness.interleave(contenders, runs, sys.stderr)
    m = harness.measured(contenders)
    blobs = [f for f in files.rglob("*") if f.is_file()]
    size = sum(f.stat().st_size for f in blobs)
    return Report(
        bench="real_warm",
        title=f"warm rebuild of the real {profile} stack vs tar cf",
        setup=f"{len(blobs)} cached files, {size / 1e9:.2f} GB",
        runs=runs,
        measured=m,
        comparisons=(
            harness.ratio("ratio build --lock/tar cf", m[0], m[1], TARGETS["warm"]),
            harness.ratio("ratio build --lock/tar + openssl at once", m[0], m[2], None),
            *harness.ratios(
                m,
                harness.side_rows(
                    "build --lock",
                    "tar cf",
                    m[0].name,
                    m[1].name,
                    "build --lock (warm), before",
                    TARGETS["warm"],
                ),
            ),
        ),
        notes=(
            "ours checks every cached file against the lock's sha256 from the read that copies "
            "it into the bundle, writes the manifest and SHA256SUMS, and the tarball's .sha256",
            "(cold cache): the files dropped from the page cache (posix_fadvise) before each run",
        ),
    )


def verify_rows(
    tarball: Path, work: Path, runs: int, before: Path | None = None, hogs: bool = False
) -> Report:
    """verify against openssl dgst and sha256sum -c; verify and openssl again with the tarball
    out of the page cache; with `before`, verify with older code."""
    log = work / "commands.log"
    ours = [*harness.verl_bundle(), "verify", str(tarball)]
    openssl = ["openssl", "dgst", "-sha256", str(tarball)]
    sums = ["sha256sum", "--quiet", "-c", f"{tarball.name}.sha256"]
    contenders = [
        Contender("verl-bundle verify", harness.show(ours), lambda: harness.run(ours, log)),
        Contender("openssl dgst -sha256", harness.show(openssl), lambda: harness.run(openssl, log)),
        Contender(
            "sha256sum -c",
            f"cd {tarball.parent} && {harness.show(sums)}",
            lambda: harness.run(sums, log, cwd=tarball.parent),
        ),
    ]
    if before is not None:
        old, old_env = harness.older(ours, harness.clean_env(), before)
        contenders.append(
            Contender(
                "verify, before",
                harness.show(old, old_env),
                lambda: harness.run(old, log, old_env, cwd=work),
            )
        )
    for c in contenders:
        c.measure()  # untimed warm-up: the tarball in the page cache for every contender
    cold = [(0, tarball), (1, tarball)] + ([(3, tarball)] if before is not None else [])
    contenders = _twins(contenders, cold, hogs)
    harness.interleave(contenders, runs, sys.stderr)
    m = harness.measured(contenders)
    return Report(
        bench="real_verify",
        title="verify the real tarball vs openssl dgst and sha256sum -c",
        setup=f"{tarball.name}, {tarball.stat().st_size / 1e9:.2f} GB",
        runs=runs,
        measured=m,
        comparisons=(
            harness.ratio("ratio verify/openssl", m[0], m[1], TARGETS["verify"]),
            harness.ratio("ratio verify/sha256sum -c", m[0], m[2], None),
            *harness.ratios(
                m,
                [
                    *harness.side_rows(
                        "verify",
                        "openssl",
                        m[0].name,
                        m[1].name,
                        "verify, before",
                        TARGETS["verify"],
                    ),
                    ("ratio verify before/sha256sum -c", "verify, before", m[2].name, None),
                ],
            ),
        ),
        notes=(
            "verify reads the tarball once and, with its .sha256 beside it, hashes the whole "
            "file alone, each byte once (its members are the bytes the build hashed)",
            "(cold cache): the tarball dropped from the page cache (posix_fadvise) before each run",
        ),
    )


def install_rows(tarball: Path, python: str, skip: list[str], work: Path, runs: int) -> Report:
    """install.sh against uv on the extracted bundle, and its checks against their floor."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "commands.log"
    print("  extracting the bundle (untimed) ...", file=sys.stderr, flush=True)
    with tarfile.open(tarball) as tf:
        tf.extractall(work / "x", filter="data")
    bundle = next((work / "x").iterdir())
    manifest = json.loads((bundle / "manifest.json").read_text())
    prefix = work / "prefix"
    installer = [str(bundle / "install.sh"), "--prefix", str(prefix), "--python", python]
    installer += ["--yes", "--quick", *[a for s in skip for a in ("--skip-phase", s)]]
    phases = [p for p in manifest["phases"] if p["name"] not in skip and not p["source_builds"]]
    uv = str(harness.BIN / "uv")
    uv_env = harness.clean_env(UV_CACHE_DIR=str(work / "uv-cache"), UV_NO_CONFIG="1")
    uv_venv = [uv, "venv", "--quiet", "--python", python, str(prefix)]
    uv_pip = [uv, "pip", "install", "--quiet", "--offline", "--no-index", "--no-deps"]
    uv_pip += ["--find-links", str(bundle / "wheels"), "--python", str(prefix / "bin" / "python")]
    for p in phases:
        uv_pip += ["-r", str(bundle / p["requirements"])]
    left_out = [m for p in manifest["phases"] if p["name"] in skip for m in _modules_of(p)]
    modules = [m for m in floor_modules(bundle) if m.split(".")[0] not in left_out]
    steps: dict[str, list[float]] = defaultdict(list)
    dropped = [True]

    def install() -> float:
        took = timed_steps(installer, log, steps, allowed=(0, NOT_READY))
        steps["import floor"].append(import_floor(prefix / "bin" / "python", modules, log))
        return took

    def uv_install() -> float:
        return harness.run(uv_venv, log, uv_env) + harness.run(uv_pip, log, uv_env)

    def prepare() -> None:
        harness.remove(prefix, work / "uv-cache")
        dropped[0] = drop_caches() and dropped[0]

    contenders = [
        Contender("install.sh --quick", harness.show(installer), install, prepare, prepare),
        Contender(
            "uv venv + uv pip install --offline",
            f"{harness.show(uv_venv, uv_env)} && {harness.show(uv_pip, uv_env)}",
            uv_install,
            prepare,
            prepare,
        ),
    ]
    for c in contenders:  # untimed warm-up: the installer's own bytecode, uv's first start
        c.prepare()
        c.measure()
    steps.clear()
    harness.interleave(contenders, runs, sys.stderr)
    ours, uv_m = harness.measured(contenders)
    floor = Measured(
        "import floor of the checks", "one cold import", "s", tuple(steps["import floor"])
    )
    checks = Measured(
        "post-install (checks)", "install.sh's step", "s", tuple(steps["post-install"])
    )
    return Report(
        bench="real_install",
        title="install.sh on the real stack vs uv, and its checks vs their import floor",
        setup=f"{manifest['name']}, phases {' '.join(p['name'] for p in phases)}; Python {python}",
        runs=runs,
        measured=(ours, uv_m, floor, checks),
        comparisons=(
            # The raw figure first, the target's; the one with the floor subtracted beside it.
            harness.ratio("ratio install.sh/uv (raw)", ours, uv_m, TARGETS["install"]),
            _less_floor(ours, floor, uv_m),
            harness.ratio("ratio post-install/import floor", checks, floor, TARGETS["checks"]),
        ),
        notes=(
            "install.sh steps, median s: "
            + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in steps.items() if v),
            f"floor modules: {' '.join(modules)}",
            "page cache dropped before every run of either side"
            if dropped[0]
            else "the page cache could NOT be dropped (not root): both sides read it warm",
        ),
    )


def _modules_of(phase: dict[str, Any]) -> list[str]:
    """The top-level modules a phase brings, as its distributions are named ("flash-attn==2.8.3"
    -> flash_attn): what the floor cannot import when the phase is left out."""
    names = [str(p).split("==")[0] for p in phase.get("packages") or []] or [phase["name"]]
    return [n.replace("-", "_") for n in names]


def _less_floor(ours: Measured, floor: Measured, uv_m: Measured) -> Comparison:
    """(install.sh - its checks' import floor) / uv, per paired sample: the install's own
    overhead over uv once the imports its checks must make are paid."""
    paired = [
        (a - f) / u
        for a, f, u in zip(ours.samples, floor.samples, uv_m.samples, strict=True)
        if u > 0
    ]
    value = statistics.median(paired) if paired else (ours.median - floor.median) / uv_m.median
    return Comparison(
        "ratio (install.sh - import floor)/uv, beside the raw one",
        value,
        "x",
        None,
        min(paired, default=None),
        max(paired, default=None),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--profile", default="cu130")
    p.add_argument("--python", default="3.10", help="the target Python (a version)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/verl-bundle-real-rows"))
    p.add_argument(
        "--skip-phase",
        action="append",
        default=None,
        metavar="NAME",
        help="install.sh leaves it out (default: flash-attn, a server build)",
    )
    p.add_argument("--rows", default="cold,warm,verify,install", help="which rows to run")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="a build cache already filled for the profile (kept): the untimed first build "
        "downloads nothing (default: a new one under --workdir, removed)",
    )
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run the warm and verify rows with the verl_bundle package in DIR (older code)",
    )
    p.add_argument("--hogs", action="store_true", help="every contender again beside two CPU hogs")
    p.add_argument(
        "--tarball",
        type=Path,
        default=None,
        help="with --cache-dir: the bundle that cache built (no untimed first build)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    before = args.before.resolve() if args.before else None
    rows = set(args.rows.split(","))
    skip = args.skip_phase if args.skip_phase is not None else ["flash-attn"]
    from verl_bundle.interpreter import find_python

    python = find_python(args.python)
    if python is None:
        print(f"bench: no Python {args.python} on this host", file=sys.stderr)
        return 2
    tag = "cp" + args.python.replace(".", "")
    lock = cold_real.ROOT / "profiles" / "locks" / f"pylock.{args.profile}-{tag}.toml"
    reports: list[Report] = []
    work = harness.fresh(args.workdir)
    try:
        if rows & {"warm", "verify", "install"}:
            cache = args.cache_dir or work / "warm" / "cache"
            if args.tarball is not None and args.cache_dir is not None:
                tarball = args.tarball.resolve()
                (work / "warm").mkdir(parents=True, exist_ok=True)
            else:
                tarball = build_once(args.profile, args.python, lock, work / "warm", cache)
            if "warm" in rows:
                print("== warm rebuild", file=sys.stderr, flush=True)
                warm = warm_rows(
                    args.profile,
                    args.python,
                    lock,
                    work / "warm",
                    cache,
                    args.runs,
                    before,
                    args.hogs,
                )
                reports.append(warm)
            if "verify" in rows:
                print("== verify", file=sys.stderr, flush=True)
                reports.append(verify_rows(tarball, work / "warm", args.runs, before, args.hogs))
            harness.remove(work / "warm" / "cache")  # the disk, for the install rows
            if "install" in rows:
                print("== install", file=sys.stderr, flush=True)
                reports.append(install_rows(tarball, python, skip, work / "install", args.runs))
            harness.remove(work / "warm", work / "install")
        if "cold" in rows:  # last: the new rows fail early, if they fail
            print("== cold build", file=sys.stderr, flush=True)
            reports.append(
                cold_real.measure(
                    args.profile, args.python, args.runs, work / "cold", hogs=args.hogs
                )[0]
            )
    except harness.BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps([harness.to_json(r) for r in reports], indent=2))
    else:
        print("\n\n".join(harness.render_text(r) for r in reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
