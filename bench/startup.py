"""Start-up: `verl-bundle --version` and `--help` vs `uv --version` (a native binary: the
strongest baseline), and `verl-bundle doctor` vs the bundle's own `./doctor` (the same checks,
run by the server's stdlib code from the extracted bundle).

Each sample is the mean of several calls (start-up is milliseconds). The doctor runs against a
small synthetic bundle's manifest; both doctors may exit 1 on a host with no GPU.
Targets: --version and --help under 80 ms; verl-bundle doctor at most 1.2x ./doctor.

    python bench/startup.py [--runs N] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/startup.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness
from bench.built import built_bundle
from bench.harness import Comparison, Contender, Options, Report

LIMIT_MS = 80.0
DOCTOR = 1.2
CALLS = 5  # calls per sample
BUNDLE_SIZE = 20_000_000  # the doctor reads the manifest only: a small stack does


def _ms(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    """Mean milliseconds of CALLS runs (exit 0 or 1)."""
    total = sum(harness.run(cmd, log, env, allowed=(0, 1)) for _ in range(CALLS))
    return total / CALLS * 1000


def bench(opts: Options, progress: TextIO | None) -> Report:
    with built_bundle("startup", opts, progress, BUNDLE_SIZE) as built:
        stack, log = built.stack, built.log
        bundle = built.extract(wheels=False)
        vb = harness.verl_bundle()
        version, helps = [*vb, "--version"], [*vb, "--help"]
        uv = [str(harness.BIN / "uv"), "--version"]
        ours_doctor = [*vb, "doctor", "--bundle", str(bundle), "--python", opts.python]
        own_doctor = [str(bundle / "doctor"), "--python", opts.python]
        env = harness.clean_env(COLUMNS="100")
        contenders = [
            Contender("verl-bundle --version", harness.show(version), lambda: _ms(version, log)),
            Contender("verl-bundle --help", harness.show(helps), lambda: _ms(helps, log, env)),
            Contender("uv --version", harness.show(uv), lambda: _ms(uv, log)),
            Contender(
                "verl-bundle doctor --bundle",
                harness.show(ours_doctor),
                lambda: _ms(ours_doctor, log),
            ),
            Contender("./doctor", harness.show(own_doctor), lambda: _ms(own_doctor, log)),
        ]
        for c in contenders:
            c.unit = "ms"
            c.measure()  # untimed: compiled bytecode and the page cache are warm for all
        harness.interleave(contenders, opts.runs, progress)
    results = harness.measured(contenders)
    version_m, help_m, uv_m, doctor_m, own_m = results
    return Report(
        bench="startup",
        title="start-up: --version, --help and doctor",
        setup=f"mean of {CALLS} calls per sample; doctor on {stack.describe()}",
        runs=opts.runs,
        measured=results,
        comparisons=(
            Comparison("--version", version_m.median, "ms", LIMIT_MS),
            Comparison("--help", help_m.median, "ms", LIMIT_MS),
            harness.ratio("ratio --version/uv --version", version_m, uv_m, None),
            harness.ratio("ratio doctor/./doctor", doctor_m, own_m, DOCTOR),
        ),
        notes=(
            "./doctor runs the bundle's code isolated (-I -B: lib/ from source on every run, the "
            "standard library from its bytecode); verl-bundle doctor runs the installed package",
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
