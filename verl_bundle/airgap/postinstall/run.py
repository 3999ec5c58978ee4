"""Post-install checks, run by the installed environment's own python.

What the bundle promised must be what is there: every packaged distribution at its version,
the profile's imports working, torch the expected build (version, CUDA, C++ ABI matching the
flash-attn wheel), and with a GPU a real CUDA call through flash-attn. The distributions'
metadata is read here; everything that imports them is found by the readiness probe, in one
isolated interpreter, and judged in probed.py.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from verl_bundle.airgap.contract.manifest import (
    Manifest,
    ManifestError,
    canonical,
    find_root,
    load,
)
from verl_bundle.airgap.postinstall import probing as run
from verl_bundle.airgap.postinstall import readiness
from verl_bundle.airgap.postinstall.judge import Result, check_gpu, check_imports, check_torch
from verl_bundle.airgap.postinstall.readiness import Facts

try:  # Python 3.8+
    from importlib import metadata as importlib_metadata
except ImportError:  # pragma: no cover
    importlib_metadata = None  # type: ignore[assignment]


def _norm_version(version: str) -> str:
    return version.lower()


def check_versions(manifest: Manifest) -> list[Result]:
    """Every distribution the bundle installs is present at the bundled version."""
    installed: dict[str, str] = {}
    if importlib_metadata is not None:
        for dist in importlib_metadata.distributions():
            name = dist.metadata["Name"]
            if name:
                installed[canonical(name)] = dist.version
    wrong = []
    missing = []
    for entry in manifest.installed:
        name = canonical(entry.name)
        got = installed.get(name)
        if got is None:
            missing.append(name)
        elif _norm_version(got) != _norm_version(entry.version):
            wrong.append(f"{name} {got} (bundle: {entry.version})")
    if missing or wrong:
        return [
            Result(
                "versions",
                "fail",
                "not as bundled: "
                + "; ".join(["missing " + m for m in missing] + ["wrong " + w for w in wrong]),
                "run ./install.sh again; it reinstalls the phase that did not finish",
            )
        ]
    count = len(manifest.installed)
    return [Result("versions", "ok", f"{count} distributions installed at the bundled versions")]


def check_files(manifest: Manifest) -> list[Result]:
    """Every installed file of the bundled distributions matches its RECORD hash: nothing was
    left half-written by an interrupted install."""
    if importlib_metadata is None:
        return []
    wanted = {canonical(e.name) for e in manifest.installed}
    bad: list[str] = []
    checked = 0
    for dist in importlib_metadata.distributions():
        name = dist.metadata["Name"]
        if not name or canonical(name) not in wanted:
            continue
        for entry in dist.files or []:
            if entry.hash is None or entry.hash.mode != "sha256":
                continue
            path = entry.locate()
            checked += 1
            try:
                with open(str(path), "rb") as fh:
                    digest = hashlib.sha256(fh.read()).digest()
            except OSError:
                bad.append(f"{name}: {entry} missing")
                continue
            encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            if encoded != entry.hash.value:
                bad.append(f"{name}: {entry} differs from its RECORD")
    if bad:
        return [
            Result(
                "files",
                "fail",
                f"{len(bad)} installed files are not as their wheels recorded: "
                + "; ".join(bad[:5]),
                "run ./install.sh again; it reinstalls the phase that did not finish",
            )
        ]
    return [Result("files", "ok", f"{checked} installed files match their RECORD hashes")]


def check_requirements() -> list[Result]:
    """What `pip check` does, without starting pip: every installed distribution's declared
    requirements are installed at versions they accept. Uses the packaging copy inside the
    environment's pip (the bundle brings pip); skipped where there is none."""
    try:
        from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
        from pip._vendor.packaging.utils import canonicalize_name
    except ImportError:
        return [Result("requirements", "skip", "pip is not installed here: not checked")]
    if importlib_metadata is None:
        return []
    dists = [d for d in importlib_metadata.distributions() if d.metadata["Name"]]
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in dists}
    problems: list[str] = []
    for dist in dists:
        for text in dist.requires or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            have = installed.get(canonicalize_name(req.name))
            if have is None:
                problems.append(f"{dist.metadata['Name']} requires {req.name}, not installed")
            elif not req.specifier.contains(have, prereleases=True):
                problems.append(f"{dist.metadata['Name']} requires {req}, {have} is installed")
    if not problems:
        return [Result("requirements", "ok", f"{len(dists)} distributions' requirements are met")]
    return [
        Result(
            "requirements",
            "warn",
            "; ".join(sorted(problems)[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""),
            "the bundle installs exactly its lock with --no-deps; a requirement the profile "
            "replaced on purpose (e.g. cupy for CUDA 11) shows up here",
        )
    ]


# Printed by setuptools' distutils shim when something imports distutils after setuptools: noise
# for a user, not a finding.
DISTUTILS_NOISE = "Setuptools is replacing distutils"


@dataclass(frozen=True)
class Findings:
    """Every check's result, readiness's (None for a bundle without verl) and, when it is not
    ready but the install stands, why."""

    results: tuple[Result, ...]
    readiness: Result | None = None
    why: str = ""


def run_checks(
    manifest: Manifest,
    require_gpu: bool = False,
    skipped: Sequence[str] = (),
    files: bool = False,
    python: str = sys.executable,
) -> Findings:
    """All post-install checks. Every heavy import (the profile's checks, readiness's trainer
    modules, torch's build, the GPU smoke test) happens once, in one isolated probe
    interpreter (readiness_run.probe); the pip check runs beside it as its own subprocess, and
    this process reads the installed metadata meanwhile."""
    m = manifest.without_phases(list(skipped))
    table = readiness.load_table()
    plan = readiness.plan_for(m, None, table) if m.has("verl") else None
    has_flash = m.has("flash-attn")
    asked = plan or readiness.Plan("", (), "", has_flash, None)
    c = m.checks
    torch = bool(c.torch_version or c.torch_cuda or c.flash_attn_wheel)
    with ThreadPoolExecutor(max_workers=2) as pool:
        probing = pool.submit(
            run.probe,
            python,
            asked,
            require_gpu and plan is not None,
            1800,
            c.imports,
            torch,
            has_flash,
        )
        pip = pool.submit(run.pip_check, python) if plan is not None else None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=DISTUTILS_NOISE)
            results = check_versions(m)
            if files:
                results += check_files(m)
            requirements = check_requirements()
        try:
            found: Facts = probing.result()
        except readiness.ReadinessError as exc:
            return _unprobed(results + requirements, require_gpu, plan is not None, str(exc))
        pipped = pip.result() if pip is not None else None
    results += check_imports(found) + check_torch(c, found) + requirements
    results += check_gpu(require_gpu, has_flash, found)
    if plan is None or pipped is None:
        return Findings(tuple(results))
    ready, why = _readiness(readiness.verdict(m, plan, found, pipped, table), list(skipped))
    return Findings(tuple(results), ready, why)


