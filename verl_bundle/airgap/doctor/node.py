"""This node among others: the facts a fleet report compares across nodes (host name, open-file
limit, /dev/shm, the NCCL/GLOO interfaces, MASTER_ADDR, the environment fingerprint recomputed
from the installed files, the variables that change a run). They are gathered with the other
facts and reported in the doctor's JSON `host`; no check reads them."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from verl_bundle.airgap.doctor import fingerprint

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
# The variables that change a run: a node where one differs loads other files or code, uses
# other GPUs, or talks another transport (the fleet report compares them; unset is a value).
RUN_VAR_PREFIXES = ("HF_", "NCCL_", "GLOO_", "CUDA_")
RUN_VAR_NAMES = ("TRANSFORMERS_OFFLINE", "PYTHONPATH", "LD_LIBRARY_PATH")
SHM = "/dev/shm"  # noqa: S108 - only its size is read
SYS_NET = "/sys/class/net"


@dataclass(frozen=True)
class Node:
    hostname: str = ""
    open_files: int | None = None  # the soft `ulimit -n`
    shm_bytes: int | None = None  # size of /dev/shm
    interfaces: tuple[str, ...] = ()
    ifnames: dict[str, str] = field(default_factory=dict)  # NCCL_/GLOO_SOCKET_IFNAME as set
    master_addr: str | None = None
    master_addr_resolves: bool | None = None  # None: MASTER_ADDR not set
    fingerprint: str | None = None  # of the environment under the prefix, as it is now
    distributions: dict[str, str] | None = None  # name -> its entry (fingerprint.py)
    installed_fingerprint: str | None = None  # what the install ended with
    changed: tuple[str, ...] = ()  # what differs from what the install ended with
    env: dict[str, str] = field(default_factory=dict)  # the variables that change a run
    image: str | None = None  # how the prefix is provided: "directory", or the image's mount

    def missing_interfaces(self) -> dict[str, str]:
        """{variable: value} for each *_SOCKET_IFNAME that names no interface of this node."""
        return {k: v for k, v in self.ifnames.items() if not ifname_matches(v, self.interfaces)}


def ifname_matches(value: str, interfaces: tuple[str, ...]) -> bool:
    """Whether NCCL would find an interface for `value`: a comma list of name prefixes, `=` for
    exact names, `^` to exclude (then any interface left over will do)."""
    value = value.strip()
    if value.startswith("^"):
        gone = [p for p in value[1:].lstrip("=").split(",") if p]
        return any(not any(i.startswith(p) for p in gone) for i in interfaces)
    exact = value.startswith("=")
    parts = [p.strip() for p in value.lstrip("=").split(",") if p.strip()]
    return any(i == p if exact else i.startswith(p) for p in parts for i in interfaces)


def _interfaces() -> tuple[str, ...]:
    try:
        return tuple(sorted(name for _, name in socket.if_nameindex()))
    except OSError:
        try:
            return tuple(sorted(p.name for p in Path(SYS_NET).iterdir()))
        except OSError:
            return ()


def _open_files() -> int | None:
    try:
        import resource
    except ImportError:  # not on Linux
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _shm() -> int | None:
    try:
        st = os.statvfs(SHM)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def _resolves(host: str) -> bool:
    try:
        return bool(socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return False


def run_vars(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that change a run, as set here."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k.startswith(RUN_VAR_PREFIXES) or k in RUN_VAR_NAMES) and k not in IFNAME_VARS
    }


SQUASHFS = ("squashfs", "fuse.squashfuse", "fuse.squashfuse_ll")
MOUNTINFO = "/proc/self/mountinfo"


def provided(prefix: str, mountinfo: str = MOUNTINFO) -> str:
    """ "directory", or "squashfs image (FSTYPE, read-only)" where `prefix` is the mount point
    of an image (`install.sh --image`: one read-only image on a shared filesystem)."""
    where = os.path.realpath(prefix)
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return "directory"
    for line in reversed(lines):  # the last mount on a point is the one seen
        fields = line.split(" - ", 1)
        head, tail = fields[0].split(), fields[1].split() if len(fields) > 1 else []
        point = head[4].replace("\\040", " ") if len(head) > 4 else ""
        if point == where and tail:
            return f"squashfs image ({tail[0]}, read-only)" if tail[0] in SQUASHFS else "directory"
    return "directory"


def _environment(node: Node, prefix: str | None, deep: bool) -> Node:
    """`node` with the live fingerprint of the environment at `prefix` and what changed since
    its install (unchanged without an environment there)."""
    if not prefix or not fingerprint.site_dirs(prefix):
        return node
    image = provided(prefix)
    # A read-only image mount has other inodes and times than the directory it was packed
    # from, and nothing in it can change in place: sizes only there (the image is FILE.sha256).
    since = fingerprint.read_stats(prefix) if image == "directory" else None
    now = fingerprint.examine(prefix, deep, since)
    entries = now.entries()
    before = fingerprint.read_entries(prefix)
    return replace(
        node,
        fingerprint=now.fingerprint,
        distributions=entries,
        installed_fingerprint=fingerprint.read(prefix),
        changed=tuple(fingerprint.changes(before, entries)) if before is not None else (),
        image=image,
    )


def probe_node(env: Mapping[str, str], prefix: str | None, deep: bool = False) -> Node:
    master = env.get("MASTER_ADDR") or None
    node = Node(
        hostname=socket.gethostname(),
        open_files=_open_files(),
        shm_bytes=_shm(),
        interfaces=_interfaces(),
        ifnames={k: env[k] for k in IFNAME_VARS if env.get(k)},
        master_addr=master,
        master_addr_resolves=_resolves(master) if master else None,
        env=run_vars(env),
    )
    return _environment(node, prefix, deep)
