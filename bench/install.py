"""Install: the bundle's `install.sh` into a fresh prefix vs a fresh venv and `pip install` of the
same wheels.

The bundle is built and extracted once (untimed). install.sh is timed with and without the
doctor; its steps ("==> [k/7]" lines) are timed too, from when each line appears. The
reference is `pythonX.Y -m venv` (with pip) and `pip install --no-index --find-links` of the
same wheels. Every contender runs once untimed first (warm page cache, compiled bytecode).
Target: install.sh at most 0.5x the venv + pip time.

    python bench/install.py [--runs N] [--size 1G] [--json]
"""

from __future__ import annotations

import itertools
import re
import statistics
import subprocess
import sys
import tarfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/install.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, synthetic
from bench.cold_build import build_cmd
from bench.harness import BenchError, Contender, Options, Report

TARGET = 0.5
STEP = re.compile(r"^==> \[(\d)/7\] (\S+(?: \S+)?)")
STEP_NAMES = {
    "1": "verify",
    "2": "python",
    "3": "doctor",
    "4": "venv+pip",
    "5": "phases",
    "6": "post-install",
    "7": "done",
}


def timed_steps(cmd: list[str], log: Path, steps: dict[str, list[float]]) -> float:
    """Run install.sh; add each step's seconds (to the next step's line) to `steps`."""
    marks: list[tuple[str, float]] = [("start", 0.0)]
    start = time.perf_counter()
    with log.open("ab") as out:
        out.write(f"$ {harness.show(cmd)}\n".encode())
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=harness.clean_env(),
        )
        assert proc.stdout is not None
        for raw in proc.stdout:
            out.write(raw)
            m = STEP.match(raw.decode(errors="replace"))
            if m:
                marks.append((STEP_NAMES[m.group(1)], time.perf_counter() - start))
        rc = proc.wait()
    elapsed = time.perf_counter() - start
    if rc != 0:
        raise BenchError(f"{harness.show(cmd)} exited {rc}; see {log}")
    marks.append(("end", elapsed))
    per: dict[str, float] = defaultdict(float)
    # Time before the first line (bash start-up) counts to the first step.
    for (name, t), (_, t_next) in itertools.pairwise(marks[1:]):
        per[name] += t_next - t
    per[marks[1][0]] += marks[1][1]
    for name, seconds in per.items():
        steps[name].append(seconds)
    return elapsed


def _steps_note(label: str, steps: dict[str, list[float]]) -> str:
    parts = [f"{name} {statistics.median(v):.2f}" for name, v in steps.items() if name != "done"]
    return f"{label} steps, median s: " + ", ".join(parts)


def bench(opts: Options, progress: TextIO | None) -> Report:
    stack = synthetic.stack(opts.size, opts.cache, progress)
    with harness.workdir("install", opts.keep, progress) as work:
        log = work / "commands.log"
        with synthetic.serving(stack) as index:
            env = harness.clean_env(
                UV_CACHE_DIR=str(work / "uv-cache"), XDG_CACHE_HOME=str(work / "xdg")
            )
            cmd = build_cmd(stack.write_profile(work), index.index_url, work / "cache", work / "b")
            harness.run(cmd, log, env)
        tarball = next((work / "b").glob("*.tar"))
        with tarfile.open(tarball) as tf:
            tf.extractall(work / "x", filter="data")
        harness.remove(work / "cache", work / "b", work / "uv-cache")
        bundle = next((work / "x").iterdir())
        wheels = bundle / "wheels"
        prefix = work / "prefix"
        installer = [str(bundle / "install.sh"), "--prefix", str(prefix)]
        installer += ["--python", opts.python, "--yes"]
        no_doctor = [*installer, "--skip-doctor"]
        venv = [opts.python, "-m", "venv", str(prefix)]
        pip = [str(prefix / "bin" / "pip"), "install", "--no-index", "--find-links", str(wheels)]
        pip += [w.pin for w in stack.requirements]
        split: dict[str, list[float]] = defaultdict(list)

        def venv_and_pip() -> float:
            a = harness.run(venv, log)
            b = harness.run(pip, log)
            split["venv"].append(a)
            split["pip install"].append(b)
            return a + b

        steps_all: dict[str, list[float]] = defaultdict(list)
        steps_nodoc: dict[str, list[float]] = defaultdict(list)
        contenders = [
            Contender(
                "install.sh",
                harness.show(installer),
                lambda: timed_steps(installer, log, steps_all),
            ),
            Contender(
                "install.sh --skip-doctor",
                harness.show(no_doctor),
                lambda: timed_steps(no_doctor, log, steps_nodoc),
            ),
            Contender(
                "venv + pip install",
                f"{harness.show(venv)} && {harness.show(pip)}",
                venv_and_pip,
            ),
        ]
        for c in contenders:
            c.prepare = c.cleanup = lambda: harness.remove(prefix)
            c.prepare()
            c.measure()  # untimed warm-up
            c.cleanup()
        for d in (split, steps_all, steps_nodoc):
            d.clear()
        harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    full, nodoc, ref = results
    return Report(
        bench="install",
        title="install.sh vs venv + pip install",
        setup=f"{stack.describe()}; Python {opts.python}",
        runs=opts.runs,
        measured=results,
        comparisons=(
            harness.ratio("ratio install.sh/pip", full, ref, TARGET),
            harness.ratio("ratio --skip-doctor/pip", nodoc, ref, TARGET),
        ),
        notes=(
            _steps_note("install.sh", steps_all),
            _steps_note("install.sh --skip-doctor", steps_nodoc),
            _steps_note("venv + pip install", split),
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
