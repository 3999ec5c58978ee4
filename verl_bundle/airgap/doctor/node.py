"""This node among others: the facts a fleet report compares across nodes (host name, open-file
limit, /dev/shm, the NCCL/GLOO interfaces, MASTER_ADDR, the environment fingerprint recomputed
from the installed files, the variables that change a run). They are gathered with the other
facts and reported in the doctor's JSON `host`; no check reads them."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from verl_bundle.airgap.doctor import fingerprint, unlisted

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


@dataclass(frozen=True)
class RunVar:
    """A variable (or, ending in `_`, a prefix of variables) that changes a run, and why: a
    node where one differs loads other files or code, uses other GPUs, talks another transport
    or behaves otherwise (the fleet report compares them; unset is a value)."""

    name: str
    why: str

    def matches(self, var: str) -> bool:
        return var.startswith(self.name) if self.name.endswith("_") else var == self.name


# Knowledge as data: the slurm and ansible installs gather the same list (rendered from it).
RUN_VARS = (
    RunVar("HF_", "a node online, or with another cache, loads other files (or fails offline)"),
    RunVar("TRANSFORMERS_OFFLINE", "a node online loads other files (or waits for the network)"),
    RunVar("PYTHONPATH", "a node with it imports other code than the bundle's venv"),
    RunVar("LD_LIBRARY_PATH", "a node with it loads other libraries than the bundle's"),
    RunVar(
        "NCCL_", "collectives need one transport setting on every node; a mismatch hangs or slows"
    ),
    RunVar("GLOO_", "collectives need one transport setting on every node; a mismatch hangs"),
    RunVar("CUDA_", "it changes which GPUs and CUDA libraries a node uses"),
    RunVar(
        "TORCH_NCCL_",
        "torch's NCCL process-group settings (async error handling, timeouts, blocking wait): "
        "a node that differs aborts or hangs on its own",
    ),
    RunVar(
        "VLLM_",
        "vLLM reads it at start-up (attention backend, engine version, memory): a node that "
        "differs rolls out differently, or fails there",
    ),
    RunVar(
        "PYTORCH_CUDA_ALLOC_CONF",
        "the CUDA caching allocator's settings: one node fragments or runs out of GPU memory "
        "where the others do not",
    ),
    RunVar(
        "WANDB_MODE",
        "a node where wandb is online waits for the network (offline here: it hangs) or logs "
        "elsewhere",
    ),
    RunVar(
        "OMP_NUM_THREADS",
        "CPU threads per process: a node that differs tokenizes and loads data slower, or "
        "oversubscribes its cores",
    ),
    RunVar(
        "NVIDIA_VISIBLE_DEVICES",
        "which GPUs the container runtime gives a node: another set changes what Ray counts",
    ),
    RunVar(
        "RAY_",
        "Ray reads its settings from the environment on every node (timeouts, memory, "
        "authentication): a node that differs behaves otherwise, or cannot join",
    ),
)
# Never shown: compared by a hash of the value (a name holding one of these words, or ending
# in _KEY).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
SECRET = re.compile("|".join(SECRET_WORDS) + "|_KEY$")


def run_var_patterns() -> tuple[str, str]:
    """(run variables, secrets) as `case` patterns of sh, for the cluster scripts."""
    names = " | ".join(r.name + "*" if r.name.endswith("_") else r.name for r in RUN_VARS)
    return names, " | ".join([*(f"*{w}*" for w in SECRET_WORDS), "*_KEY"])


def run_var_regexes() -> tuple[str, str]:
    """(run variables, secrets) as regular expressions, for Ansible's `match` and `search`."""
    prefixes = "|".join(r.name for r in RUN_VARS if r.name.endswith("_"))
    names = "|".join(r.name for r in RUN_VARS if not r.name.endswith("_"))
    return f"^({prefixes})|^({names})$", SECRET.pattern


SHM = "/dev/shm"  # noqa: S108 - only its size is read
SYS_NET = "/sys/class/net"


# Filesystems every node of a cluster may share: a home there is one home for all of them.
NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "ceph", "fuse.ceph-fuse", "beegfs")


@dataclass(frozen=True)
class RayToken:
    """A Ray token an earlier `ray.init()` or `ray get-auth-token --generate` left in
    ~/.ray/auth_token, and the filesystem of that home."""

    path: str
    size: int
    mode: int
    fstype: str = ""

    @property
    def shared(self) -> bool:
        return self.fstype in NETWORK_FS or self.fstype.startswith("nfs")


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
    # what no RECORD lists and came after the install, and links leaving the prefix (one line
    # each, doctor/unlisted.py); None: no environment at the prefix
    unlisted: tuple[str, ...] | None = None
    image_problem: str | None = None  # an image mount that does not serve the environment
    ray_token: RayToken | None = None  # a token in ~/.ray/auth_token

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


def open_files_limit() -> int | None:
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


