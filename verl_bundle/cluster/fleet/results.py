"""Reading what the nodes wrote, trusting none of it: each NODE.json (a node's result from the
Slurm or Ansible install: its install exit code, the bundle it installed, its environment and
its doctor's JSON; or a plain `doctor --json`) and the run's .run.json. Every field is checked
for its type, long text is cut with a marker, huge or deeply nested files are refused before
they are walked; anything that does not fit is one FleetError line (exit 2), never a traceback.

A node's result, as the cluster scripts write it (schema 1):
  {"schema": 1, "command": "node", "result": {
     "node": NAME, "run": RUN, "engine": "slurm"|"ansible", "bundle": SHA256 of the installed
     bundle's SHA256SUMS or null, "prefix": PATH,
     "install": {"rc": INT, "skipped": BOOL, "log": TEXT, "error": TEXT or null (the step that
     failed before install.sh ran)}, "doctor_rc": INT or null (not run),
     "env": {VAR: VALUE}, "doctor_output": the doctor's --json output as text, or null}}
(or "doctor": that document itself). Output that is not a doctor's JSON is the node's failure.
The run's record: {"schema": 1, "command": "run", "result": {"run": RUN, "engine": ...,
  "expect": Slurm's hostlist or [NAME, ...], "bundle": SHA256 or null}}"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_bundle.airgap.doctor.node import shown_value
from verl_bundle.cluster.fleet import hostlist
from verl_bundle.errors import UsageError

MAX_BYTES = 4 << 20  # a doctor result is tens of KB
MAX_DEPTH = 16
MAX_ITEMS = 1000  # entries in one list or map
MAX_TEXT = 512
MAX_FILES = 100_000
CUT = "...[cut]"
RUN_FILE = ".run.json"


class FleetError(UsageError):
    """The gathered results cannot be read (no files, not a result, a bad field): one line."""


@dataclass(frozen=True)
class NodeResult:
    """One node's result: its name (the engine's, else the doctor's host name, else the file's
    stem), the file, the run and bundle it reports, its install and doctor exit codes, the
    doctor's verdict and checks, the `host` facts and the variables that change a run."""

    name: str
    source: str
    ok: bool | None  # the doctor's verdict; None: no doctor result
    checks: tuple[tuple[str, str], ...]
    host: dict[str, Any]
    run: str | None = None
    bundle: str | None = None
    install_rc: int | None = None  # None: a plain doctor result, no install record
    install_log: str | None = None
    install_error: str | None = None  # the step that failed before install.sh ran, as recorded
    doctor_rc: int | None = None
    env: dict[str, str] | None = None  # None: not recorded
    doctor_error: str | None = None  # why its doctor output is not a doctor's result
    engine: bool = True  # written by the slurm or ansible install; False: a plain doctor result

    @property
    def on_image(self) -> bool:
        """The node runs a read-only image its install made once (`install.sh --image`): the
        image holds that install's record."""
        return str(self.host.get("image") or "").startswith("squashfs image")


@dataclass(frozen=True)
class Run:
    run: str
    engine: str
    expect: tuple[str, ...]
    bundle: str | None


@dataclass(frozen=True)
class Gathered:
    run: Run | None
    nodes: tuple[NodeResult, ...]


def _kind(value: Any) -> str:
    kinds = {dict: "a map", list: "a list", str: "text", bool: "true/false", type(None): "null"}
    return kinds.get(type(value), "a number")


