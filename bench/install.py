"""Install: the bundle's `install.sh` into a fresh prefix vs `uv venv` (no pip) and
`uv pip install --offline` of the same wheels (the strongest baseline), and vs a fresh
`pythonX.Y -m venv` and `pip install` (the familiar one, which also installs pip and compiles
bytecode).

The bundle is built and extracted once (untimed). install.sh is timed with and without the
doctor; its steps are timed too, from its step events (--events): it verifies the bundle,
makes the venv, installs each phase with the bundled uv, and runs the post-install checks.
Every contender runs once untimed first (warm page cache, compiled bytecode); uv starts with an
empty cache each time, as install.sh's does.
Target: install.sh at most 1.15x the uv baseline. After each full install.sh, untimed for it, the
floor of its post-install checks: one cold import, from source, of the modules they prove (the
"import floor" in its steps note; target: post-install at most 1.2x it).

    python bench/install.py [--runs N] [--size 1G] [--json]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/install.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness
from bench.built import built_bundle
from bench.harness import BenchError, Contender, Options, Report
from verl_bundle.airgap.contract.events import read_events

TARGET = 1.15
# install.sh's step events (--events) -> the names in the notes.
STEP_NAMES = {"venv": "venv+pip", "post-install": "post-install"}


def timed_steps(
    cmd: list[str], log: Path, steps: dict[str, list[float]], allowed: tuple[int, ...] = (0,)
) -> float:
    """Run install.sh; add each step's seconds (from its --events) to `steps`. The time before
    the first step (the shim finding a Python, the installer's imports) is "start-up"."""
    events = log.with_name("install-events.jsonl")
    events.unlink(missing_ok=True)
    start = time.perf_counter()
    with log.open("ab") as out:
        out.write(f"$ {harness.show(cmd)}\n".encode())
        out.flush()
        rc = subprocess.run(
            harness.pin([*cmd, "--events", str(events)]),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=harness.clean_env(),
            check=False,
        ).returncode
    elapsed = time.perf_counter() - start
    if rc not in allowed:
        raise BenchError(f"{harness.show(cmd)} exited {rc}; see {log}")
    ended = [e for e in read_events(str(events)) if e["event"] == "step" and e["status"] != "start"]
    per: dict[str, float] = {"start-up": elapsed - sum(float(e["seconds"]) for e in ended)}
    for e in ended:
        name = STEP_NAMES.get(str(e["step"]), str(e["step"]))
        per[name] = per.get(name, 0.0) + float(e["seconds"])
    for name, seconds in per.items():
        steps[name].append(seconds)
    return elapsed


def floor_modules(bundle: Path) -> list[str]:
    """The modules the post-install checks prove: readiness's (for a bundle with verl) and the
    profile's import checks."""
    from verl_bundle.airgap.contract import manifest as mf
    from verl_bundle.airgap.postinstall import readiness

    m = mf.load(str(bundle))
    plan = readiness.plan_for(m, None, readiness.load_table()) if m.has("verl") else None
    return list(dict.fromkeys([*(plan.modules if plan else ()), *m.checks.imports]))


def import_floor(python: Path, modules: list[str], log: Path) -> float:
    """One cold import of `modules` by the venv's python, in a fresh interpreter, from source
    (its bytecode removed first, as post-install found the venv): the checks' floor."""
    for cache in python.parent.parent.glob("lib/python*/site-packages/**/__pycache__"):
        harness.remove(cache)
    # Each module as the checks import it: one that fails (a phase left out) is tried, as
    # theirs is, and does not stop the rest.
    code = (
        "import importlib\n"
        f"for m in {modules!r}:\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except Exception:\n        pass\n"
    )
    return harness.run([str(python), "-I", "-B", "-c", code], log)


def _steps_note(label: str, steps: dict[str, list[float]]) -> str:
    parts = [f"{name} {statistics.median(v):.2f}" for name, v in steps.items() if name != "done"]
    return f"{label} steps, median s: " + ", ".join(parts)


def bench(opts: Options, progress: TextIO | None) -> Report:
    with built_bundle("install", opts, progress) as built:
        stack, work, log = built.stack, built.work, built.log
        bundle = built.extract()
        wheels = bundle / "wheels"
        prefix = work / "prefix"
        installer = [str(bundle / "install.sh"), "--prefix", str(prefix)]
        installer += ["--python", opts.python, "--yes"]
        no_doctor = [*installer, "--skip-doctor"]
        venv = [opts.python, "-m", "venv", str(prefix)]
        pip = [str(prefix / "bin" / "pip"), "install", "--no-index", "--find-links", str(wheels)]
        pip += [w.pin for w in stack.requirements]
        uv_exe = str(harness.BIN / "uv")
        uv_env = harness.clean_env(UV_CACHE_DIR=str(work / "uv-cache"))
        uv_venv = [uv_exe, "venv", "--quiet", "--python", opts.python, str(prefix)]
        uv_pip = [uv_exe, "pip", "install", "--offline", "--no-index", "--find-links", str(wheels)]
        uv_pip += ["--python", str(prefix / "bin" / "python")]
        uv_pip += [w.pin for w in stack.requirements]
        split: dict[str, list[float]] = defaultdict(list)
        split_uv: dict[str, list[float]] = defaultdict(list)
        unused: dict[str, list[float]] = defaultdict(list)  # the pinned runs' steps

        def uv_venv_and_install(split_uv: dict[str, list[float]]) -> float:
            a = harness.run(uv_venv, log, uv_env)
            b = harness.run(uv_pip, log, uv_env)
            split_uv["uv venv"].append(a)
            split_uv["uv pip install"].append(b)
            return a + b

        def venv_and_pip() -> float:
            a = harness.run(venv, log)
            b = harness.run(pip, log)
            split["venv"].append(a)
            split["pip install"].append(b)
            return a + b

        modules = floor_modules(bundle)

        def install_and_floor() -> float:
            """install.sh; then, untimed for it, the import floor of its checks."""
            took = timed_steps(installer, log, steps_all)
            steps_all["import floor"].append(import_floor(prefix / "bin" / "python", modules, log))
            return took

        steps_all: dict[str, list[float]] = defaultdict(list)
        steps_nodoc: dict[str, list[float]] = defaultdict(list)
        contenders = [
            Contender(
                "install.sh",
                harness.show(installer),
                install_and_floor,
            ),
            Contender(
                "install.sh --skip-doctor",
                harness.show(no_doctor),
                lambda: timed_steps(no_doctor, log, steps_nodoc),
            ),
            Contender(
                "uv venv + uv pip install --offline",
                f"{harness.show(uv_venv, uv_env)} && {harness.show(uv_pip, uv_env)}",
                lambda: uv_venv_and_install(split_uv),
            ),
            Contender(
                "venv + pip install",
                f"{harness.show(venv)} && {harness.show(pip)}",
                venv_and_pip,
            ),
        ]
        # install.sh's installs run on every core, as uv's do, but its checks and uv's
        # threads load them differently: the pair again with both on one core.
        twins = [
            Contender(
                "install.sh --skip-doctor",
                harness.show(no_doctor),
                lambda: timed_steps(no_doctor, log, unused),
            ),
            Contender(
                "uv venv + uv pip install --offline",
                contenders[2].command,
                lambda: uv_venv_and_install(unused),
            ),
        ]
        contenders += harness.paired(twins, *(t.name for t in twins))

        def clear() -> None:
            harness.remove(prefix, work / "uv-cache")

        harness.warm_up(contenders, clear, clear)
        for d in (split, split_uv, steps_all, steps_nodoc):
            d.clear()
        harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    full, nodoc, uv_ref, pip_ref = results[:4]
    return Report(
        bench="install",
        title="install.sh vs uv and vs venv + pip install",
        setup=f"{stack.describe()}; Python {opts.python}",
        runs=opts.runs,
        measured=results,
        comparisons=(
            harness.ratio("ratio install.sh/uv", full, uv_ref, TARGET),
            harness.ratio("ratio --skip-doctor/uv", nodoc, uv_ref, TARGET),
            harness.ratio("ratio install.sh/pip", full, pip_ref, None),
            *harness.paired_ratios("ratio --skip-doctor/uv", results[4:]),
        ),
        notes=(
            _steps_note("install.sh", steps_all),
            _steps_note("install.sh --skip-doctor", steps_nodoc),
            _steps_note("uv venv + uv pip install", split_uv),
            _steps_note("venv + pip install", split),
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