def resolves(host: str) -> bool:
    try:
        return bool(socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return False


def run_var(var: str) -> RunVar | None:
    """The entry of RUN_VARS `var` is one of (the longest name), or None."""
    found = [r for r in RUN_VARS if r.matches(var)] if var not in IFNAME_VARS else []
    return max(found, key=lambda r: len(r.name)) if found else None


def shown_value(var: str, value: str) -> str:
    """`value` as it may be recorded and shown: a secret's (a token, a password) as its hash."""
    if SECRET.search(var) and not value.startswith("sha256:"):
        return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return value


def run_vars(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that change a run, as set here (secrets as their hash)."""
    return {k: shown_value(k, v) for k, v in sorted(env.items()) if run_var(k) is not None}


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


def fstype_of(path: str, mountinfo: str = MOUNTINFO) -> str:
    """The filesystem type of the mount holding `path` ('' when it cannot be read)."""
    where = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields = head.split()
        point = fields[4].replace("\\040", " ") if len(fields) > 4 else ""
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if point and inside and len(point) >= len(best) and tail.split():
            best, kind = point, tail.split()[0]
    return kind


def probe_ray_token(env: Mapping[str, str]) -> RayToken | None:
    """The token in $HOME/.ray/auth_token, if there is one (read: its size and mode only)."""
    home = env.get("HOME")
    if not home:
        return None
    path = os.path.join(home, ".ray", "auth_token")
    try:
        st = os.stat(path)
    except OSError:
        return None
    return RayToken(path, st.st_size, st.st_mode & 0o7777, fstype_of(path))


def ray_token_finding(
    token: RayToken | None, env: Mapping[str, str], nodes: int | None = None
) -> tuple[str, str, str]:
    """(status, summary, fix) for a Ray token left in ~/.ray: a head started without
    RAY_AUTH_MODE turns token authentication on from it, and workers started without it cannot
    join (a GCS connection error). A failure for a launch of more than one node (`nodes`),
    else a warning; nothing to say when this run sets its own token."""
    if token is None:
        return "ok", "no Ray token in ~/.ray/auth_token", ""
    own = env.get("RAY_AUTH_MODE") == "token" and (
        env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH")
    )
    if own or env.get("RAY_AUTH_MODE") == "disabled":
        how = "its own token" if own else "RAY_AUTH_MODE=disabled"
        return "ok", f"{token.path} is there, but this run sets {how}", ""
    where = f", on {token.fstype}: every node with this home reads it" if token.shared else ""
    readable = "; readable by every user" if token.mode & 0o004 else ""
    summary = (
        f"a Ray token in {token.path} ({token.size} bytes, mode {token.mode:04o}{readable}), "
        f"left by an earlier ray.init(){where}: a head started without RAY_AUTH_MODE turns "
        "token authentication on from it, and workers started without it cannot join (a GCS "
        "connection error)"
    )
    fix = (
        "start Ray with the script `verl-bundle slurm ray` writes (a token per job, the same "
        "RAY_AUTH_MODE=token on every node, ~/.ray unused), or export RAY_AUTH_MODE=token and "
        f"one RAY_AUTH_TOKEN_PATH on every node; or remove {token.path}"
    )
    return ("fail" if (nodes or 1) > 1 else "warn"), summary, fix


def image_problem(prefix: str) -> str | None:
    """Why an image mounted at `prefix` does not serve the environment it holds (its python,
    the fingerprint its install recorded), or None."""
    python = os.path.join(prefix, "bin", "python")
    real = os.path.realpath(python)
    inside = real.startswith(os.path.realpath(prefix).rstrip(os.sep) + os.sep)
    if not os.access(python, os.X_OK):
        if not inside:
            return (
                f"the image's bin/python is {real}, outside the image, and this node has no "
                "such interpreter"
            )
        return f"{python} cannot be run from the image mounted at {prefix}"
    if fingerprint.read(prefix) is None:
        return f"no install record in the image ({prefix}/.verl-bundle/fingerprint)"
    return None


def _environment(node: Node, prefix: str | None, deep: bool) -> Node:
    """`node` with the live fingerprint of the environment at `prefix` and what changed since
    its install (unchanged without an environment there)."""
    if not prefix:
        return node
    image = provided(prefix)
    if image != "directory":
        node = replace(node, image=image, image_problem=image_problem(prefix))
    if not fingerprint.site_dirs(prefix):
        return node
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
        unlisted=tuple(s.line() for s in unlisted.since_install(prefix, deep)),
    )


def probe_node(env: Mapping[str, str], prefix: str | None, deep: bool = False) -> Node:
    master = env.get("MASTER_ADDR") or None
    node = Node(
        hostname=socket.gethostname(),
        open_files=open_files_limit(),
        shm_bytes=_shm(),
        interfaces=_interfaces(),
        ifnames={k: env[k] for k in IFNAME_VARS if env.get(k)},
        master_addr=master,
        master_addr_resolves=resolves(master) if master else None,
        env=run_vars(env),
        ray_token=probe_ray_token(env),
    )
    return _environment(node, prefix, deep)
