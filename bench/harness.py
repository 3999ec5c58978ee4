"""Running contenders side by side and reporting medians, ratios and targets.

Every benchmark measures two or more contenders the same number of times (5 by default),
interleaved (ABBA order: sample i of every contender is taken next to sample i of the others,
so each ratio is a median over adjacent pairs, and a slow drift of the machine favours no
side), and reports every sample raw, wall and CPU seconds (getrusage of the children), the load
average before and after each, and the ratios it promises: the median of the paired ratios and
their range, in wall and in CPU seconds, as a small table or as JSON. `--hogs` measures every
contender a second time with two CPU hogs (`yes >/dev/null`) running, started and killed here;
`drop_page_cache` gives a contender a cold page cache for the files it reads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bench.synthetic import DEFAULT_CACHE, PYTHON, ROOT

BIN = Path(sys.executable).parent
# The cores the commands of the contender being measured are held to (taskset), if any.
_PINNED: ContextVar[str | None] = ContextVar("pinned", default=None)


class BenchError(Exception):
    """A contender failed (not slow: failed); the message names the command and its log."""


def revision() -> str:
    """The code measured: the commit, and the files changed since (others edit as we run)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "verl_bundle", "templates"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    dirty = sorted(line[3:] for line in changed if line.strip())
    return head + (f" + uncommitted {', '.join(dirty)}" if dirty else "")


@dataclass(frozen=True)
class Options:
    runs: int
    size: int
    json: bool
    cache: Path
    python: str  # the interpreter of the target Python (PYTHON), a real path
    keep: bool
    before: Path | None = None  # a checkout of older code, for a side-by-side "before" row
    hogs: bool = False  # every contender also measured with two CPU hogs running


@dataclass(frozen=True)
class Measured:
    name: str
    command: str
    unit: str  # "s" or "MB"
    samples: tuple[float, ...]
    # CPU seconds (user + system) of the commands each sample ran: on a machine shared with
    # other work, wall times stretch with the load, CPU times much less.
    cpu: tuple[float, ...] = ()
    # The 1-minute load average just before and just after each sample: how busy the machine
    # was while it ran (other people's work included), so a figure is read with its load.
    loads: tuple[tuple[float, float], ...] = ()

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    @property
    def load(self) -> str:
        """The load averages around the samples: 'before -> after', each as its range."""
        if not self.loads:
            return "-"
        return f"{_range([b for b, _ in self.loads])} -> {_range([a for _, a in self.loads])}"


def _range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"


def load_average() -> float:
    """The 1-minute load average (runnable and waiting processes, everyone's)."""
    return os.getloadavg()[0]


@dataclass(frozen=True)
class Comparison:
    """A promise: `value` (a ratio, or an absolute amount) at most `limit`; with no limit, a
    figure shown for information (the ratio to the familiar, weaker baseline)."""

    label: str
    value: float  # a ratio: the median of the paired ratios (sample i over sample i)
    unit: str  # "x" for ratios
    limit: float | None
    # A ratio's range over the runs: sample i of one side over sample i of the other (the
    # two ran next to each other in ABBA order, so under about the same load).
    low: float | None = None
    high: float | None = None
    # The same ratio in CPU seconds (user + system of each side's processes), where both sides
    # have them: a busy machine stretches wall times far more than CPU times.
    cpu: float | None = None
    cpu_low: float | None = None
    cpu_high: float | None = None
    # The limit holds for the CPU ratio too (False: a wall-time target, CPU shown beside it).
    judge_cpu: bool = True

    @property
    def cpu_passed(self) -> bool:
        return (
            not self.judge_cpu or self.cpu is None or self.limit is None or self.cpu <= self.limit
        )

    @property
    def passed(self) -> bool:
        """Within the limit in wall time and, where judged, in CPU time."""
        if self.limit is None:
            return True
        return self.value <= self.limit and self.cpu_passed

    @property
    def spread(self) -> str:
        if self.low is None or self.high is None:
            return "-"
        return f"{num(self.low, self.unit).rstrip('x')}-{num(self.high, self.unit)}"

    @property
    def cpu_spread(self) -> str:
        if self.cpu is None or self.cpu_low is None or self.cpu_high is None:
            return "-"
        return f"{self.cpu:.2f}x ({self.cpu_low:.2f}-{self.cpu_high:.2f}x)"


