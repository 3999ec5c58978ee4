"""The doctor: check this server against a bundle's needs before anything is installed.

It runs on the server's own python3 (3.8 or newer, standard library only). Probes fill one
`Facts` value (facts.py); each check is one registered function (registry.py) in a module of
its domain; each ends ok, warn or fail, and a warn or fail carries a fix that can be applied
on an air-gapped server. Every external command runs with a timeout, so a hung driver cannot
hang the doctor: a timeout is a finding, not a crash.

`run_doctor(manifest, ...)` takes the typed `Manifest` (or None: the host checked on its own,
without a bundle) and returns a `Report`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from verl_bundle.airgap.contract.manifest import (
    MANIFEST,
    SUMS,
    Manifest,
    ManifestError,
    find_root,
    load,
)
from verl_bundle.airgap.doctor.commands import TIMEOUT, Run, run
from verl_bundle.airgap.doctor.devices import TORCHRUN_VARS, torchrun_problems, visible_devices
from verl_bundle.airgap.doctor.facts import Facts, gather  # imports every domain: registers
from verl_bundle.airgap.doctor.gpus import parse_apps, parse_gpus
from verl_bundle.airgap.doctor.registry import (
    STATUSES,
    Check,
    Options,
    Plan,
    registered,
    run_checks,
)
from verl_bundle.airgap.doctor.report import Report, host_of, render_json, render_text
from verl_bundle.airgap.doctor.resources import max_jobs
from verl_bundle.airgap.doctor.versions import parse_version, version_matches
from verl_bundle.airgap.render import dumps, encodable, envelope, printable

__all__ = [
    "STATUSES",
    "TIMEOUT",
    "TORCHRUN_VARS",
    "Check",
    "Facts",
    "Options",
    "Plan",
    "Report",
    "Run",
    "examine",
    "gather",
    "locate",
    "main",
    "max_jobs",
    "max_jobs_main",
    "parse_apps",
    "parse_gpus",
    "parse_version",
    "registered",
    "render_json",
    "render_text",
    "run",
    "run_doctor",
    "torchrun_problems",
    "version_matches",
    "visible_devices",
]


def examine(plan: Plan, facts: Facts, opts: Options) -> Report:
    """The registered checks over gathered facts (generic ones only without a bundle)."""
    return Report(run_checks(plan, facts, opts), host_of(facts), plan.generic)


def run_doctor(
    manifest: Manifest | None,
    python: str | None = None,
    prefix: str | None = None,
    require_gpu: bool = False,
    skipped: Sequence[str] = (),
) -> Report:
    """Examine this server against `manifest` less the `skipped` phases (None: no bundle,
    the host on its own). ValueError for a skipped phase the bundle does not have."""
    plan = Plan.of(manifest, skipped)
    opts = Options(python, prefix, require_gpu)
    return examine(plan, gather(python, prefix), opts)


def _own_bundle() -> str | None:
    """The bundle this code sits in (<bundle>/lib/verl_bundle/airgap/doctor/), if any."""
    parents = Path(__file__).resolve().parents
    if len(parents) > 4 and parents[3].name == "lib" and (parents[4] / MANIFEST).is_file():
        return str(parents[4])
    return None


def _is_bundle(path: Path) -> bool:
    return (path / MANIFEST).is_file() and (path / SUMS).is_file()


def locate(bundle: str | None) -> str | None:
    """The bundle directory to check: `bundle` (or the one bundle inside it), else the bundle
    this code sits in, else the extracted bundle the current directory is in; None: none."""
    if bundle is not None:
        return find_root(bundle)
    own = _own_bundle()
    if own is not None:
        return own
    here = Path.cwd()
    return next((str(p) for p in (here, *here.parents) if _is_bundle(p)), None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="doctor",
        description="Check this server against a bundle's needs, before installing. With no "
        "bundle (none given, none around) the host is checked on its own.",
    )
    parser.add_argument(
        "--bundle", metavar="DIR", help="the bundle (default: the one I am in, or the current one)"
    )
    parser.add_argument("--python", metavar="PATH", help="the interpreter the venv will use")
    parser.add_argument("--prefix", metavar="DIR", help="where the bundle will be installed")
    parser.add_argument(
        "--require-gpu", action="store_true", help="no driver or GPU is a failure, not a warning"
    )
    parser.add_argument(
        "--skip-phase",
        action="append",
        default=[],
        metavar="NAME",
        help="a phase the install leaves out (repeatable): what only it needs is not required",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: list[str]) -> int:
    """`doctor [--bundle DIR] ...`: exit 0 when nothing failed, 1 on a failure, 2 on bad usage."""
    args = _parser().parse_args(argv)
    root = locate(args.bundle)
    try:
        manifest = load(root) if root is not None else None
        if manifest is None and args.skip_phase:
            raise ValueError("--skip-phase needs a bundle (--bundle DIR)")
        report = run_doctor(manifest, args.python, args.prefix, args.require_gpu, args.skip_phase)
    except ManifestError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(dumps(envelope("doctor", report.ok, render_json(report))))
    else:
        print(encodable(printable(render_text(report))))
    return 0 if report.ok else 1


def max_jobs_main(argv: list[str]) -> int:
    """`max-jobs --gib-per-job F --limit N`: print the MAX_JOBS for this machine."""
    parser = argparse.ArgumentParser(
        prog="max-jobs", description="The MAX_JOBS a source build should use on this machine."
    )
    parser.add_argument("--gib-per-job", type=float, default=9.0, metavar="F")
    parser.add_argument("--limit", type=int, default=0, metavar="N", help="0 means no limit")
    args = parser.parse_args(argv)
    if args.gib_per_job <= 0 or args.limit < 0:
        parser.error("--gib-per-job must be above 0 and --limit at least 0")
    print(max_jobs(args.gib_per_job, args.limit or None))
    return 0
