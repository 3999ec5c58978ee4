"""The trust root on a real tarball (the cu130 bundle): the gate with the OS's tools only
(`ssh-keygen -Y verify` of the signed NAME.tar.sha256, then `sha256sum -c`) and the installed
verifier's check of the same tarball, each timed. The tarball is read where it lies (linked into
--work, never copied: 4.6 GB); its .sha256 is signed there with a key made for the run. Not
part of `make test`; prints the figures docs/crossing-the-gap.md records.

    .venv/bin/python bench/trust_real.py [--tarball PATH] [--work DIR] [--allowed-signers FILE]

The verifier is laid out from this checkout's code (what `setup` copies from a bundle's lib/;
setup itself is tested by tests/test_trust.py). A tarball built without --sign carries no
manifest.json.sig, so the verifier reads and checks all of it and then refuses it at that
step (exit 3), which is the whole cost of its path. For a tarball built with --sign, give its
approver's allowed-signers file: its own .sha256.sig is checked instead of a scratch one, and
the verifier's path runs to its OK.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARBALL = Path("/work/real/bundles/verl-bundle-cu130-cp310-manylinux_2_31_x86_64.tar")
PRINCIPAL = "release@example.org"


def timed(cmd: list[str], **kw: Any) -> dict[str, Any]:
    """Wall and CPU seconds of one command, its exit code and its last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    said = (proc.stdout + proc.stderr).strip().splitlines()
    return {
        "command": " ".join(cmd),
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "user_s": round(after.ru_utime - before.ru_utime, 1),
        "sys_s": round(after.ru_stime - before.ru_stime, 1),
        "said": said[-1][-300:] if said else "",
    }


def signed_copy(tarball: Path, work: Path) -> tuple[Path, Path]:
    """NAME.tar linked into `work`, its .sha256 copied and signed with a new key; the link and
    the allowed-signers file."""
    key = work / "key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", PRINCIPAL, "-f", str(key)],
        check=True,
    )
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    signers = work / "allowed_signers"
    signers.write_text(f'{PRINCIPAL} namespaces="verl-bundle" {kind} {blob}\n')
    link = work / tarball.name
    link.symlink_to(tarball)
    shutil.copy(tarball.with_name(tarball.name + ".sha256"), work)
    sums = work / (tarball.name + ".sha256")
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-f", str(key), "-n", "verl-bundle", str(sums)],
        check=True,
    )
    return link, signers


def signed_as_built(tarball: Path, work: Path, signers: Path) -> tuple[Path, Path, str]:
    """NAME.tar, its .sha256 and .sha256.sig linked into `work` with the approver's
    allowed-signers file; the link, that file and the principal that signed the list."""
    for name in (tarball.name, f"{tarball.name}.sha256", f"{tarball.name}.sha256.sig"):
        (work / name).symlink_to(tarball.with_name(name))
    shutil.copy(signers, work / "allowed_signers")
    found = subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "find-principals",
            "-f",
            "allowed_signers",
            "-s",
            f"{tarball.name}.sha256.sig",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    return work / tarball.name, work / "allowed_signers", found.stdout.split()[0]


def verifier(work: Path, signers: Path, python: str) -> Path:
    """The trust root laid out from this checkout's server program; its command."""
    from verl_bundle.airgap.trust.release import Release
    from verl_bundle.airgap.trust.store import Store

    store = Store(str(work / "root"))
    store.create(signers.read_bytes())
    base = ROOT / "verl_bundle"
    files = {"verl_bundle/__init__.py": (base / "__init__.py").read_bytes()}
    for p in sorted((base / "airgap").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            files[p.relative_to(ROOT).as_posix()] = p.read_bytes()
    origin = Release("this checkout", 0, "", "")
    store.install_lib(files)
    store.write_origin(origin, "", python)
    store.write_program(python, origin)
    return Path(store.program)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tarball", type=Path, default=TARBALL)
    ap.add_argument("--work", type=Path, default=None, help="where the small files go")
    ap.add_argument(
        "--allowed-signers",
        type=Path,
        default=None,
        help="the approver's file, for a tarball built with --sign (its own .sha256.sig is used)",
    )
    args = ap.parse_args()
    tarball = args.tarball.resolve()
    work = Path(tempfile.mkdtemp(prefix="trust-real-", dir=args.work))
    sys.path.insert(0, str(ROOT))
    from verl_bundle.interpreter import find_python

    python = find_python("3.8") or sys.executable  # the server program's floor
    try:
        principal = PRINCIPAL
        if args.allowed_signers is None:
            link, signers = signed_copy(tarball, work)
        else:
            link, signers, principal = signed_as_built(
                tarball, work, args.allowed_signers.resolve()
            )
        sums, sig = f"{link.name}.sha256", f"{link.name}.sha256.sig"
        figures: dict[str, Any] = {
            "tarball": str(tarball),
            "bytes": tarball.stat().st_size,
            "load_before": os.getloadavg(),
        }
        check = ["ssh-keygen", "-Y", "verify", "-f", "allowed_signers", "-I", principal]
        with open(work / sums, "rb") as listing:
            figures["gate_signature"] = timed(
                [*check, "-n", "verl-bundle", "-s", sig], cwd=work, stdin=listing
            )
        figures["gate_sha256sum"] = timed(["sha256sum", "-c", sums], cwd=work)
        program = verifier(work, signers, python)
        figures["verifier_python"] = python
        figures["verifier"] = timed([str(program), str(link)], cwd=work)
        figures["load_after"] = os.getloadavg()
        print(json.dumps(figures, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