@dataclass(frozen=True)
class Report:
    bench: str
    title: str
    setup: str
    runs: int
    measured: tuple[Measured, ...]
    comparisons: tuple[Comparison, ...]
    notes: tuple[str, ...] = ()
    revision: str = field(default_factory=revision)

    def get(self, name: str) -> Measured:
        return next(m for m in self.measured if m.name == name)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)


# -- options ------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """'1G', '500M', '1.5G' (decimal units, as disks count) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)B?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size such as 1G or 500M")
    scale = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def find_target_python() -> str:
    """The real pythonX.Y (not a pyenv shim, whose start-up would be timed with it)."""
    name = f"python{PYTHON}"
    candidates = [shutil.which(name) or name]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # A pyenv shim answers only where that version is selected; the interpreter itself always.
    candidates += [str(p) for p in sorted(pyenv.glob(f"versions/{PYTHON}.*/bin/{name}"))]
    for exe in candidates:
        try:
            out = subprocess.run(
                [exe, "-c", "import sys; print(sys.executable)"],
                capture_output=True,
                text=True,
                check=True,
                env=clean_env(),
            )
        except (OSError, subprocess.CalledProcessError):
            continue
        return out.stdout.strip()
    raise BenchError(f"no working {name} (tried {', '.join(candidates)}); pass --python PATH")


def parser(description: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--runs", type=int, default=5, help="timed runs of each contender (default 5: 5 pairs)"
    )
    p.add_argument(
        "--size",
        type=parse_size,
        default=parse_size("1G"),
        help="bytes of synthetic wheels, e.g. 1G (default), 500M",
    )
    p.add_argument("--json", action="store_true", help="print a JSON document, not a table")
    p.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"where the synthetic wheels are kept between runs (default {DEFAULT_CACHE})",
    )
    p.add_argument("--python", default=None, help=f"the Python {PYTHON} to install with")
    p.add_argument("--keep", action="store_true", help="keep the work directory (for a look)")
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run the build with the verl_bundle package found in DIR (older code, e.g. "
        "`git archive COMMIT verl_bundle profiles templates | tar x -C DIR`), side by side "
        "(cold_build, verify, warm_rebuild)",
    )
    p.add_argument(
        "--hogs",
        action="store_true",
        help="also measure every contender with two CPU hogs (`yes >/dev/null`) running",
    )
    return p


def installed_bytecode() -> None:
    """Compile the bytecode of verl_bundle and of the venv it runs from (typer, jinja2,
    requests, packaging ...), as `pip install` does for an installed tool. Without it (this
    checkout; a venv uv made without --compile-bytecode; PYTHONDONTWRITEBYTECODE=1 in the
    shell) every timed run would compile a few hundred modules from source, CPU no user pays."""
    import compileall
    import sysconfig

    import verl_bundle

    for where in (Path(verl_bundle.__file__).parent, Path(sysconfig.get_paths()["purelib"])):
        compileall.compile_dir(where, quiet=2, workers=0)


def options(args: argparse.Namespace) -> Options:
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    installed_bytecode()
    return Options(
        args.runs,
        args.size,
        args.json,
        args.cache,
        args.python or find_target_python(),
        args.keep,
        args.before.resolve() if args.before else None,
        args.hogs,
    )


# -- running ------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without pip/uv settings or proxies; pip reads no configuration file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_"))
        and k.lower() not in ("https_proxy", "http_proxy", "all_proxy", "no_proxy")
        and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    env.update(extra)
    return env


def show(cmd: Sequence[str], env: dict[str, str] | None = None) -> str:
    """A command as a person would type it, with the environment it was given beyond ours."""
    words = [shlex.quote(str(c)) for c in cmd]
    if env:
        base = clean_env()
        words = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if base.get(k) != v] + (
            words
        )
    return " ".join(words)


def pin(cmd: Sequence[str]) -> list[str]:
    """`cmd` held to the cores of the contender being measured (taskset), if it is pinned."""
    cores = _PINNED.get()
    return [str(c) for c in cmd] if cores is None else ["taskset", "-c", cores, *map(str, cmd)]


