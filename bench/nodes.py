"""Nodes: N simulated nodes installing at once from one served copy (`install.sh --from URL`)
vs one node installing its own extracted copy, for N = 1, 2, 4.

The bundle is built and extracted once (untimed) and served as it is by `python3 -m
http.server` on 127.0.0.1. A "node" is a separate --work copy and --prefix; the N installs
are started together and timed until the last one ends. Each node's fetch time comes from its
`fetch` step event (--events). The goal is near-flat: N nodes take about as long as one, which
needs N times the cores and disk bandwidth of one install (see docs/benchmarks.md).

    python bench/nodes.py [--runs N] [--size 200M] [--nodes 1,2,4] [--json]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/nodes.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness
from bench.built import built_bundle
from bench.harness import BenchError, Contender, Options, Report
from verl_bundle.airgap.contract.events import read_events

COUNTS = (1, 2, 4)
FLAT = 1.5  # N=4 at most 1.5x of N=1: "near-flat"


@contextmanager
def http_server(root: Path, log: Path) -> Iterator[str]:
    """`python3 -m http.server` serving `root` on a free 127.0.0.1 port; yields its base URL."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise BenchError("python3 -m http.server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


def concurrent(cmds: list[list[str]], log: Path) -> float:
    """Start every command at once; the wall time until the last one ends."""
    with log.open("ab") as out:
        for cmd in cmds:
            out.write(f"$ {harness.show(cmd)}\n".encode())
        out.flush()
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=harness.clean_env(),
            )
            for cmd in cmds
        ]
        codes = [p.wait() for p in procs]
        elapsed = time.perf_counter() - start
    if any(codes):
        raise BenchError(f"a node's install exited {codes}; see {log}")
    return elapsed


def fetch_seconds(events: Path) -> float:
    return sum(
        float(e["seconds"])
        for e in read_events(str(events))
        if e["event"] == "step" and e.get("step") == "fetch" and e["status"] == "ok"
    )


def bench(opts: Options, progress: TextIO | None, counts: tuple[int, ...] = COUNTS) -> Report:
    with built_bundle("nodes", opts, progress) as built:
        stack, work, log = built.stack, built.work, built.log
        bundle = built.extract()
        nodes = work / "nodes"
        common = ["--python", opts.python, "--yes"]
        fetched: dict[int, list[float]] = defaultdict(list)

        def clear() -> None:
            harness.fresh(nodes)

        with http_server(work / "x", work / "http.log") as base:
            url = f"{base}/{bundle.name}/"

            def served(n: int) -> float:
                cmds = []
                for i in range(n):
                    node = nodes / f"n{i}"
                    cmds.append(
                        [
                            *("sh", str(bundle / "install.sh"), "--from", url),
                            *("--work", str(node / "bundle"), "--prefix", str(node / "prefix")),
                            *("--events", str(node / "events.jsonl"), *common),
                        ]
                    )
                elapsed = concurrent(cmds, log)
                fetched[n].append(
                    statistics.mean(
                        fetch_seconds(nodes / f"n{i}" / "events.jsonl") for i in range(n)
                    )
                )
                return elapsed

            local = [str(bundle / "install.sh"), "--prefix", str(nodes / "local"), *common]
            contenders = [
                Contender(
                    "1 node, its own copy", harness.show(local), lambda: harness.run(local, log)
                )
            ]
            for n in counts:
                contenders.append(
                    Contender(
                        f"{n} node(s) from one served copy",
                        f"{n} x install.sh --from {url} (separate --work and --prefix)",
                        lambda n=n: served(n),  # type: ignore[misc]
                    )
                )
            harness.warm_up(contenders, clear, clear)
            fetched.clear()
            harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    by_n = dict(zip(counts, results[1:], strict=True))
    comparisons = [harness.ratio("ratio served N=1 / own copy", by_n[counts[0]], results[0], 1.5)]
    if len(counts) > 1:
        comparisons.append(
            harness.ratio(
                f"ratio N={counts[-1]} / N={counts[0]}", by_n[counts[-1]], by_n[counts[0]], FLAT
            )
        )
    notes = tuple(
        f"N={n}: each node's fetch step, median {statistics.median(v):.2f} s"
        for n, v in sorted(fetched.items())
    )
    return Report(
        bench="nodes",
        title="N nodes installing from one served copy vs one node",
        setup=(
            f"{stack.describe()}; Python {opts.python}; python3 -m http.server on 127.0.0.1; "
            f"{os.cpu_count()} cores"
        ),
        runs=opts.runs,
        measured=results,
        comparisons=tuple(comparisons),
        notes=notes,
    )


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--nodes", default="1,2,4", help="node counts, comma-separated (default 1,2,4)")
    args = p.parse_args(argv)
    opts = harness.options(args)
    counts = tuple(int(n) for n in args.nodes.split(","))
    return harness.emitted("nodes", lambda: bench(opts, sys.stderr, counts), opts.json)


if __name__ == "__main__":
    sys.exit(main())
