"""The trainer dry run: start verl's own PPO entry in the installed environment, offline, on a
tiny model and dataset, and see how far it gets.

Readiness's probe proves that the trainer's modules import and its config composes; this goes
on: dryrun_entry.py (run by the environment's python, in its own process group, under a
deadline) makes a tiny random model, a tokenizer with a chat template and a parquet in verl's
RL format (or takes the user's own: `--model DIR --data FILE`, or the asset bundle installed
for this environment), composes verl's real config with overrides pointing at them and calls
verl's entry (dryrun.json: per verl release, the entry, the overrides, the sites that mark each
step, the GPU boundary and known failures). Every process of the run writes JSON-line events
(dryrun_hooks.py, installed as sitecustomize); dryrun_report.py turns them into `Check`s. On a
host without a GPU verl's trainer stops at its own GPU-count check (the GPU boundary, recognised
at that function, not by its words); the entry then builds verl's workers from what the trainer
had decided and runs their init_model up to the first GPU-only call (dryrun_workers.py).
Where a GPU is visible it goes on to one PPO step. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from verl_bundle.airgap import render
from verl_bundle.airgap.errors import UsageError
from verl_bundle.airgap.postinstall.readiness import (
    OFFLINE_ENV,
    ReadinessError,
    in_range,
    release_of,
)

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "dryrun.json")
# The entry and its hooks run in the target environment's python (airgap/inside/).
INSIDE = os.path.join(os.path.dirname(HERE), "inside")
ENTRY, HOOKS, SITES = "dryrun_entry.py", "dryrun_hooks.py", "sites.py"
WORKERS = "dryrun_workers.py"
DEADLINE = 900.0
EVENTS_VAR, SITES_VAR = "VERL_BUNDLE_DRYRUN_EVENTS", "VERL_BUNDLE_DRYRUN_SITES"
BOUNDARY_VAR = "VERL_BUNDLE_DRYRUN_BOUNDARY"


@dataclass(frozen=True)
class DryRunRequest:
    """What to run: the user's own model and data (None: made here, or the asset bundle's),
    the deadline in seconds, the GPUs the trainer asks for (0: none visible, so the run is
    expected to stop at the GPU boundary) and extra verl overrides."""

    model: str | None = None
    data: str | None = None
    deadline: float = DEADLINE
    gpus: int = 0
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class DryRun:
    """What happened: the events every process wrote, in time order; whether the deadline
    stopped it; the exit code (None when killed); the seconds; the wrapper's last lines."""

    verl: str
    events: tuple[dict[str, Any], ...]
    timed_out: bool
    code: int | None
    seconds: float
    gpus: int
    cpus: int | None
    tail: tuple[str, ...] = ()
    memory_mib: int | None = None  # the most GPU memory in use while it ran (nvidia-smi)
    left: tuple[int, ...] = field(default_factory=tuple)  # processes that had to be killed
    # The recipe's entry points this verl lacks (a fork, or a later release, whose entry moved):
    # then nothing ran. `recipe`: the release the recipe is for ("0.9").
    moved: tuple[str, ...] = ()
    recipe: str = ""


