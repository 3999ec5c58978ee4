"""Post-install checks, run by the installed environment's own python.

What the bundle promised must be what is there: every packaged distribution at its version,
the profile's imports working, torch the expected build (version, CUDA, C++ ABI matching the
flash-attn wheel), and with a GPU a real CUDA call through flash-attn.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib
import json
import re
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import Any

from verl_bundle.airgap.manifest import (
    Checks,
    Manifest,
    ManifestError,
    canonical,
    find_root,
    load,
)

try:  # Python 3.8+
    from importlib import metadata as importlib_metadata
except ImportError:  # pragma: no cover
    importlib_metadata = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Result:
    id: str
    status: str  # ok, warn, fail, skip
    summary: str
    fix: str = ""


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


def check_imports(modules: list[str]) -> list[Result]:
    out = []
    for mod in modules:
        try:
            imported = importlib.import_module(mod)
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            out.append(
                Result(
                    "import:" + mod,
                    "fail",
                    f"import {mod} failed: {type(exc).__name__}: {first}",
                    f"run `verl-bundle explain` on this output; check the phase that installs {mod}",
                )
            )
            continue
        version = getattr(imported, "__version__", "")
        out.append(Result("import:" + mod, "ok", f"import {mod} {version}"))
    return out


def check_torch(checks: Checks) -> list[Result]:
    want_version = checks.torch_version
    want_cuda = checks.torch_cuda
    wheel = checks.flash_attn_wheel
    if not (want_version or want_cuda or wheel):
        return []
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:
        return [Result("torch", "fail", f"torch does not import: {exc}")]
    out = []
    version = str(getattr(torch, "__version__", ""))
    cuda = str(getattr(getattr(torch, "version", None), "cuda", None))
    if want_version and version != want_version:
        out.append(
            Result(
                "torch-version",
                "fail",
                f"torch is {version}, the bundle's is {want_version}",
                "another torch shadows the bundled one (check `pip list`, PYTHONPATH, user site)",
            )
        )
    elif want_version:
        out.append(Result("torch-version", "ok", f"torch {version}"))
    if want_cuda and cuda != want_cuda:
        out.append(
            Result(
                "torch-cuda",
                "fail",
                f"torch.version.cuda is {cuda}, expected {want_cuda}",
                "install the bundle's torch (+cu build) again: ./install.sh",
            )
        )
    elif want_cuda:
        out.append(Result("torch-cuda", "ok", f"torch.version.cuda {cuda}"))
    if wheel:
        m = re.search(r"cxx11abi(TRUE|FALSE)", wheel, re.IGNORECASE)
        abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
        if m and abi is not None:
            want = m.group(1).upper() == "TRUE"
            if bool(abi) != want:
                out.append(
                    Result(
                        "cxx11abi",
                        "fail",
                        f"torch's C++ ABI (_GLIBCXX_USE_CXX11_ABI={abi}) differs from {wheel}",
                        "use the flash-attn wheel built for this torch's ABI (cxx11abi%s)"
                        % ("TRUE" if abi else "FALSE"),
                    )
                )
            else:
                out.append(Result("cxx11abi", "ok", f"torch C++ ABI matches {wheel}"))
    return out


GPU_SMOKE = """
import torch
from flash_attn import flash_attn_func
q = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.float16)
out = flash_attn_func(q, q, q, causal=True)
torch.cuda.synchronize()
assert out.shape == q.shape and torch.isfinite(out).all()
print("flash-attn ok on", torch.cuda.get_device_name(0))
"""


def check_gpu(require_gpu: bool, has_flash: bool) -> list[Result]:
    try:
        torch = importlib.import_module("torch")
        available = bool(torch.cuda.is_available())
    except Exception as exc:
        return [Result("gpu", "fail" if require_gpu else "skip", f"cannot ask torch: {exc}")]
    if not available:
        status = "fail" if require_gpu else "skip"
        return [
            Result(
                "gpu",
                status,
                "torch.cuda.is_available() is False: no GPU checks on this machine",
                "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES" if require_gpu else "",
            )
        ]
    out = [Result("gpu", "ok", f"torch sees {torch.cuda.device_count()} GPU(s)")]
    if has_flash:
        proc = subprocess.run(
            [sys.executable, "-W", f"ignore:{DISTUTILS_NOISE}", "-c", GPU_SMOKE],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        tail = (proc.stdout or "").strip().splitlines()[-1:] or [""]
        if proc.returncode == 0:
            out.append(Result("flash-attn-gpu", "ok", tail[0]))
        else:
            out.append(
                Result(
                    "flash-attn-gpu",
                    "fail",
                    f"a tiny flash-attn call failed: {tail[0]}",
                    "run `verl-bundle explain` on the install log",
                )
            )
    return out


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


def run_checks(
    manifest: Manifest,
    require_gpu: bool = False,
    skipped: list[str] | None = None,
    files: bool = False,
) -> list[Result]:
    manifest = manifest.without_phases(skipped or [])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DISTUTILS_NOISE)
        results = check_versions(manifest)
        if files:
            results += check_files(manifest)
        results += check_imports(list(manifest.checks.imports))
        results += check_torch(manifest.checks)
        results += check_requirements()
        results += check_gpu(require_gpu, manifest.has("flash-attn"))
    return results


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
    results = run_checks(manifest, args.require_gpu, args.skip_phase, args.check_files)
    failed = [r for r in results if r.status == "fail"]
    ready, why = _readiness(root, args.require_gpu, args.skip_phase)
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


def _readiness(root: str, require_gpu: bool, skipped: list[str]) -> tuple[Result | None, str]:
    """Ready to train, not just installed (airgap/readiness.py), for a bundle with verl.

    Not ready fails the post-install checks, unless the profile declares that limit or phases
    were skipped on purpose: then it is reported (with why) and the install stands."""
    from verl_bundle.airgap import manifest as mf
    from verl_bundle.airgap import readiness

    m = mf.load(root).without_phases(skipped)
    if not m.has("verl"):
        return None, ""
    try:
        report = readiness.run_readiness(m, sys.executable, require_gpu)
    except readiness.ReadinessError as exc:
        return Result("readiness", "fail", f"readiness: {exc}", "rerun ./install.sh"), ""
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
