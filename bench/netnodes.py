"""N nodes on a network: each node a network namespace joined to one served copy by a veth link
through a bridge, with a `tc` rate limit on every node's link and on the server's, so that the
figure is a network's and not this host's CPUs (bench/nodes.py runs N installs on one host and
so measures CPU contention).

    server ns --veth (tbf --server-rate)--> switch ns (bridge) --veth (tbf --node-rate)--> node ns

The bundle is built and extracted once (untimed) and served by the server program's own
`serve` (a threaded server) in the server namespace. Each node runs the bundle's install.sh
--from URL --help with a --work of its own: the served fetcher fetches and checks every file
(the network part), then the fetched install.sh only prints its help (the install itself is
CPU and disk, measured by bench/install.py). N nodes start together; the row is the slowest
node's fetch step (from its --events), the time until the last node has its copy.
The rates are scaled down from a cluster's (1 Gbit/s per node, 10 Gbit/s at the server by
default here 100 Mbit/s and 1 Gbit/s, the same 1:10) so that this host's cores can fill the
links: at full rate the CPU, not the link, would set the figure. Needs root (ip netns, tc).

    python bench/netnodes.py [--runs N] [--size 200M] [--nodes 1,2,4,8]
        [--node-rate 100mbit] [--server-rate 1gbit] [--json]
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/netnodes.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness
from bench.built import built_bundle
from bench.harness import BenchError, Contender, Options, Report
from bench.nodes import fetch_seconds

REPO = Path(__file__).resolve().parents[1]
PREFIX = f"vbn{os.getpid() % 10000}"  # namespace names of this run
SUBNET = "10.77.{}.{}"
PORT = 8000
RATE = re.compile(r"\d+(?:\.\d+)?[kmg]?bit")


def ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _bits(rate: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
    assert m is not None
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def shape(ns: str, dev: str, rate: str) -> None:
    """A token bucket on `dev`'s egress in `ns`: at most `rate` leaves through it."""
    burst = max(int(_bits(rate) / 8 / 250), 32 * 1024)  # at least one timer tick's worth
    cmd = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate]
    proc = subprocess.run(
        [*cmd, "burst", str(burst), "latency", "100ms"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise BenchError(f"tc on {ns}/{dev}: {proc.stderr.strip()}")


@contextmanager
def network(nodes: int, node_rate: str, server_rate: str) -> Iterator[list[str]]:
    """The server's, the switch's and `nodes` nodes' namespaces, linked and shaped; yields the
    node namespaces' names. Everything is removed on the way out."""
    made: list[str] = []
    try:
        for name in ("sw", "srv", *(f"n{i}" for i in range(nodes))):
            ip("netns", "add", f"{PREFIX}-{name}")
            made.append(f"{PREFIX}-{name}")
        sw, srv = f"{PREFIX}-sw", f"{PREFIX}-srv"
        ip("-n", sw, "link", "add", "br0", "type", "bridge")
        ip("-n", sw, "link", "set", "br0", "up")
        ends = [(srv, "srv", 1)] + [(f"{PREFIX}-n{i}", f"n{i}", 10 + i) for i in range(nodes)]
        for ns, tag, host in ends:
            ip("link", "add", f"{PREFIX}{tag}", "type", "veth", "peer", "name", f"{PREFIX}p{tag}")
            ip("link", "set", f"{PREFIX}{tag}", "netns", ns)
            ip("link", "set", f"{PREFIX}p{tag}", "netns", sw)
            ip("-n", ns, "link", "set", f"{PREFIX}{tag}", "name", "eth0")
            ip("-n", ns, "addr", "add", SUBNET.format(0, host) + "/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", sw, "link", "set", f"{PREFIX}p{tag}", "master", "br0", "up")
            if tag == "srv":
                shape(ns, "eth0", server_rate)  # everything the server sends
            else:
                shape(sw, f"{PREFIX}p{tag}", node_rate)  # everything this node receives
        yield [f"{PREFIX}-n{i}" for i in range(nodes)]
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@contextmanager
def serving(root: Path, log: Path) -> Iterator[str]:
    """The server program's `serve` of `root` in the server namespace; yields its base URL."""
    env = {**harness.clean_env(), "PYTHONPATH": str(REPO)}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                *("ip", "netns", "exec", f"{PREFIX}-srv", sys.executable, "-m"),
                *("verl_bundle.airgap", "serve", str(root), "--port", str(PORT)),
                *("--bind", SUBNET.format(0, 1)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        probe = f"import socket; socket.create_connection(('{SUBNET.format(0, 1)}', {PORT}), 1)"
        for _ in range(200):
            ok = subprocess.run(
                ["ip", "netns", "exec", f"{PREFIX}-srv", sys.executable, "-c", probe],
                capture_output=True,
            )
            if ok.returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise BenchError(f"serve did not start; see {log}")
        yield f"http://{SUBNET.format(0, 1)}:{PORT}"
    finally:
        proc.terminate()
        proc.wait()


def bench(opts: Options, counts: tuple[int, ...], node_rate: str, server_rate: str) -> Report:
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} is not installed (iproute2)")
    if os.geteuid() != 0:
        raise BenchError("network namespaces and tc need root")
    progress = sys.stderr
    fetched: dict[int, list[float]] = defaultdict(list)
    with built_bundle("netnodes", opts, progress) as built:
        stack, work, log = built.stack, built.work, built.log
        bundle = built.extract()
        size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
        nodes_dir = work / "nodes"
        contenders = []
        with (
            network(max(counts), node_rate, server_rate) as spaces,
            serving(work / "x", work / "serve.log") as base,
        ):
            url = f"{base}/{bundle.name}/"

            def run(n: int) -> float:
                cmds = [
                    [
                        *("ip", "netns", "exec", spaces[i], "sh", str(bundle / "install.sh")),
                        *("--from", url, "--work", str(nodes_dir / f"n{i}" / "bundle")),
                        *("--prefix", str(nodes_dir / f"n{i}" / "prefix"), "--help"),
                        *("--events", str(nodes_dir / f"n{i}" / "events.jsonl")),
                    ]
                    for i in range(n)
                ]
                from bench.nodes import concurrent

                concurrent(cmds, log)
                each = [fetch_seconds(nodes_dir / f"n{i}" / "events.jsonl") for i in range(n)]
                if not all(each):
                    raise BenchError(f"a node recorded no fetch step; see {log}")
                fetched[n].append(statistics.median(each))
                return max(each)

            for n in counts:
                contenders.append(
                    Contender(
                        f"{n} node(s), one served copy",
                        f"{n} x ip netns exec NODE install.sh --from {url} --help",
                        lambda n=n: run(n),  # type: ignore[misc]
                    )
                )
            harness.warm_up(
                contenders, lambda: harness.fresh(nodes_dir), lambda: harness.fresh(nodes_dir)
            )
            fetched.clear()
            harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    node_bps, server_bps = _bits(node_rate) / 8, _bits(server_rate) / 8
    notes = [
        f"N={n}: a node's fetch step, median {statistics.median(v):.2f} s; the links allow "
        f"{size / min(node_bps, server_bps / n):.2f} s ({size / 1e6:.0f} MB at "
        f"{min(node_bps, server_bps / n) * 8 / 1e6:.0f} Mbit/s each)"
        for n, v in sorted(fetched.items())
    ]
    return Report(
        bench="netnodes",
        title="N nodes, each a network namespace, fetching one served copy over shaped links",
        setup=(
            f"{stack.describe()} ({size / 1e6:.0f} MB served); node links {node_rate}, server "
            f"link {server_rate} (tc tbf on veth, through a bridge); serve in its own "
            f"namespace; {os.cpu_count()} cores"
        ),
        runs=opts.runs,
        measured=tuple(results),
        comparisons=(),
        notes=tuple(notes),
    )


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--nodes", default="1,2,4,8", help="node counts (default 1,2,4,8)")
    p.add_argument("--node-rate", default="100mbit", help="each node's link (tc rate)")
    p.add_argument("--server-rate", default="1gbit", help="the server's link (tc rate)")
    args = p.parse_args(argv)
    for rate in (args.node_rate, args.server_rate):
        if not RATE.fullmatch(rate):
            p.error(f"{rate!r}: give a tc rate such as 100mbit or 1gbit")
    opts = harness.options(args)
    counts = tuple(int(n) for n in args.nodes.split(","))
    return harness.emitted(
        "netnodes", lambda: bench(opts, counts, args.node_rate, args.server_rate), opts.json
    )


if __name__ == "__main__":
    sys.exit(main())
