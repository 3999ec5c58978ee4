"""One prepared proof on a real GPU (issue 25): the server doctor against the real driver and
nvidia-smi, CUDA_VISIBLE_DEVICES placement beside what torch itself does, real CUDA failures
fed to `explain`, readiness's GPU smoke test, and a kernel compiled on the online host (nvcc,
for sm_90) run on the card, its result checked against the same computation in torch.

    python3 bench/gpu_proof.py [--out DIR] [--python PYTHON] [--carried DIR]   (make gpu-proof)
    python3 bench/gpu_proof.py --prepare        on the online host: the carried cubins (nvcc)
    python3 bench/gpu_proof.py --save-fixtures REPORT.json [--fixtures DIR]

Needs nothing but a copy of the repository, the machine's python3 (with torch, for the torch
parts) and the few KB it carries (--carried, made by --prepare). Writes DIR/gpu-proof.json (every
finding and the raw outputs the doctor parsed) and DIR/gpu-proof.txt (a short summary); exit 0
when every part holds, 1 when one does not. On a machine without a GPU it says so in one line,
writes a "no GPU" report and exits 0. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from verl_bundle.airgap.doctor.gpus import APPS_QUERY, CSV, GPU_QUERY, parse_gpus  # noqa: E402
from verl_bundle.airgap.explain import engine  # noqa: E402

CARRIED = REPO / "bench" / "gpu_proof_carry"  # --prepare writes here (git-ignored)
FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
ARCH, OTHER_ARCH = "90", "80"  # the card's (H200) and one whose code it cannot run
TIMEOUT = 120  # seconds for any one command
# nvidia-smi's outputs kept raw (fixtures are made from them): the doctor's two queries first.
RAW = {
    "gpu-query": [GPU_QUERY, CSV],
    "apps-query": [APPS_QUERY, CSV],
    "list": ["-L"],
    "topo": ["topo", "-m"],
    "plain": [],
}
# The server program, run from the repository with the machine's python3 as the bundle runs it.
SERVER = "import sys; sys.path.insert(0, sys.argv.pop(1)); from verl_bundle.airgap.cli import main; sys.exit(main(sys.argv[1:]))"
KERNEL = r"""
extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
# Run by the machine's python3 (with torch): each placement case, in a fresh process.
TORCH_PLACEMENT = """
import json, torch
out = {"count": torch.cuda.device_count(), "available": torch.cuda.is_available()}
try:
    torch.zeros(1, device="cuda:0"); out["cuda0"] = "ok"
except Exception as exc:
    out["cuda0"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0])
print(json.dumps(out))
"""
# Real failures: the last line of each traceback, as a log would show it.
TORCH_FAILURES = """
import json, torch
out = {}
def fail(name, thunk):
    try:
        thunk(); out[name] = ""
    except Exception as exc:
        out[name] = "%s: %s" % (type(exc).__name__, exc)
total = torch.cuda.get_device_properties(0).total_memory
fail("cuda-oom", lambda: torch.empty(2 * total, dtype=torch.uint8, device="cuda:0"))
fail("invalid-ordinal", lambda: torch.zeros(1, device="cuda:%d" % torch.cuda.device_count()))
print(json.dumps(out))
"""
# The host-compiled kernels through the driver API (ctypes): the sm_90 one scales a vector,
# checked against torch; the other arch's cannot load here ("no kernel image ...").
DRIVER_KERNEL = """
import ctypes, json, sys, torch
cu = ctypes.CDLL("libcuda.so.1")
def err(rc):
    s = ctypes.c_char_p(); cu.cuGetErrorString(rc, ctypes.byref(s))
    return (s.value or b"").decode()
def ck(rc, what):
    if rc: raise RuntimeError("CUDA error: %s (%s %d)" % (err(rc), what, rc))
torch.zeros(1, device="cuda:0")  # torch makes the primary context current
mine, other = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
out = {}
mod = ctypes.c_void_p()
rc = cu.cuModuleLoadData(ctypes.byref(mod), other)
out["other_arch"] = "RuntimeError: CUDA error: %s" % err(rc) if rc else "loaded (unexpected)"
try:
    ck(cu.cuModuleLoadData(ctypes.byref(mod), mine), "cuModuleLoadData")
    fn = ctypes.c_void_p(); ck(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"scale"), "cuModuleGetFunction")
    n, a = 1000, 2.5
    x = torch.arange(n, dtype=torch.float32, device="cuda:0")
    ptr, fa, nn = ctypes.c_void_p(x.data_ptr()), ctypes.c_float(a), ctypes.c_int(n)
    args = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in (ptr, fa, nn)])
    ck(cu.cuLaunchKernel(fn, (n + 255) // 256, 1, 1, 256, 1, 1, 0, None, args, None), "cuLaunchKernel")
    ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    want = torch.arange(n, dtype=torch.float32, device="cuda:0") * a
    out["equal"] = bool(torch.equal(x, want)); out["sum"] = float(x.sum().item())
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


def run(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """A command's exit code, stdout and stderr, exactly as printed (never raises)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"argv": argv, "rc": None, "stdout": "", "stderr": str(exc)}
    return {"argv": argv, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def json_of(r: dict[str, Any]) -> Any:
    """`r`'s stdout as JSON (whole, else its last line: libraries print before it), or None."""
    for text in (r["stdout"], (r["stdout"].strip().splitlines() or [""])[-1]):
        try:
            return json.loads(text)
        except ValueError:
            continue
    return None


def last_line(r: dict[str, Any]) -> str:
    return str(((r["stderr"] or r["stdout"]).strip().splitlines() or ["no output"])[-1])


def environ(visible: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def doctor(python: str, visible: str | None = None) -> dict[str, Any]:
    """`doctor --require-gpu --json` (the stdlib server doctor) with CUDA_VISIBLE_DEVICES."""
    cmd = [python, "-I", "-B", "-c", SERVER, str(REPO), "doctor", "--require-gpu", "--json"]
    r = run(cmd, environ(visible))
    doc = json_of(r)
    if not isinstance(doc, dict):
        return {"rc": r["rc"], "error": last_line(r)}
    checks = doc.get("result", {}).get("checks", [])
    return {"rc": r["rc"], "verdict": doc.get("verdict"), "checks": checks}


def placement(python: str, uuid: str) -> list[dict[str, Any]]:
    cases: list[str | None] = [None, "0", "1", uuid, "0,0"]
    out = []
    for visible in cases:
        torch = run([python, "-c", TORCH_PLACEMENT], environ(visible))
        out.append(
            {
                "CUDA_VISIBLE_DEVICES": visible,
                "doctor": doctor(python, visible),
                "torch": json_of(torch) or {"error": last_line(torch)},
            }
        )
    return out


def explained(text: str, want: str) -> dict[str, Any]:
    ids = [f.id for f in engine.explain_text(text)] if text else []
    return {"text": text, "want": want, "matched": ids, "ok": want in ids}


def failures(python: str, carried: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The real error texts fed to explain, and the host-compiled kernel's run."""
    r = run([python, "-c", TORCH_FAILURES])
    texts = json_of(r) or {}
    found = [explained(str(texts.get(k, "")), k) for k in ("cuda-oom", "invalid-ordinal")]
    mine, other = carried / f"scale_sm{ARCH}.cubin", carried / f"scale_sm{OTHER_ARCH}.cubin"
    if not (mine.is_file() and other.is_file()):
        kernel = {"ok": False, "error": f"not carried: {mine} and {other} (run --prepare)"}
        found.append({"text": "", "want": "no-kernel-image", "matched": [], "ok": False})
        return found, kernel
    k = json_of(run([python, "-c", DRIVER_KERNEL, str(mine), str(other)])) or {}
    found.append(explained(str(k.get("other_arch", "")), "no-kernel-image"))
    kernel = {"ok": bool(k.get("equal")), **k, "cubin": mine.name}
    return found, kernel


def readiness_smoke(python: str) -> dict[str, Any]:
    """readiness's GPU smoke test (--require-gpu) in the machine's torch."""
    from verl_bundle.airgap.postinstall import judge, probing, readiness

    try:
        facts = probing.probe(python, readiness.Plan("", (), "", False, None), True, TIMEOUT)
    except readiness.ReadinessError as exc:
        return {"ok": False, "error": str(exc)}
    checks = [c.to_dict() for c in judge.check_gpu(True, False, facts)]
    return {"ok": all(c["status"] == "ok" for c in checks), "checks": checks, "facts": facts}


def prove(python: str, carried: Path) -> dict[str, Any]:
    report: dict[str, Any] = {
        "schema": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "python": python,
    }
    smi = shutil.which("nvidia-smi")
    raw = {name: run([smi, *args]) for name, args in RAW.items()} if smi else {}
    gpus = parse_gpus(raw["gpu-query"]["stdout"]) if smi and raw["gpu-query"]["rc"] == 0 else []
    if not gpus:
        why = "nvidia-smi not found" if smi is None else "nvidia-smi lists no GPU"
        report.update(gpu=False, reason=why, raw=raw)
        return report
    report.update(gpu=True, gpus=[dataclasses.asdict(g) for g in gpus], raw=raw)
    report["raw"]["libcuda"] = run(["sh", "-c", "ldconfig -p | grep libcuda"])
    report["doctor"] = doctor(python)
    report["placement"] = placement(python, gpus[0].uuid)
    report["explain"], report["kernel"] = failures(python, carried)
    report["readiness"] = readiness_smoke(python)
    return report


def verdicts(report: dict[str, Any]) -> dict[str, bool]:
    """Each part of the proof: held or not."""
    if not report.get("gpu"):
        return {}
    return {
        "doctor": report["doctor"].get("rc") == 0,
        "explain": all(e["ok"] for e in report["explain"]),
        "readiness": bool(report["readiness"].get("ok")),
        "kernel": bool(report["kernel"].get("ok")),
    }


def summary(report: dict[str, Any]) -> str:
    if not report.get("gpu"):
        return f"gpu-proof: no GPU here ({report['reason']}); nothing to prove on this machine"
    g = report["gpus"][0]
    lines = [
        f"gpu-proof {report['date']}: {len(report['gpus'])} x {g['name']}, driver {g['driver']}"
    ]
    for c in report["doctor"].get("checks", []):
        lines.append(f"  doctor {c.get('id')}: {c.get('status')} {c.get('summary')}")
    for p in report["placement"]:
        checks = {c.get("id"): c.get("status") for c in p["doctor"].get("checks", [])}
        lines.append(
            f"  CUDA_VISIBLE_DEVICES={p['CUDA_VISIBLE_DEVICES']}: doctor exit "
            f"{p['doctor'].get('rc')} {checks}; torch {p['torch']}"
        )
    for e in report["explain"]:
        lines.append(f"  explain {e['want']}: {'ok' if e['ok'] else 'MISS'} {e['matched']}")
    lines.append(f"  readiness --require-gpu: {'ok' if report['readiness'].get('ok') else 'FAIL'}")
    lines.append(f"  host-compiled kernel: {'ok' if report['kernel'].get('ok') else 'FAIL'}")
    held = verdicts(report)
    lines.append("gpu-proof: " + ("every part held" if all(held.values()) else f"not held: {held}"))
    return "\n".join(lines)


def prepare(carried: Path) -> int:
    """The carried cubins, compiled here by nvcc: the card's arch and one it cannot run."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("gpu-proof --prepare: no nvcc on PATH; nothing was made", file=sys.stderr)
        return 2
    carried.mkdir(parents=True, exist_ok=True)
    src = carried / "scale.cu"
    src.write_text(KERNEL)
    for arch in (ARCH, OTHER_ARCH):
        out = carried / f"scale_sm{arch}.cubin"
        r = run([nvcc, "-cubin", f"-arch=sm_{arch}", "-o", str(out), str(src)])
        if r["rc"] != 0:
            print(f"gpu-proof --prepare: nvcc failed: {r['stderr'].strip()}", file=sys.stderr)
            return 1
    print(carried)
    return 0


def save_fixtures(report_path: Path, dest: Path) -> int:
    """The raw nvidia-smi outputs of a report, byte for byte, as test fixtures (one file each,
    named for the query) with a note of where they came from."""
    report = json.loads(report_path.read_text())
    if not report.get("gpu"):
        print(f"gpu-proof: {report_path} is a no-GPU report; nothing to save", file=sys.stderr)
        return 2
    dest.mkdir(parents=True, exist_ok=True)
    for name, r in report["raw"].items():
        (dest / f"{name}.out").write_text(r["stdout"])
    g = report["gpus"][0]
    note = f"{report['date']} {report['host']}: {len(report['gpus'])} x {g['name']}, driver {g['driver']}\n"
    (dest / "SOURCE").write_text(note)
    print(dest)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-proof"))
    p.add_argument("--python", default=sys.executable, help="the machine's python3 with torch")
    p.add_argument("--carried", type=Path, default=CARRIED, help="the cubins --prepare made")
    p.add_argument("--prepare", action="store_true", help="compile the carried cubins (nvcc)")
    p.add_argument("--save-fixtures", type=Path, metavar="REPORT", help="a report's raw outputs")
    p.add_argument("--fixtures", type=Path, default=FIXTURES, help="where --save-fixtures writes")
    args = p.parse_args(argv)
    if args.prepare:
        return prepare(args.carried)
    if args.save_fixtures:
        return save_fixtures(args.save_fixtures, args.fixtures)
    report = prove(args.python, args.carried)
    report["held"] = verdicts(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-proof.json").write_text(json.dumps(report, indent=1) + "\n")
    text = summary(report)
    (args.out / "gpu-proof.txt").write_text(text + "\n")
    print(text)
    return 0 if all(report["held"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
