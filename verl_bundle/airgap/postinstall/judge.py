"""The post-install checks judged from what the readiness probe found in the target
interpreter: the profile's imports, torch's build, and the GPU with a tiny flash-attn call.

The probe (probe.py) imports each module once, isolated from the installer's code; these
functions only read its findings, so post-install and readiness share one import run.
"""

from __future__ import annotations

import re

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.contract.manifest import Checks
from verl_bundle.airgap.postinstall.readiness import Facts


def check_imports(found: Facts) -> list[Check]:
    """The profile's imports, as the probe found them (each imported once, in the probe)."""
    out = []
    for item in found.get("checks", []):
        mod = item["module"]
        if item["ok"]:
            version = item.get("version", "")
            out.append(Check("import:" + mod, "ok", f"import {mod} {version}".rstrip()))
            continue
        out.append(
            Check(
                "import:" + mod,
                "fail",
                f"import {mod} failed: {item['type']}: {item['error']}",
                fix=f"run `verl-bundle explain` on this output; check the phase that installs {mod}",
                subject=mod,
            )
        )
    return out


def check_torch(checks: Checks, found: Facts) -> list[Check]:
    want_version = checks.torch_version
    want_cuda = checks.torch_cuda
    wheel = checks.flash_attn_wheel
    if not (want_version or want_cuda or wheel):
        return []
    torch = found.get("torch") or {"ok": False, "error": "not asked"}
    if not torch["ok"]:
        return [
            Check(
                "torch",
                "fail",
                f"torch does not import: {torch['error']}",
                fix="run `verl-bundle explain` on the install log; rerun ./install.sh",
            )
        ]
    out = []
    version, cuda = torch["version"], torch["cuda"]
    if want_version and version != want_version:
        out.append(
            Check(
                "torch-version",
                "fail",
                f"torch is {version}, the bundle's is {want_version}",
                fix="another torch shadows the bundled one (check `pip list`, PYTHONPATH, user site)",
            )
        )
    elif want_version:
        out.append(Check("torch-version", "ok", f"torch {version}"))
    if want_cuda and cuda != want_cuda:
        out.append(
            Check(
                "torch-cuda",
                "fail",
                f"torch.version.cuda is {cuda}, expected {want_cuda}",
                fix="install the bundle's torch (+cu build) again: ./install.sh",
            )
        )
    elif want_cuda:
        out.append(Check("torch-cuda", "ok", f"torch.version.cuda {cuda}"))
    if wheel:
        m = re.search(r"cxx11abi(TRUE|FALSE)", wheel, re.IGNORECASE)
        abi = torch.get("abi")
        if m and abi is not None:
            want = m.group(1).upper() == "TRUE"
            if bool(abi) != want:
                out.append(
                    Check(
                        "cxx11abi",
                        "fail",
                        f"torch's C++ ABI (_GLIBCXX_USE_CXX11_ABI={abi}) differs from {wheel}",
                        fix="use the flash-attn wheel built for this torch's ABI (cxx11abi%s)"
                        % ("TRUE" if abi else "FALSE"),
                    )
                )
            else:
                out.append(Check("cxx11abi", "ok", f"torch C++ ABI matches {wheel}"))
    return out


def check_gpu(require_gpu: bool, flash: bool, found: Facts) -> list[Check]:
    """torch's view of the GPU and, where one is visible and flash-attn is installed, the
    probe's tiny flash-attn call (run last in the probe: a crash there is reported here).
    Without a GPU this is `skip`, or a failure under --require-gpu."""
    fix = "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES; ./doctor --require-gpu"
    if found.get("gpu_error"):
        status = "fail" if require_gpu else "skip"
        return [Check("gpu", status, f"cannot ask torch: {found['gpu_error']}", fix=fix)]
    if not found.get("gpu_visible"):
        return [
            Check(
                "gpu",
                "fail" if require_gpu else "skip",
                "torch.cuda.is_available() is False: no GPU checks on this machine",
                fix=fix if require_gpu else "",
            )
        ]
    out = [Check("gpu", "ok", f"torch sees {found.get('gpu_count', 0)} GPU(s)")]
    smoke = found.get("smoke")
    if flash and smoke is not None:
        if smoke["ok"]:
            where = smoke.get("device", "the GPU")
            out.append(Check("flash-attn-gpu", "ok", f"flash-attn ok on {where}"))
        else:
            out.append(
                Check(
                    "flash-attn-gpu",
                    "fail",
                    f"a tiny flash-attn call failed: {smoke['type']}: {smoke['error']}",
                    fix="run `verl-bundle explain` on the install log",
                )
            )
    return out
