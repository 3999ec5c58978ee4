"""This node among others: the facts a fleet report compares across nodes (host name, open-file
limit, /dev/shm, the NCCL/GLOO interfaces, MASTER_ADDR, the environment fingerprint). They are
gathered with the other facts and reported in the doctor's JSON `host`; no check reads them."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from verl_bundle.airgap.doctor import fingerprint

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
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
    fingerprint: str | None = None  # what the installer wrote under the prefix

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


def probe_node(env: Mapping[str, str], prefix: str | None) -> Node:
    master = env.get("MASTER_ADDR") or None
    return Node(
        hostname=socket.gethostname(),
        open_files=_open_files(),
        shm_bytes=_shm(),
        interfaces=_interfaces(),
        ifnames={k: env[k] for k in IFNAME_VARS if env.get(k)},
        master_addr=master,
        master_addr_resolves=_resolves(master) if master else None,
        fingerprint=fingerprint.read(prefix),
    )