class Fields:
    """Typed reads from one file's JSON; an error names the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str, value: Any) -> FleetError:
        return FleetError(
            f"{self.source}: {where}: expected {what}, got {_kind(value)}; gather each node's "
            "result as the slurm or ansible install writes it (or its `doctor --json`)"
        )

    def text(self, value: Any, where: str, optional: bool = True, limit: int = MAX_TEXT) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.fail(where, "text", value)
        return value if len(value) <= limit else value[:limit] + CUT

    def integer(self, value: Any, where: str, optional: bool = True) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, "a whole number", value)
        return value

    def flag(self, value: Any, where: str) -> bool | None:
        if value is not None and not isinstance(value, bool):
            raise self.fail(where, "true or false", value)
        return value

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "a map", value)
        if len(value) > MAX_ITEMS:
            raise FleetError(f"{self.source}: {where}: over {MAX_ITEMS} entries")
        return value

    def texts(self, value: Any, where: str) -> list[str] | None:
        if value is None:
            return None
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise self.fail(where, f"a list of at most {MAX_ITEMS}", value)
        return [self.text(v, f"{where}[{i}]", optional=False) for i, v in enumerate(value)]

    def text_map(self, value: Any, where: str, limit: int = MAX_TEXT) -> dict[str, str] | None:
        if value is None:
            return None
        found = self.mapping(value, where)
        return {
            self.text(k, where, optional=False, limit=128): self.text(
                v, f"{where}.{k[:40]}", optional=False, limit=limit
            )
            for k, v in found.items()
        }


TEXT, INT, FLAG, TEXTS, MAP = "text", "int", "flag", "texts", "map"
HOST_FIELDS = {
    **dict.fromkeys(
        (
            *("hostname", "os", "kernel", "arch", "glibc", "python", "python_executable"),
            *("nvcc", "driver", "cuda_driver", "fingerprint", "master_addr"),
            "installed_fingerprint",
            "image",
        ),
        TEXT,
    ),
    **dict.fromkeys(("cpus", "mem_available", "gpus", "open_files", "shm_bytes"), INT),
    "master_addr_resolves": FLAG,
    **dict.fromkeys(("gpu_models", "changed_since_install"), TEXTS),
    **dict.fromkeys(("socket_ifnames", "missing_ifnames", "env", "distributions"), MAP),
}


def _host(f: Fields, value: Any) -> dict[str, Any]:
    """The doctor's `host`: known fields by their type; other plain values kept (cut), other
    lists and maps left out."""
    if value is None:
        return {}
    found = f.mapping(value, "result.host")
    readers: dict[str, Callable[[Any, str], Any]] = {
        TEXT: f.text,
        INT: f.integer,
        FLAG: f.flag,
        TEXTS: f.texts,
        MAP: f.text_map,
    }
    host: dict[str, Any] = {}
    for key, item in found.items():
        name = f.text(key, "result.host", optional=False, limit=64)
        kind = HOST_FIELDS.get(key)
        if kind is not None:
            host[name] = readers[kind](item, f"result.host.{key}")
        elif isinstance(item, str):
            host[name] = f.text(item, f"result.host.{key[:40]}")
        elif item is None or isinstance(item, (bool, int, float)):
            host[name] = item
    return host


def _doctor(
    f: Fields, doc: Any, where: str
) -> tuple[bool | None, tuple[tuple[str, str], ...], dict[str, Any]]:
    """(verdict, checks, host) of a doctor --json document (None: no doctor result)."""
    if doc is None:
        return None, (), {}
    envelope = f.mapping(doc, where)
    if envelope.get("command") != "doctor":
        raise FleetError(
            f"{f.source}: {where} is not a doctor result; gather each node's result as the "
            "slurm or ansible install writes it (or its `doctor --json`)"
        )
    result = f.mapping(envelope.get("result"), f"{where}.result")
    checks = result.get("checks") or []
    if not isinstance(checks, list) or len(checks) > MAX_ITEMS:
        raise f.fail(f"{where}.result.checks", f"a list of at most {MAX_ITEMS}", checks)
    pairs = []
    for i, check in enumerate(checks):
        c = f.mapping(check, f"{where}.result.checks[{i}]")
        pairs.append(
            (
                f.text(c.get("id"), f"checks[{i}].id", optional=False, limit=64),
                f.text(c.get("status"), f"checks[{i}].status", optional=False, limit=16),
            )
        )
    ok = f.flag(result.get("ok"), f"{where}.result.ok")
    return ok, tuple(pairs), _host(f, result.get("host"))


def _too_deep(value: Any, limit: int) -> bool:
    if limit < 0:
        return True
    if isinstance(value, dict):
        return any(_too_deep(v, limit - 1) for v in value.values())
    if isinstance(value, list):
        return any(_too_deep(v, limit - 1) for v in value)
    return False


def parse(text: str, name: str) -> Any:
    """JSON text, refused quickly when it is not, or is nested too deep, as one FleetError."""
    try:
        doc = json.loads(text)
    except RecursionError:
        deep = True
    except ValueError as exc:
        why = str(exc)[:120]
        raise FleetError(f"{name}: not readable JSON ({why}); gather `doctor --json`") from None
    else:
        deep = _too_deep(doc, MAX_DEPTH)
    if deep:
        raise FleetError(f"{name}: nested deeper than {MAX_DEPTH} levels: not a node's result")
    return doc


def read_json(path: Path) -> Any:
    """A small regular file's JSON, refused quickly when it is not one."""
    name = path.name
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise FleetError(f"{name}: not a regular file; gather each node's result as a file")
        if st.st_size > MAX_BYTES:
            raise FleetError(f"{name}: {st.st_size} bytes, over 4 MiB: not a node's result")
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise FleetError(f"{name}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_BYTES:
        raise FleetError(f"{name}: over 4 MiB: not a node's result")
    return parse(data.decode("utf-8", errors="replace"), name)


def read_node(path: Path) -> NodeResult:
    doc = read_json(path)
    f = Fields(path.name)
    envelope = f.mapping(doc, "the document")
    if envelope.get("command") == "doctor":
        # A plain doctor result is named by its file (results/$(hostname).json): host names
        # need not be unique (containers, one test machine), file names are.
        ok, checks, host = _doctor(f, envelope, "the document")
        name = _node_name(f, path.stem, "its file name")
        env = host["env"] if isinstance(host.get("env"), dict) else None
        return NodeResult(name, path.name, ok, checks, host, env=env, engine=False)
    if envelope.get("command") != "node":
        raise FleetError(
            f"{path.name}: not a node's result; gather each node's result as the slurm or "
            "ansible install writes it (or its `doctor --json`), one file per node"
        )
    r = f.mapping(envelope.get("result"), "result")
    install = f.mapping(r.get("install") or {}, "result.install")
    output = f.text(r.get("doctor_output"), "result.doctor_output", limit=MAX_BYTES)
    doctor_error = None
    if output is None:
        ok, checks, host = _doctor(f, r.get("doctor"), "result.doctor")
    else:
        try:
            where = "its doctor output"
            ok, checks, host = _doctor(Fields(where), parse(output, where), "the document")
        except FleetError as exc:
            ok, checks, host, doctor_error = None, (), {}, str(exc)
    env = f.text_map(r.get("env"), "result.env", limit=4096)
    if env is None and isinstance(host.get("env"), dict):
        env = host["env"]
    if env is not None:
        env = {k: shown_value(k, v) for k, v in env.items()}  # a secret never shown
    return NodeResult(
        _node_name(f, r.get("node"), "result.node"),
        path.name,
        ok,
        checks,
        host,
        run=f.text(r.get("run"), "result.run", limit=128),
        bundle=f.text(r.get("bundle"), "result.bundle", limit=128),
        install_rc=f.integer(install.get("rc"), "result.install.rc"),
        install_log=f.text(install.get("log"), "result.install.log"),
        install_error=f.text(install.get("error"), "result.install.error"),
        doctor_rc=f.integer(r.get("doctor_rc"), "result.doctor_rc"),
        env=env,
        doctor_error=doctor_error,
    )


def _node_name(f: Fields, value: Any, where: str) -> str:
    name = f.text(value, where, optional=False, limit=253)
    if not hostlist.NODE_NAME.fullmatch(name):
        raise FleetError(f"{f.source}: {where} {name[:80]!r} is not a node name")
    return str(name)


def read_run(path: Path) -> Run:
    f = Fields(path.name)
    envelope = f.mapping(read_json(path), "the document")
    if envelope.get("command") != "run":
        raise FleetError(
            f"{path.name}: not a run's record (written by the slurm or ansible install)"
        )
    r = f.mapping(envelope.get("result"), "result")
    expect = r.get("expect")
    if isinstance(expect, str):
        names = hostlist.expand(expect)
    else:
        names = [
            _node_name(f, n, "result.expect[]") for n in f.texts(expect, "result.expect") or []
        ]
    return Run(
        str(f.text(r.get("run"), "result.run", optional=False, limit=128)),
        str(f.text(r.get("engine"), "result.engine", optional=True, limit=32) or ""),
        tuple(names),
        f.text(r.get("bundle"), "result.bundle", limit=128),
    )


def load(directory: Path) -> Gathered:
    """Every NODE.json in `directory` (not dot files), and its .run.json if there is one; two
    files that report one node are refused (which is this run's cannot be told)."""
    if not directory.is_dir():
        raise FleetError(f"{directory}: no such directory of gathered results")
    paths = []
    for i, entry in enumerate(sorted(directory.iterdir())):
        if i > MAX_FILES:
            raise FleetError(f"{directory}: over {MAX_FILES} files: not a directory of results")
        if entry.name.endswith(".json") and not entry.name.startswith("."):
            paths.append(entry)
    run_file = directory / RUN_FILE
    run = read_run(run_file) if run_file.exists() else None
    if not paths and run is None:
        raise FleetError(f"{directory}: no *.json results in it (one per node)")
    nodes = [read_node(p) for p in paths]
    seen: dict[str, str] = {}
    for n in nodes:
        if n.name in seen:
            raise FleetError(
                f"{seen[n.name]} and {n.source} both report node {n.name}: remove the one that "
                "is not this run's (or gather each run into its own directory)"
            )
        seen[n.name] = n.source
    return Gathered(run, tuple(nodes))
