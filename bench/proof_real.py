"""How deep the proof goes on the real stacks, without a GPU (`make proof-real`).

For each kept rehearsal (`verl-bundle rehearse BUNDLE.tar --skip-phase flash-attn --keep DIR`:
DIR/venv and DIR/bundle/NAME), with an importable stand-in flash_attn in the venv (as a server
whose flash-attn phase ran has one; added here when missing, removed again afterwards), this
checkout's server program (a copy of verl_bundle/airgap alone, run isolated by the venv's
python as install.sh runs a bundle's lib/) is asked:
  plain       readiness: never an unqualified "ready"; the trainer's start named as not proven
  deep        readiness --deep: ready on the CPU side, naming the workers' model init, the
              vLLM engine (or servers) and one PPO step as not proven
  mini-batch  --deep --override actor_rollout_ref.actor.ppo_mini_batch_size=-1: not ready at
              the workers' construction (verl 0.3/0.4 assert it there), or named as checked
              only in the PPO step (verl 0.9)
  planted     --deep with `raise RuntimeError(...)` planted as the first statement of
              ActorRolloutRefWorker.init_model in the venv's verl (restored, byte for byte,
              right after): not ready (exit 5) at the workers' init_model, naming it
Each case's exit code, seconds and verdict line are reported, with whether it met its
expectation; exit 1 when one did not. Not part of `make test`: it needs the kept real stacks
(several GB each) and takes minutes per stack.

    python bench/proof_real.py --kept DIR [--kept DIR ...] [--cases plain,deep,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/proof_real.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verl_bundle.airgap.contract.manifest import load
from verl_bundle.bundle.entries import airgap_entries
from verl_bundle.bundle.server import command

CASES = ("plain", "deep", "mini-batch", "planted")
PLANTED = 'raise RuntimeError("planted by bench/proof_real.py at the start of init_model")'
# The worker file whose ActorRolloutRefWorker.init_model is planted, per verl release family.
WORKER_FILE = {"0.3": "workers/fsdp_workers.py", "0.9": "workers/engine_workers.py"}
MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size=-1"


@dataclass(frozen=True)
class Case:
    stack: str
    verl: str
    case: str
    code: int
    seconds: float
    state: str
    line: str
    met: bool
    why: str


def server_lib(where: Path) -> Path:
    """A copy of this checkout's server program alone (lib/verl_bundle/airgap), as the build
    writes it into a bundle."""
    for entry in airgap_entries():
        dest = where / entry.arcname
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(entry.data or b"")
    return where


def family(verl: str) -> str:
    major, minor = (int(p) for p in verl.split(".")[:2])
    return "0.9" if (major, minor) >= (0, 9) else "0.3"


def site_of(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def add_standin(site: Path, version: str) -> list[Path]:
    """A stand-in flash_attn (package and dist-info, so transformers maps the module to the
    distribution) when the venv has none; the paths it made (to remove afterwards)."""
    if (site / "flash_attn").exists():
        return []
    pkg, info = site / "flash_attn", site / f"flash_attn-{version}.dist-info"
    pkg.mkdir()
    info.mkdir()
    (pkg / "__init__.py").write_text(
        f'"""Stand-in flash_attn (bench/proof_real.py): importable, no kernels."""\n'
        f"__version__ = {version!r}\n"
    )
    (pkg / "bert_padding.py").write_text(
        "def _no(*a, **k):\n    raise RuntimeError('stand-in flash_attn: no kernels')\n\n\n"
        "index_first_axis = pad_input = unpad_input = _no\n"
        "from einops import rearrange  # noqa: E402,F401\n"
    )
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {version}\n")
    (info / "top_level.txt").write_text("flash_attn\n")
    (info / "INSTALLER").write_text("proof_real\n")
    (info / "RECORD").write_text("")
    return [pkg, info]


def plant(site: Path, verl: str) -> tuple[Path, bytes, tuple[int, int]]:
    """The first statement of ActorRolloutRefWorker.init_model made a raise; (file, its bytes,
    its times) to restore it."""
    path = site / "verl" / WORKER_FILE[family(verl)]
    original = path.read_bytes()
    st = path.stat()
    lines = original.decode().splitlines(keepends=True)
    in_class = False
    for i, line in enumerate(lines):
        if line.startswith("class "):
            in_class = line.startswith("class ActorRolloutRefWorker(")
        if in_class and line.strip().startswith("def init_model(self"):
            indent = " " * (len(line) - len(line.lstrip()) + 4)
            lines.insert(i + 1, f"{indent}{PLANTED}\n")
            break
    else:
        raise SystemExit(f"{path}: no ActorRolloutRefWorker.init_model to plant in")
    tmp = path.with_name(path.name + ".proof-real")
    tmp.write_text("".join(lines))
    os.replace(tmp, path)
    return path, original, (st.st_atime_ns, st.st_mtime_ns)


def restore(path: Path, original: bytes, times: tuple[int, int]) -> None:
    tmp = path.with_name(path.name + ".proof-real")
    tmp.write_bytes(original)
    os.replace(tmp, path)
    os.utime(path, ns=times)


def readiness(python: Path, lib: Path, bundle: Path, work: Path, *extra: str) -> dict[str, Any]:
    """readiness (the checkout's server program) by the venv's python; its envelope, code, s."""
    argv = ["readiness", "--bundle", str(bundle), "--json", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "RAY_"))}
    env["HOME"] = str(work)  # Ray and the caches write nothing of this user's
    started = time.monotonic()
    proc = subprocess.run(
        command(str(python), lib, argv), capture_output=True, text=True, env=env, cwd=work
    )
    seconds = time.monotonic() - started
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        doc = {"verdict": {"state": "none", "line": f"no result: {tail}"}, "result": {}}
    return {"doc": doc, "code": proc.returncode, "seconds": seconds}


def judged(stack: str, verl: str, case: str, got: dict[str, Any]) -> Case:
    doc, code = got["doc"], got["code"]
    v = doc.get("verdict") or {}
    state, line = str(v.get("state", "")), str(v.get("line", ""))
    checks = {c["id"]: c for c in (doc.get("result") or {}).get("checks", [])}
    failed = [k for k, c in checks.items() if c["status"] == "fail"]
    met, why = False, ""
    if case == "plain":
        met = code == 0 and state == "ready-cpu" and "the trainer's start" in line
        why = "ready-cpu naming the trainer's start"
    elif case == "deep":
        met = code == 0 and state == "ready-cpu" and "worker model init from" in line
        met = met and checks.get("dryrun:worker-init", {}).get("status") == "ok"
        met = met and "one PPO step" in line
        why = "ready-cpu; worker-init ok; the workers' model init and one PPO step named"
    elif case == "mini-batch" and family(verl) == "0.3":
        met = code == 5 and failed == ["dryrun:worker-init"] and "ppo_mini_batch_size" in line
        why = "not ready at verl's workers' __init__ (its assert)"
    elif case == "mini-batch":
        met = code == 0 and "actor_rollout_ref.actor.ppo_mini_batch_size" in line
        why = "named: verl 0.9 checks it only in the PPO step"
    elif case == "planted":
        met = code == 5 and failed == ["dryrun:worker-model"] and "RuntimeError: planted" in line
        why = "not ready at the workers' init_model, naming the RuntimeError"
    return Case(stack, verl, case, code, round(got["seconds"], 1), state, line, met, why)


def prove(kept: Path, cases: tuple[str, ...], work: Path) -> list[Case]:
    bundle = next((kept / "bundle").iterdir())
    python = kept / "venv" / "bin" / "python"
    manifest = load(str(bundle))
    verl = next(f.version for f in manifest.installed if f.name == "verl")
    flash = next((f.version for f in manifest.files if f.name == "flash-attn"), "2.8.3")
    site = site_of(python)
    lib = server_lib(work / "server")
    made = add_standin(site, flash)
    out = []
    try:
        for case in cases:
            print(f"  {kept.name} (verl {verl}): {case} ...", file=sys.stderr, flush=True)
            extra: tuple[str, ...] = () if case == "plain" else ("--deep",)
            if case == "mini-batch":
                extra += ("--override", MINI_BATCH)
            if case == "planted":
                path, original, times = plant(site, verl)
                try:
                    got = readiness(python, lib, bundle, work, *extra)
                finally:
                    restore(path, original, times)
            else:
                got = readiness(python, lib, bundle, work, *extra)
            out.append(judged(kept.name, verl, case, got))
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
    return out


def render(found: list[Case]) -> str:
    lines = ["| stack | verl | case | exit | s | met | verdict |", "|---|---|---|---|---|---|---|"]
    for c in found:
        mark = "yes" if c.met else f"**no** (wanted: {c.why})"
        lines.append(
            f"| {c.stack} | {c.verl} | {c.case} | {c.code} | {c.seconds:.0f} | {mark} | {c.line} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kept", action="append", type=Path, required=True, metavar="DIR")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cases = tuple(c for c in args.cases.split(",") if c)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"--cases {unknown[0]}: one of {', '.join(CASES)}")
    found: list[Case] = []
    for kept in args.kept:
        if not (kept / "venv" / "bin" / "python").exists() or not (kept / "bundle").is_dir():
            ap.error(f"--kept {kept}: not a kept rehearsal (DIR/venv and DIR/bundle/NAME)")
        with tempfile.TemporaryDirectory(prefix="vbp-") as tmp:
            found += prove(kept, cases, Path(tmp))
    print(json.dumps([asdict(c) for c in found], indent=1) if args.json else render(found))
    return 0 if all(c.met for c in found) else 1


if __name__ == "__main__":
    sys.exit(main())