def run(
    cmd: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    allowed: tuple[int, ...] = (0,),
) -> float:
    """Run a command to completion, its output into `log`; its wall time in seconds. An exit
    status not `allowed` is a failure (a doctor on a machine with no GPU exits 1)."""
    cmd = pin(cmd)
    with log.open("ab") as out:
        out.write(f"$ {show(cmd)}\n".encode())
        out.flush()
        start = time.perf_counter()
        proc = subprocess.run(
            [str(c) for c in cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env if env is not None else clean_env(),
            cwd=cwd,
            check=False,
        )
        elapsed = time.perf_counter() - start
    if proc.returncode not in allowed:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise BenchError(
            f"{show(cmd)} exited {proc.returncode}; last lines of {log}:\n  " + "\n  ".join(tail)
        )
    return elapsed


@dataclass
class Contender:
    """One side of a comparison: `measure` does one run and returns its number; `prepare`
    (untimed) runs before each, `cleanup` (untimed) after."""

    name: str
    command: str
    measure: Callable[[], float]
    prepare: Callable[[], object] = lambda: None
    cleanup: Callable[[], object] = lambda: None
    unit: str = "s"
    samples: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    loads: list[tuple[float, float]] = field(default_factory=list)


def older(
    cmd: Sequence[str], env: dict[str, str], before: Path
) -> tuple[list[str], dict[str, str]]:
    """`cmd` (ours, as `verl_bundle()` starts it) with the older code in `before` first on the
    path: the module, not the script; run it from a directory that holds no verl_bundle (`-m`
    puts the current one first on the path)."""
    return [sys.executable, "-m", "verl_bundle", *cmd[len(verl_bundle()) :]], dict(
        env, PYTHONPATH=str(before)
    )


def warm_up(
    contenders: list[Contender], prepare: Callable[[], object], cleanup: Callable[[], object]
) -> None:
    """Each contender with `prepare` before each run and `cleanup` after (a fresh output
    directory, say), run once now, untimed, so that the page cache holds its inputs for every
    one alike."""
    for c in contenders:
        c.prepare, c.cleanup = prepare, cleanup
        c.prepare()
        c.measure()
        c.cleanup()


def paired_core() -> str | None:
    """The one core both sides of a paired row run on: the last this process may use (the
    first is where interrupts and most other work land). None without taskset or with one
    core (then pairing changes nothing)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2 or shutil.which("taskset") is None:
        return None
    return str(cores[-1])


def pinned(c: Contender, core: str) -> Contender:
    """A twin of `c` whose timed commands all run on `core` (taskset -c): for rows whose two
    sides use different resources (threads on every core against one process), so that each
    side gets the same core and a busy machine takes from both alike."""

    def measure() -> float:
        token = _PINNED.set(core)
        try:
            return c.measure()
        finally:
            _PINNED.reset(token)

    return Contender(
        f"{c.name} [core {core}]",
        f"taskset -c {core} {c.command}",
        measure,
        c.prepare,
        c.cleanup,
        c.unit,
    )


def paired(contenders: list[Contender], *names: str) -> list[Contender]:
    """The pinned twins of the named contenders (none where pairing changes nothing)."""
    core = paired_core()
    if core is None:
        return []
    return [pinned(c, core) for c in contenders if c.name in names]


HOGS = 2  # CPU hogs beside a hogged contender: a busy 2-core machine's other work


def hogged(c: Contender, hogs: int = HOGS) -> Contender:
    """A twin of `c` measured while `hogs` CPU hogs (`yes >/dev/null`) run, started after its
    preparation and killed before its cleanup; their CPU is not counted as the contender's."""
    running: list[subprocess.Popen[bytes]] = []

    def prepare() -> None:
        c.prepare()
        running.extend(
            subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            for _ in range(hogs)
        )

    def cleanup() -> None:
        while running:
            proc = running.pop()
            proc.kill()
            proc.wait()
        c.cleanup()

    return Contender(
        f"{c.name} [{hogs} hogs]",
        f"{c.command}  # with {hogs} x `yes >/dev/null` running",
        c.measure,
        prepare,
        cleanup,
        c.unit,
    )


def with_hogs(contenders: list[Contender], opts: Options) -> list[Contender]:
    """The contenders, and with --hogs each one's hogged twin after them."""
    return contenders + ([hogged(c) for c in contenders] if opts.hogs else [])


def drop_page_cache(*paths: Path) -> None:
    """Give the next reader of these files (each file under a directory) a cold page cache:
    written back first (os.sync), then dropped with posix_fadvise(POSIX_FADV_DONTNEED), which
    needs no root and leaves the rest of the machine's cache alone."""
    os.sync()
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def cold(c: Contender, *paths: Path) -> Contender:
    """A twin of `c` that finds `paths` out of the page cache (see drop_page_cache)."""

    def prepare() -> None:
        c.prepare()
        drop_page_cache(*paths)

    return Contender(
        f"{c.name} (cold cache)",
        f"{c.command}  # page cache dropped first",
        c.measure,
        prepare,
        c.cleanup,
        c.unit,
    )


def _children_cpu() -> float:
    """CPU seconds of every child process waited for so far (getrusage: user + system)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def interleave(contenders: list[Contender], runs: int, progress: TextIO | None) -> None:
    """Run every contender `runs` times, in ABBA order."""
    for i in range(runs):
        order = contenders if i % 2 == 0 else list(reversed(contenders))
        for c in order:
            c.prepare()
            # Write back what the previous run left dirty, so that no run pays for another's
            # writes (a build writes its cache and its tarball: 2 GB for a 1 GB stack).
            os.sync()
            before, load = _children_cpu(), load_average()
            try:
                value = c.measure()
            except BaseException:
                with suppress(Exception):  # the failure to report is the measure's
                    c.cleanup()
                raise
            # CPU read before the cleanup: what it waits for (the hogs) is not the contender's.
            c.cpu.append(_children_cpu() - before)
            c.loads.append((load, load_average()))
            c.cleanup()
            c.samples.append(value)
            if progress is not None:
                print(
                    f"  run {i + 1}/{runs}  {c.name:<34} {value:8.2f} {c.unit}  "
                    f"cpu {c.cpu[-1]:.2f} s  (load {load:.1f} -> {c.loads[-1][1]:.1f})",
                    file=progress,
                )


def measured(contenders: list[Contender]) -> tuple[Measured, ...]:
    return tuple(
        Measured(c.name, c.command, c.unit, tuple(c.samples), tuple(c.cpu), tuple(c.loads))
        for c in contenders
    )


def _paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True) if y > 0]


def ratio(
    label: str, a: Measured, b: Measured, limit: float | None, judge_cpu: bool = True
) -> Comparison:
    """a/b as the median of the paired ratios (sample i of each ran next to the other's), in
    wall time and, where both sides have them in seconds, in CPU time (held to `limit` too
    unless `judge_cpu` is False)."""
    wall = _paired(a.samples, b.samples) or [a.median / b.median]
    both_cpu = a.unit == b.unit == "s" and len(a.cpu) == len(b.cpu) == len(a.samples)
    cpu = _paired(a.cpu, b.cpu) if both_cpu else []
    return Comparison(
        label,
        statistics.median(wall),
        "x",
        limit,
        min(wall),
        max(wall),
        statistics.median(cpu) if cpu else None,
        min(cpu, default=None),
        max(cpu, default=None),
        judge_cpu,
    )


def paired_ratios(label: str, twins: Sequence[Measured]) -> list[Comparison]:
    """The ratio of the first pinned twin to the second (both on one core), when the row was
    paired (info: the target is judged on the unpinned row)."""
    if len(twins) < 2:
        return []
    core = twins[0].name.rsplit("[", 1)[-1].rstrip("]")
    return [ratio(f"{label}, both on {core}", twins[0], twins[1], None)]


Row = tuple[str, str, str, float | None]  # (label, contender, baseline, limit), by name


def ratios(results: Sequence[Measured], rows: Sequence[Row]) -> list[Comparison]:
    """`ratio` of each (label, contender, baseline, limit) row whose both sides ran."""
    by = {m.name: m for m in results}
    return [ratio(label, by[a], by[b], limit) for label, a, b, limit in rows if a in by and b in by]


def side_rows(
    word: str, base_word: str, ours: str, base: str, old: str | None, limit: float | None
) -> list[Row]:
    """The rows a side-by-side bench adds to its own, by contender name: ours/base with the
    files out of the page cache (`cold`), older code (`old`: the --before contender) against
    the base and ours, warm and cold, and ours/base beside CPU hogs (`hogged`). `ratios` leaves
    out the rows whose contenders did not run."""
    rows: list[Row] = [
        (
            f"ratio {word}/{base_word}, cold cache",
            f"{ours} (cold cache)",
            f"{base} (cold cache)",
            limit,
        )
    ]
    if old is not None:
        rows += [
            (f"ratio {word} before/{base_word}", old, base, None),
            (f"ratio {word}/{word} before", ours, old, None),
            (
                f"ratio {word} before/{base_word}, cold cache",
                f"{old} (cold cache)",
                f"{base} (cold cache)",
                None,
            ),
        ]
    hogs = f"[{HOGS} hogs]"
    rows.append(
        (f"ratio {word}/{base_word}, {HOGS} hogs", f"{ours} {hogs}", f"{base} {hogs}", limit)
    )
    return rows


def spread(m: Measured) -> str:
    """The range of a contender's samples, e.g. '1.02-1.31 s'."""
    lo, hi = min(m.samples), max(m.samples)
    return f"{num(lo, m.unit).split()[0]}-{num(hi, m.unit)}"


@contextmanager
def workdir(bench: str, keep: bool, progress: TextIO | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"verl-bundle-bench-{bench}-"))
    try:
        yield path
    finally:
        if keep:
            if progress is not None:
                print(f"  kept {path}", file=progress)
        else:
            shutil.rmtree(path, ignore_errors=True)


def fresh(path: Path) -> Path:
    """An empty directory at `path` (removed first if there)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def remove(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def verl_bundle() -> list[str]:
    exe = BIN / "verl-bundle"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "verl_bundle"]


# -- rendering ----------------------------------------------------------------------------


def num(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit == "ms":
        return f"{value:.0f} ms"
    return f"{value:.2f} s"


def verdict(c: Comparison, long: bool = True) -> str:
    if c.limit is None:
        return "info"
    if c.passed:
        return "PASS"
    wall_over = c.value > c.limit
    value = c.value if wall_over or c.cpu is None else c.cpu
    over = f"{'' if wall_over else 'CPU '}{(value / c.limit - 1) * 100:+.0f}%"
    return f"MISS ({over} over the limit)" if long else f"MISS ({over})"


def target(c: Comparison) -> str:
    return "(info)" if c.limit is None else f"<= {num(c.limit, c.unit)}"


def render_text(report: Report) -> str:
    lines = [
        f"== {report.title}",
        f"   {report.setup}",
        f"   code: {report.revision}",
        f"   {report.runs} run(s) each, ABBA",
    ]
    lines.append("   commands:")
    for m in report.measured:
        lines.append(f"     [{m.name}] {m.command}")
    width = max(len(m.name) for m in report.measured)
    width = max([width, *(len(c.label) for c in report.comparisons)])
    lines.append(
        f"   {'':<{width}}  {'median':>10}   {'cpu':>8}   {'load':>14}   samples (wall; cpu)"
    )
    for m in report.measured:
        samples = " ".join(num(s, m.unit).split()[0] for s in m.samples)
        cpu = f"{m.cpu_median:.2f} s" if m.cpu_median is not None and m.unit == "s" else "-"
        cpus = f"; {' '.join(f'{x:.2f}' for x in m.cpu)}" if cpu != "-" else ""
        lines.append(
            f"   {m.name:<{width}}  {num(m.median, m.unit):>10}   {cpu:>8}   {m.load:>14}   "
            f"[{samples}{cpus}]"
        )
    for c in report.comparisons:
        lines.append(
            f"   {c.label:<{width}}  {num(c.value, c.unit):>10}   range {c.spread}   "
            f"cpu {c.cpu_spread}   target {target(c)}  {verdict(c)}"
        )
    lines += [f"   note: {n}" for n in report.notes]
    return "\n".join(lines)


def to_json(report: Report) -> dict[str, Any]:
    doc = asdict(report)
    for m, raw in zip(report.measured, doc["measured"], strict=True):
        raw["median"] = m.median
    for c, raw in zip(report.comparisons, doc["comparisons"], strict=True):
        raw["passed"] = c.passed
    doc["passed"] = report.passed
    return doc


def emit(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print(render_text(report))


def emitted(name: str, make: Callable[[], Report], as_json: bool) -> int:
    """Run `make` and print its report: 0 even on a MISS (a benchmark reports; it does not
    gate), 1 with one line (`bench NAME: ...`) when a contender failed."""
    try:
        report = make()
    except BenchError as exc:
        print(f"{' '.join(['bench', name]).strip()}: {exc}", file=sys.stderr)
        return 1
    emit(report, as_json)
    return 0


def main_for(
    bench: Callable[[Options, TextIO | None], Report], argv: list[str] | None, doc: str | None
) -> int:
    """The body of every script's main(): parse, run, print (`emitted`)."""
    opts = options(parser(doc).parse_args(argv))
    return emitted("", lambda: bench(opts, sys.stderr), opts.json)