def _unprobed(results: list[Result], require_gpu: bool, verl: bool, error: str) -> Findings:
    """The probe could not run at all (no interpreter, a crash before any result)."""
    results.append(
        Result("imports", "fail", f"the import checks could not run: {error}", "rerun ./install.sh")
    )
    results.append(Result("gpu", "fail" if require_gpu else "skip", f"cannot ask torch: {error}"))
    ready = Result("readiness", "fail", f"readiness: {error}", "rerun ./install.sh")
    return Findings(tuple(results), ready if verl else None)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="postinstall", description=__doc__)
    parser.add_argument("--bundle", required=True, help="the extracted bundle directory")
    parser.add_argument("--require-gpu", action="store_true")
    parser.add_argument("--skip-phase", action="append", default=[], help="a phase left out")
    parser.add_argument(
        "--check-files",
        action="store_true",
        help="also check every installed file against its RECORD (after an interrupted install)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    root = find_root(args.bundle)
    try:
        manifest = load(root)
    except ManifestError as exc:
        print(f"postinstall: {exc}", file=sys.stderr)
        return 2
    found = run_checks(manifest, args.require_gpu, args.skip_phase, args.check_files)
    results, ready, why = list(found.results), found.readiness, found.why
    failed = [r for r in results if r.status == "fail"]
    if ready is not None and ready.status == "fail":
        failed.append(ready)
    if args.json:
        doc: dict[str, Any] = {"ok": not failed, "checks": [asdict(r) for r in results]}
        doc["readiness"] = asdict(ready) if ready is not None else None
        print(json.dumps(doc, indent=2))
    else:
        # Readiness first: the checks' table and the verdict stay the last lines (a failed
        # install shows its output's tail).
        if ready is not None:
            print(ready.summary)
        for r in results:
            print(f"{r.status:<4} {r.id:<18} {r.summary}")
            if r.fix and r.status in ("fail", "warn"):
                print(f"     fix: {r.fix}")
        print("post-install checks: " + _verdict(failed, ready, why))
    return 1 if failed else 0


def _readiness(report: readiness.ReadinessReport, skipped: list[str]) -> tuple[Result, str]:
    """Ready to train, not just installed (airgap/postinstall/readiness.py), for a bundle with verl.

    Not ready fails the post-install checks, unless the profile declares that limit or phases
    were skipped on purpose: then it is reported (with why) and the install stands."""
    text = readiness.render_text(report)
    if report.ready:
        return Result("readiness", "ok", text), ""
    why = ""
    if report.limit:
        why = "the profile's known limit"
    elif skipped:
        why = f"skipped phases: {', '.join(skipped)}"
        text += f"\nskipped phases ({', '.join(skipped)}) are not installed: that is why"
    first = next(c for c in report.checks if c.status == "fail")
    return Result("readiness", "warn" if why else "fail", text, first.fix), why


def _verdict(failed: list[Result], ready: Result | None, why: str) -> str:
    """The last line; never "all passed" when the trainer cannot start."""
    if failed:
        return f"{len(failed)} failed" + ("; not ready to train" if ready in failed else "")
    if ready is None or ready.status == "ok":
        head = ready.summary.splitlines()[0] if ready else ""
        return "all passed" + (f"; {head}" if head else "")
    return f"passed, but not ready to train ({why})"
