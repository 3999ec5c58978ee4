"""`make e2e-real`: the cu121 stack for real, from the real index (about 3 GB).

Builds cu121 for cp310 on this host (whatever its Python), rehearses the bundle with Python 3.10
and the network cut, then imports torch, vllm, verl and transformers from the resulting venv,
still without network. Prints what the README records: packages, bytes, build and install times.
Not part of `make test`: it needs the internet and several GB of disk.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = (
    "import sys, torch, vllm, verl, transformers; "
    "print('python', '%d.%d' % sys.version_info[:2]); "
    "print('torch', torch.__version__, 'cuda', torch.version.cuda); "
    "print('vllm', vllm.__version__); print('verl', verl.__version__); "
    "print('transformers', transformers.__version__)"
)


def tool() -> list[str]:
    return [sys.executable, "-m", "verl_bundle"]


def run_json(args: list[str]) -> tuple[dict[str, Any], float, int]:
    started = time.monotonic()
    proc = subprocess.run([*tool(), *args, "--json"], capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    doc: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return doc, elapsed, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/verl-bundle-e2e-real"))
    parser.add_argument("--cuda", default="12.1")
    parser.add_argument("--python", default="3.10")
    args = parser.parse_args()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    print(
        f"e2e-real {dt.date.today()}: build --cuda {args.cuda} --python {args.python}", flush=True
    )
    built, build_s, code = run_json(
        ["build", "--cuda", args.cuda, "--python", args.python, "-o", str(args.workdir / "out")]
    )
    if code != 0:
        print(f"build failed (exit {code})")
        return 1
    print(
        f"build: {built['packages']} packages, bundle {built['size']:,} bytes, "
        f"downloaded {built['downloaded']['files']} files ({built['downloaded']['bytes']:,} bytes), "
        f"{built['cached_files']} from the cache, lock {built['lock']}, {build_s:.1f} s",
        flush=True,
    )
    rehearsal, rehearse_s, code = run_json(
        ["rehearse", built["bundle"], "--keep", str(args.workdir / "rehearsal")]
    )
    for step in rehearsal.get("steps", []):
        print(
            f"  {step['status']:<13} {step['name']:<22} {step['seconds']:8.1f} s  {step['detail']}"
        )
    print(f"rehearse: {'passed' if code == 0 else 'FAILED'} in {rehearse_s:.1f} s", flush=True)
    if code != 0:
        print("\n".join(rehearsal.get("log_tail", [])))
        return 1
    venv_python = args.workdir / "rehearsal" / "venv" / "bin" / "python"
    proc = subprocess.run(
        ["unshare", "-n", str(venv_python), "-c", IMPORTS],
        capture_output=True,
        text=True,
        check=False,
    )
    print("imports with no network:")
    print("  " + (proc.stdout.strip() or proc.stderr.strip()[-2000:]).replace("\n", "\n  "))
    installed = sum(
        s["seconds"] for s in rehearsal["steps"] if s["name"].startswith(("phase ", "venv"))
    )
    print(
        f"summary: {built['packages']} packages, {built['size'] / 1e9:.2f} GB bundle, "
        f"build {build_s:.0f} s, install (venv + phases) {installed:.0f} s, "
        f"imports {'ok' if proc.returncode == 0 else 'FAILED'}"
    )
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
