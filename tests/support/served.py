"""A bundle served as it is by `python3 -m http.server`, inside a network namespace of its own:
the namespace's loopback is the only network, so the served side is air-gapped like a cluster's
intranet and nothing can reach the internet."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from support.airgap import netns_prefix

PORT = 8000  # a fresh namespace: every port is free
BASE = f"http://127.0.0.1:{PORT}"

# Bring up the namespace's loopback, serve `root` with the stdlib server (killed on exit), and
# wait until it answers (a connection attempt per 0.05 s, at most 20 s: not a timing assertion).
_PRELUDE = """set -u
ip link set lo up
(cd {root} && exec {python} -m http.server {port} --bind 127.0.0.1) >{log} 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
{python} -c '
import socket, sys, time
for _ in range(400):
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit("the http.server did not start")
'
"""


def serving(
    root: Path,
    script: str,
    env: dict[str, str],
    cwd: Path,
    python: str = "python3",
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    """Run the sh `script` in a new network namespace where `root` is served at BASE."""
    prelude = _PRELUDE.format(
        root=shlex.quote(str(root)),
        python=shlex.quote(python),
        port=PORT,
        log=shlex.quote(str(cwd / "http.server.log")),
    )
    return subprocess.run(
        [*netns_prefix(), "sh", "-c", prelude + script],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
