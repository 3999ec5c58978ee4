"""`make e2e-real`: the default-index stacks for real, from the real index (several GB each).

For each profile (cu121, cu124, cu130 by default) builds the bundle for cp310 on this host
(whatever its Python), rehearses it with Python 3.10 and the network cut, imports torch, vllm,
verl and transformers from the resulting venv, then runs readiness there (still without network):
whether verl's trainer can start, and if not, which module fails and why. Prints what docs/benchmarks.md
records: packages, bytes, build and install times, and one readiness verdict per profile.
Not part of `make test`: it needs the internet and several GB of disk.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOT_READY = 5  # the verdict's exit code: installed, not ready to train
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
    # Every --json output is an envelope {"schema", "command", "ok", "result"}.
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    result: dict[str, Any] = doc.get("result", {})
    return result, elapsed, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/verl-bundle-e2e-real"))
    parser.add_argument(
        "--profiles",
        default="cu121,cu124,cu130",
        help="comma-separated built-in profiles to build, rehearse and check for readiness",
    )
    parser.add_argument("--python", default="3.10")
    parser.add_argument(
        "--compare-pip",
        action="store_true",
        help="also time pip on the same files: `pip download --no-deps` of the locked URLs, and "
        "`pip install --no-index --find-links` of the bundle's wheels into a fresh venv; and the "
        "strongest baseline, `uv venv` + `uv pip install --offline` of the same wheels",
    )
    parser.add_argument(
        "--compile",
        choices=("auto", "always", "never"),
        default="auto",
        help="passed to build: `never` leaves flash-attn to the server, where a host compile "
        "would take hours (rehearse skips it where this host cannot build it; add --skip-phase "
        "flash-attn where it could)",
    )
    parser.add_argument(
        "--cuda-archs",
        default=None,
        metavar="LIST",
        help="passed to build (e.g. 9.0): the GPU architectures a host compile is for, part of "
        "its cache key (`make compile-real` compiles for 9.0)",
    )
    parser.add_argument(
        "--skip-phase",
        action="append",
        default=[],
        metavar="NAME",
        help="passed to rehearse (repeatable): a phase left out, e.g. flash-attn when its build "
        "is left to the server and this host's nvcc fits but the build would take hours; "
        "readiness then reports it as missing",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep each profile's bundle and rehearsal (disk!)"
    )
    args = parser.parse_args()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    verdicts: dict[str, str] = {}
    failed = False
    for i, name in enumerate(p.strip() for p in args.profiles.split(",") if p.strip()):
        code, verdict = one_profile(
            name,
            args.python,
            args.workdir / name,
            args.compare_pip and i == 0,
            args.compile,
            tuple(args.skip_phase),
            args.cuda_archs,
        )
        verdicts[name] = verdict
        failed = failed or code != 0
        if not args.keep:  # several GB each: the next profile needs the disk
            shutil.rmtree(args.workdir / name, ignore_errors=True)
    print("readiness per profile (rehearsed here: no GPU, no nvcc):")
    for name, verdict in verdicts.items():
        print(f"  {name:<8} {verdict}")
    return 1 if failed else 0


def one_profile(
    name: str,
    python: str,
    workdir: Path,
    compare: bool,
    compile_mode: str = "auto",
    skip: tuple[str, ...] = (),
    cuda_archs: str | None = None,
) -> tuple[int, str]:
    """Build, rehearse, import and check readiness of one profile; (exit code, verdict)."""
    workdir.mkdir(parents=True)
    print(f"e2e-real {dt.date.today()}: build --profile {name} --python {python}", flush=True)
    built, build_s, code = run_json(
        [
            "build",
            "--profile",
            name,
            "--python",
            python,
            "-o",
            str(workdir / "out"),
            "--compile",
            compile_mode,
            *(["--cuda-archs", cuda_archs] if cuda_archs else []),
        ]
    )
    if code != 0:
        print(f"build failed (exit {code})")
        return 1, f"not built (build exit {code})"
    print(
        f"build: {built['packages']} packages, bundle {built['size']:,} bytes, "
        f"downloaded {built['downloaded']['files']} files ({built['downloaded']['bytes']:,} bytes), "
        f"{built['cached_files']} from the cache, lock {built['lock']}, {build_s:.1f} s",
        flush=True,
    )
    for line in built.get("compiled", []):  # "flash-attn compiled here (...)" or "left to ..."
        print(f"  {line}", flush=True)
    skips = [arg for phase in skip for arg in ("--skip-phase", phase)]
    rehearsal, rehearse_s, code = run_json(
        ["rehearse", built["bundle"], "--keep", str(workdir / "rehearsal"), *skips]
    )
    for step in rehearsal.get("steps", []):
        print(
            f"  {step['status']:<13} {step['name']:<22} {step['seconds']:8.1f} s  {step['detail']}"
        )
    # 5: installed offline, not ready to train (e.g. flash-attn left out): the venv stands and
    # is still imported and checked below; anything else means it did not install.
    said = {0: "passed", NOT_READY: "installed, not ready to train"}.get(code, "FAILED")
    print(f"rehearse: {said} in {rehearse_s:.1f} s", flush=True)
    if code not in (0, NOT_READY):
        print("\n".join(rehearsal.get("log_tail", [])))
        return 1, f"not installed (rehearse exit {code})"
    venv_python = workdir / "rehearsal" / "venv" / "bin" / "python"
    proc = subprocess.run(
        ["unshare", "-n", str(venv_python), "-c", IMPORTS],
        capture_output=True,
        text=True,
        check=False,
    )
    print("imports with no network:")
    print("  " + (proc.stdout.strip() or proc.stderr.strip()[-2000:]).replace("\n", "\n  "))
    verdict = readiness(venv_python, next((workdir / "rehearsal" / "bundle").iterdir()))
    print(f"readiness: {verdict}", flush=True)
    if compare:
        compare_pip(workdir, Path(built["bundle"]), build_s, rehearsal)
    installed = sum(
        s["seconds"] for s in rehearsal["steps"] if s["name"].startswith(("phase ", "venv"))
    )
    print(
        f"summary: {built['packages']} packages, {built['size'] / 1e9:.2f} GB bundle, "
        f"build {build_s:.0f} s, install (venv + phases) {installed:.0f} s, "
        f"imports {'ok' if proc.returncode == 0 else 'FAILED'}"
    )
    return (0 if proc.returncode == 0 else 1), verdict


def readiness(venv_python: Path, bundle: Path) -> str:
    """The bundle's own readiness check, run by the rehearsed venv's python with no network.
    Skipped phases (a source build this host cannot do) are left out, as post-install does."""
    env = dict(os.environ, PYTHONPATH=str(bundle / "lib"))
    proc = subprocess.run(
        [
            *("unshare", "-n", str(venv_python), "-m", "verl_bundle.airgap", "readiness"),
            *("--bundle", str(bundle), "--json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return f"readiness did not run (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    result = doc["result"]
    for c in result["checks"]:
        print(f"  {c['status']:<8} {c['id']}: {c['summary']}")
    failed = next((c for c in result["checks"] if c["status"] == "fail"), None)
    cause = f" (cause: {failed['detail']})" if failed and failed.get("detail") else ""
    return str(doc.get("verdict", {}).get("line", "no verdict")) + cause


def compare_pip(workdir: Path, tarball: Path, build_s: float, rehearsal: dict[str, Any]) -> None:
    """The second row of the benchmarks: pip on the same files from the same (real) index."""
    bundle = next((workdir / "rehearsal" / "bundle").iterdir())
    manifest = json.loads((bundle / "manifest.json").read_text())
    # pip cannot even download flash-attn's sdist: it builds its metadata, and setup.py imports
    # torch. So pip gets the wheels only (the same files otherwise).
    urls = [f["url"] for f in manifest["files"] if "built_from" not in f and f["kind"] != "sdist"]
    # No pip configuration, but this machine's CA bundle (a TLS-inspecting proxy may need it).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = "/dev/null"
    ca = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
    if ca:
        env["PIP_CERT"] = ca
    from verl_bundle.profile.target import Target, parse_python

    target = Target(parse_python(manifest["target"]["python"]), manifest["target"]["platform"])
    platforms = [arg for tag in target.platform_tags for arg in ("--platform", tag)]
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "-q",
            "--only-binary=:all:",
            *platforms,
            "--python-version",
            manifest["target"]["python"],
            "--implementation",
            "cp",
            "--abi",
            manifest["target"]["python_tag"],
            "-d",
            str(workdir / "pip-download"),
            *urls,
        ],
        check=True,
        env=env,
    )
    pip_download_s = time.monotonic() - started
    python = shutil.which(f"python{manifest['target']['python']}") or ""
    from verl_bundle.interpreter import find_python

    python = find_python(manifest["target"]["python"]) or python
    reqs = [bundle / p["requirements"] for p in manifest["phases"] if not p["source_builds"]]
    started = time.monotonic()
    subprocess.run([python, "-m", "venv", str(workdir / "pip-venv")], check=True)
    cmd = [
        str(workdir / "pip-venv" / "bin" / "pip"),
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--find-links",
        str(bundle / "wheels"),
    ]
    for req in reqs:
        cmd += ["-r", str(req)]
    subprocess.run(cmd, check=True, env=env)
    pip_install_s = time.monotonic() - started
    # The strongest baseline: a venv made by uv (no pip) and `uv pip install --offline` of the
    # same wheels from the unpacked bundle, with an empty cache (install.sh starts with none).
    uv = str(Path(sys.executable).parent / "uv")
    uv_env = dict(env, UV_CACHE_DIR=str(workdir / "uv-cache"), UV_NO_CONFIG="1")
    uv_venv = workdir / "uv-venv"
    started = time.monotonic()
    subprocess.run(
        [uv, "venv", "--quiet", "--python", python, str(uv_venv)], check=True, env=uv_env
    )
    uv_cmd = [uv, "pip", "install", "--quiet", "--offline", "--no-index", "--no-deps"]
    uv_cmd += ["--find-links", str(bundle / "wheels"), "--python", str(uv_venv / "bin" / "python")]
    for req in reqs:
        uv_cmd += ["-r", str(req)]
    subprocess.run(uv_cmd, check=True, env=uv_env)
    uv_install_s = time.monotonic() - started
    steps = {s["name"]: s["seconds"] for s in rehearsal["steps"]}
    ours = sum(
        v
        for k, v in steps.items()
        if k in ("verify", "venv", "post-install checks") or k.startswith("phase ")
    )
    installing = sum(v for k, v in steps.items() if k == "venv" or k.startswith("phase "))
    # What the checks cost on their own: one cold import of the stack in the uv venv (no .pyc
    # there either: uv, like install.sh, does not compile bytecode).
    started = time.monotonic()
    subprocess.run(
        ["unshare", "-n", str(uv_venv / "bin" / "python"), "-c", IMPORTS],
        capture_output=True,
        check=False,
        env=dict(env, PYTHONDONTWRITEBYTECODE="1"),
    )
    import_s = time.monotonic() - started
    print(
        f"real index, same files: build {build_s:.1f} s vs pip download {pip_download_s:.1f} s "
        f"({build_s / pip_download_s:.2f}x); install.sh (verify, venv, phases, checks) {ours:.1f} s "
        f"vs venv + pip install {pip_install_s:.1f} s ({ours / pip_install_s:.2f}x) and vs uv venv "
        f"+ uv pip install --offline {uv_install_s:.1f} s ({ours / uv_install_s:.2f}x); "
        f"install.sh's venv and phases alone {installing:.1f} s ({installing / uv_install_s:.2f}x "
        f"uv); one cold import of torch, vllm, verl and transformers in the uv venv {import_s:.1f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
