"""Run every benchmark one after another and print a summary docs/benchmarks.md can quote.

    python bench/run_all.py [--runs N] [--size 1G] [--json] [--only NAME]...

Each benchmark's own table goes to stdout as it finishes (its progress to stderr); then two
Markdown tables: the medians, and every target with PASS or MISS.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/run_all.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cold_build, harness, install, peak_memory, startup, verify, warm_rebuild
from bench.harness import BenchError, Options, Report

START_LOAD = os.getloadavg()  # the machine's load when the run began (1, 5, 15 minutes)
BENCHES: dict[str, Callable[[Options, TextIO | None], Report]] = {
    "cold_build": cold_build.bench,
    "warm_rebuild": warm_rebuild.bench,
    "install": install.bench,
    "verify": verify.bench,
    "startup": startup.bench,
    "peak_memory": peak_memory.bench,
}


def _cpu(m: harness.Measured) -> str:
    if m.cpu_median is None or m.unit != "s":
        return "-"
    return f"{m.cpu_median:.2f}"


def summary(reports: list[Report], size: int, runs: int) -> str:
    """Two Markdown tables: every contender's median, range and the load average around its
    runs, then every ratio with its range over the runs: against the strongest baseline (with
    its target: PASS or MISS) and the familiar one (info)."""
    lines = [
        f"Load average at the start {' '.join(f'{x:.1f}' for x in START_LOAD)}.",
        f"Synthetic stack of {size / 1e9:g} GB (peak_memory: also "
        f"{peak_memory.GROWTH * size / 1e9:g} GB), median and range of {runs} run(s) in ABBA "
        f"order, 127.0.0.1 index; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores (rows marked [core N]: both sides held to that one core), "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end",
        "",
        "| benchmark | contender | median | range | CPU s (median) | load before -> after |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in reports:
        lines += [
            f"| {r.bench} | {m.name} | {harness.num(m.median, m.unit)} | {harness.spread(m)} | "
            f"{_cpu(m)} | {m.load} |"
            for m in r.measured
        ]
    lines += [
        "",
        "| benchmark | ratio (median of pairs) | wall | range | CPU (range) | target | result |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in reports:
        lines += [
            f"| {r.bench} | {c.label} | {harness.num(c.value, c.unit)} | {c.spread} | "
            f"{c.cpu_spread} | {harness.target(c)} | {harness.verdict(c, long=False)} |"
            for c in r.comparisons
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument(
        "--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)"
    )
    args = p.parse_args(argv)
    opts = harness.options(args)
    reports: list[Report] = []
    failed: list[str] = []
    started = time.perf_counter()
    for name, bench in BENCHES.items():
        if args.only and name not in args.only:
            continue
        print(f"-- {name}", file=sys.stderr)
        try:
            report = bench(opts, sys.stderr)
        except BenchError as exc:
            print(f"bench {name}: {exc}", file=sys.stderr)
            failed.append(name)
            continue
        reports.append(report)
        if not opts.json:
            print(harness.render_text(report) + "\n", flush=True)
    elapsed = time.perf_counter() - started
    if opts.json:
        doc = {
            "size_bytes": opts.size,
            "runs": opts.runs,
            "seconds": elapsed,
            "failed": failed,
            "reports": [harness.to_json(r) for r in reports],
        }
        print(json.dumps(doc, indent=2))
    else:
        print(summary(reports, opts.size, opts.runs))
        print(f"\n(all benchmarks took {elapsed / 60:.1f} min)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