def load_table(path: str = TABLE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        table: dict[str, Any] = json.load(fh)
    return table


def row_for(verl: str | None, table: dict[str, Any]) -> dict[str, Any] | None:
    """The dry-run recipe for this verl release (a fork keeps its release's version); a version
    past every row (verl main's 0.10.0.dev0) takes the newest one, marked `assumed`: it runs
    only where all its entry points are found; None when there is none (verl 0.2)."""
    row = next((r for r in table["verl"] if verl and in_range(verl, r)), None)
    if row is None and verl:
        newest = max(table["verl"], key=lambda r: release_of(str(r["from"])))
        if release_of(verl) >= release_of(str(newest["from"])):
            return dict(newest, assumed=True)
    return row


def entry_site(row: dict[str, Any]) -> str:
    return f"verl.trainer.main_ppo:{str(row['entry']).split('.')[0]}"


def moved_sites(python: str, row: dict[str, Any]) -> list[str]:
    """The recipe's entry points (its entry, then the sites that mark its steps) that the
    installed verl surely lacks; airgap/inside/sites.py reads the sources, nothing is imported.
    A probe that cannot run says nothing. What stops the run: the entry missing, or, for a
    recipe assumed for a later version, any of them (`stops`)."""
    sites = [entry_site(row), *(s for group in row["sites"].values() for s in group)]
    try:
        run = subprocess.run(
            [python, "-E", "-s", "-B", os.path.join(INSIDE, SITES)],
            input=json.dumps(sites),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        found = json.loads(run.stdout).get("missing", []) if run.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    return [str(s) for s in found]


def stops(row: dict[str, Any], moved: Sequence[str]) -> bool:
    """A known release's fork whose step sites moved still runs (those steps are not
    marked, as the report says); its entry moved, or a recipe assumed for a later version
    that does not fit, is not run."""
    return entry_site(row) in moved or (bool(row.get("assumed")) and bool(moved))


def verl_of(manifest: Any) -> str | None:
    """The bundle's verl release (None when it carries no verl)."""
    return next((f.version for f in manifest.installed if f.name == "verl"), None)


def has_recipe(manifest: Any) -> bool:
    """The bundle's verl has a trainer dry run (dryrun.json: verl 0.3 and later)."""
    return row_for(verl_of(manifest), load_table()) is not None


def installed_assets(python: str) -> tuple[str, str] | None:
    """(model dir, train file) of the asset bundle placed for the environment of `python`
    (assets install --prefix, its index); None when there is none, or it has no model and
    dataset."""
    from verl_bundle.airgap.assets.place import INDEX, load_record
    from verl_bundle.airgap.contract.manifest import ManifestError

    prefix = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    try:
        with open(os.path.join(prefix, INDEX), encoding="utf-8") as fh:
            index = json.load(fh)
        model = next(str(r["path"]) for r in index if r.get("kind") == "model")
        data_dir = next(str(r["path"]) for r in index if r.get("kind") == "dataset")
        name = load_record(data_dir).split("train")
    except (OSError, ValueError, KeyError, StopIteration, ManifestError):
        return None
    return (model, os.path.join(data_dir, name)) if name else None


def check_request(req: DryRunRequest) -> None:
    """Bad input is one line (a usage error), before anything starts."""
    if (req.model is None) != (req.data is None):
        raise UsageError("--model and --data go together (your model and its data)")
    if req.model is not None and not os.path.isfile(os.path.join(req.model, "config.json")):
        raise UsageError(f"--model {req.model}: no config.json there (a model dir)")
    if req.data is not None and not os.path.isfile(req.data):
        raise UsageError(f"--data {req.data}: no such file (a parquet in verl's format)")
    if req.deadline <= 0:
        raise UsageError("--deadline must be above 0 seconds")
    bad = [o for o in req.overrides if "=" not in o]
    if bad:
        raise UsageError(f"--override {bad[0]!r}: give KEY=VALUE (verl's own keys)")


def _cpus(row: dict[str, Any]) -> int:
    """Ray's CPUs: at least what the release's actors ask for at start (verl 0.9's
    transfer_queue alone asks for 8), whatever the host has, so the run cannot deadlock."""
    return max(os.cpu_count() or 1, int(row.get("min_ray_cpus", 1)))


def _cpus_key(row: dict[str, Any], verl: str) -> str | None:
    """verl's config key for Ray's CPU count, where this release has one."""
    given = row.get("ray_cpus") or {}
    if not given or release_of(verl) < release_of(str(given.get("from", "0"))):
        return None
    return str(given["key"])


def _attention(row: dict[str, Any], overrides: Sequence[str]) -> str:
    """The attention verl's workers load the model with: the release's own (dryrun.json), or
    the value of an override of its config key where it has one."""
    key = row.get("attn_key")
    for o in overrides:
        name, _, value = o.lstrip("+").partition("=")
        if key and name.endswith(str(key)):
            return value
    return str(row.get("attn_implementation") or "eager")


def _workers(row: dict[str, Any], verl: str) -> dict[str, Any]:
    """The release's worker recipe (dryrun.json `workers`) for the entry, where it covers this
    verl (its own from/below: measured releases only); {} where it does not."""
    recipe = dict(row.get("workers") or {})
    if recipe.get("from") and not in_range(verl, recipe):
        return {}
    return {k: v for k, v in recipe.items() if not k.endswith("evidence")}


def _private_dir() -> str:
    """A short private directory: Ray's unix socket paths must stay under 108 bytes."""
    short = "/tmp"  # noqa: S108 - a private mkdtemp below it (mode 0700), for the short path
    base = short if os.path.isdir(short) and os.access(short, os.W_OK) else None
    return tempfile.mkdtemp(prefix="vbr-", dir=base)


def _environment(
    work: str, events: str, row: dict[str, Any], base: dict[str, str]
) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in ("RAY_ADDRESS", "PYTHONHOME")}
    env.update(OFFLINE_ENV)
    # verl's own GPU-count check, watched where it raises; what the trainer had decided there
    # is saved to `capture` for the worker steps after it.
    boundary = dict(row.get("boundary") or {}, capture=os.path.join(work, "boundary.json"))
    boundary.pop("evidence", None)
    env.update(
        {
            EVENTS_VAR: events,
            SITES_VAR: json.dumps(row["sites"]),
            BOUNDARY_VAR: json.dumps(boundary),
            # The run's own Ray session directory: a stale /tmp/ray/ray_current_cluster from a
            # killed Ray elsewhere can neither hang it nor be touched by it.
            "RAY_TMPDIR": os.path.join(work, "ray"),
            # Temporary files of every process (torch.distributed makes a directory at import,
            # left behind when the run's workers are killed) go with the run's own directory.
            "TMPDIR": os.path.join(work, "tmp"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "HYDRA_FULL_ERROR": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HOME": work,  # caches and ~/.cache writes stay in the throwaway directory
            "HF_HOME": os.path.join(work, "hf"),
            "PYTHONPATH": os.path.join(work, "hooks"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


def _marked(marker: str) -> list[int]:
    """Every process (of this user) whose environment holds `marker`: the run's processes,
    Ray's daemons and workers included, even those re-parented after their parent died."""
    out = []
    needle = marker.encode()
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read():
                    out.append(int(name))
        except OSError:
            continue
    return out


def _kill_all(proc: subprocess.Popen[bytes], marker: str) -> tuple[int, ...]:
    """The wrapper's process group, then every process still carrying the run's marker."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    left: list[int] = []
    for _ in range(20):  # Ray's daemons may start a worker while we kill: until none is left
        found = _marked(marker)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            left.append(pid)
        time.sleep(0.1)
    return tuple(dict.fromkeys(left))


class _MemoryWatch:
    """The most GPU memory in use while the run goes on (nvidia-smi every 2 s); None without
    nvidia-smi or a GPU."""

    def __init__(self, gpus: int) -> None:
        self.most: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        if gpus > 0 and shutil.which("nvidia-smi"):
            self._thread.start()

    def _watch(self) -> None:
        cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        while not self._stop.wait(2.0):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
                used = sum(int(x) for x in out.split() if x.strip().isdigit())
            except (OSError, subprocess.SubprocessError, ValueError):
                return
            self.most = max(self.most or 0, used)

    def stop(self) -> int | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        return self.most


def read_events(path: str) -> tuple[dict[str, Any], ...]:
    """The events every process wrote, in time order; a torn last line (a killed writer) is
    left out."""
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if isinstance(doc, dict) and isinstance(doc.get("step"), str):
                    out.append(doc)
    except OSError:
        return ()
    return tuple(sorted(out, key=lambda d: float(d.get("t", 0.0))))


def run_dry(
    python: str,
    verl: str,
    request: DryRunRequest,
    table: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> DryRun | None:
    """Run verl's entry once, under the deadline, and collect its events; None when this verl
    release has no recipe (dryrun.json). Nothing is left running afterwards, and the private
    directory (model, data, Ray's session) is removed."""
    table = table or load_table()
    row = row_for(verl, table)
    if row is None:
        return None
    check_request(request)
    moved = moved_sites(python, row)
    if stops(row, moved):
        gpus = max(request.gpus, 1)
        return DryRun(
            verl, (), False, None, 0.0, gpus, None, moved=tuple(moved), recipe=row["from"]
        )
    model, data = request.model, request.data
    if model is None:
        found = installed_assets(python)
        if found is not None:
            model, data = found
    work = _private_dir()
    try:
        hooks = os.path.join(work, "hooks")
        os.makedirs(hooks)
        os.makedirs(os.path.join(work, "tmp"))
        for name in (ENTRY, HOOKS, WORKERS):
            shutil.copyfile(os.path.join(INSIDE, name), os.path.join(hooks, name))
        with open(os.path.join(hooks, "sitecustomize.py"), "w", encoding="utf-8") as fh:
            fh.write("import dryrun_hooks  # noqa: F401 - marks the trainer's steps\n")
        events = os.path.join(work, "events.jsonl")
        key = _cpus_key(row, verl)
        cpus = _cpus(row) if key else None
        spec = {
            "events": events,
            "work": work,
            "model": model,
            "data": data,
            "entry": row["entry"],
            "config": row["config"],
            "overrides": row["overrides"],
            "ray_cpus_key": key,
            "cpus": cpus,
            "gpus": max(request.gpus, 1),
            "nodes": 1,
            "extra": list(request.overrides),
            # Where verl stops at the GPU boundary, the entry builds the model as verl's
            # workers would, with verl's attention (or the override that sets it), then verl's
            # workers themselves from what the trainer had decided (the capture).
            "attn": _attention(row, request.overrides),
            "capture": os.path.join(work, "boundary.json"),
            "workers": _workers(row, verl),
        }
        spec_path = os.path.join(work, "spec.json")
        with open(spec_path, "w", encoding="utf-8") as fh:
            json.dump(spec, fh)
        env = _environment(work, events, row, dict(os.environ if environ is None else environ))
        return _supervise(python, work, spec_path, events, env, request, verl, cpus)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _supervise(
    python: str,
    work: str,
    spec_path: str,
    events: str,
    env: dict[str, str],
    request: DryRunRequest,
    verl: str,
    cpus: int | None,
) -> DryRun:
    log = os.path.join(work, "run.log")
    watch = _MemoryWatch(request.gpus)
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                [python, "-B", os.path.join(work, "hooks", ENTRY), spec_path],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=work,
                start_new_session=True,  # its own process group, killed whole on the deadline
            )
        except OSError as exc:
            watch.stop()
            raise ReadinessError(f"cannot run {python}: {exc.strerror or exc}") from None
        try:
            timed_out = _wait(proc, events, started + request.deadline)
        except BaseException:
            _kill_all(proc, events)
            raise
        code = None if timed_out else proc.returncode
        left = _kill_all(proc, events)  # Ray's daemons outlive a driver that exits: never
    seconds = time.monotonic() - started
    with open(log, encoding="utf-8", errors="replace") as fh:
        tail = tuple(ln.rstrip() for ln in fh.readlines()[-12:])
    return DryRun(
        verl,
        read_events(events),
        timed_out,
        code,
        seconds,
        request.gpus,
        cpus,
        tail,
        watch.stop(),
        left,
    )


def _wait(proc: subprocess.Popen[bytes], events: str, deadline: float) -> bool:
    """Wait for the run until the deadline (True: it passed), saying each step as it starts
    and ends on stderr (the run takes minutes; install.sh shows post-install's output)."""
    said: set[tuple[str, ...]] = set()
    while True:
        try:
            proc.wait(timeout=1.0)
            _say_progress(events, said)
            return False
        except subprocess.TimeoutExpired:
            _say_progress(events, said)
        if time.monotonic() >= deadline:
            return True


# What each worker event says in the progress lines.
_SAID = {"stopped": "stopped at a GPU-only call", "error": "failed", "end": "done"}


def _say_progress(events: str, said: set[tuple[str, ...]]) -> None:
    for e in read_events(events):
        step, what = str(e.get("step")), str(e.get("event"))
        key = (step, what, str(e.get("role") or e.get("module") or ""))
        if key in said or what not in ("start", "done", "end", "error", "stopped", "boundary"):
            continue
        if step in ("entry", "run") or (what == "start" and e.get("role")):
            continue
        if e.get("module") and what == "done":
            continue  # one line per module imported would drown the rest
        said.add(key)
        secs = e.get("seconds")
        took = f" ({secs:.1f} s)" if what == "done" and isinstance(secs, (int, float)) else ""
        if what == "boundary":
            line = f"{step} reached the GPU boundary ({e.get('site', '?')})"
        elif what == "error" and e.get("boundary"):
            continue  # verl's GPU refusal passing through: said once, at its site
        elif e.get("role") or e.get("module"):
            line = f"{step} {e.get('role') or e['module']}: {_SAID.get(what, what)}{took}"
        else:
            line = f"{step} {_SAID.get(what, what)}{took}"
        render.say(f"    dry run: {line}", sys.stderr)


def dry_run_request(
    model: str | None,
    data: str | None,
    deadline: float,
    gpus: int,
    overrides: Sequence[str] = (),
) -> DryRunRequest:
    req = DryRunRequest(model, data, deadline, gpus, tuple(overrides))
    check_request(req)
    return req
