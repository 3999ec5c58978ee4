"""One read-only image of the installed environment, for a shared filesystem (`install.sh
--image FILE`).

HPC sites serve a Python environment to many nodes as one squashfs image on the parallel
filesystem rather than a venv per node: a venv on Lustre or GPFS makes every import a
metadata storm, one image is a single file the nodes read in large blocks. The install runs
once, into the prefix the nodes will mount the image at (a venv holds its own absolute path);
then every module is compiled to bytecode (all cores: nothing can be written once the image
is mounted read-only) and the prefix is packed with mksquashfs (Debian's squashfs-tools) into
FILE, written in a private directory beside it and renamed, with FILE.sha256 beside it (a
link or directory planted at either name is refused before the install starts). Nodes mount it at
the same path, read-only: `squashfuse FILE PREFIX` (no root) or `mount -t squashfs -o ro,loop
FILE PREFIX`. The doctor then reports the mount (doctor/node.py `image`) and the environment's
fingerprint from its files, the same on every node that mounts the same image.
Standard library only, Python 3.8+."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from verl_bundle.airgap.confined import Beside, UnsafePathError, check_output, open_dir
from verl_bundle.airgap.errors import ServerNotReadyError, StepError, UsageError

MKSQUASHFS = "mksquashfs"
TIMEOUT = 3 * 3600.0


@dataclass(frozen=True)
class Packed:
    path: str
    sha256: str
    size: int
    compiled_seconds: float
    packed_seconds: float


def check_target(image: str, prefix: str) -> str:
    """FILE as an absolute path, refused (one line, before anything is installed) when it
    would sit inside the prefix it packs, its directory does not exist, or something other
    than a regular file is there already under FILE or FILE.sha256 (a directory, a link: the
    image is renamed into place, never written through one); mksquashfs must be installed."""
    path = os.path.abspath(image)
    real_prefix = os.path.realpath(prefix)
    if os.path.realpath(path).startswith(real_prefix.rstrip(os.sep) + os.sep):
        raise UsageError(
            f"--image {image}: inside the prefix {prefix} it packs; write it elsewhere"
        )
    if os.path.isdir(path) and not os.path.islink(path):
        raise UsageError(
            f"--image {image}: a directory; give the image's file name "
            f"(e.g. {os.path.join(image, 'verl.sqfs')})"
        )
    if not os.path.isdir(os.path.dirname(path)):
        raise UsageError(f"--image {image}: no directory {os.path.dirname(path)}")
    try:
        os.close(open_dir(os.path.dirname(path)))  # what Beside opens at the end, checked now
    except UnsafePathError as exc:
        raise UsageError(f"--image {image}: {exc.message}") from None
    for target in (path, path + ".sha256"):
        try:
            check_output(target, "--image")
        except UnsafePathError:
            what = "a symbolic link" if os.path.islink(target) else "not a regular file"
            raise UsageError(
                f"--image {image}: {target} is {what}; the image is renamed into place, "
                "never written through one: remove it or give another FILE"
            ) from None
    if shutil.which(MKSQUASHFS) is None:
        raise ServerNotReadyError(
            "--image needs mksquashfs: install squashfs-tools (apt install squashfs-tools, "
            "dnf install squashfs-tools) from the OS mirror, then run ./install.sh --image again"
        )
    return path


def compile_bytecode(python: str, prefix: str) -> float:
    """Compile every module under the prefix's site directories with all cores (compileall
    -j 0); a file that does not compile (a Python 2 test data file) is left as it is."""
    started = time.monotonic()
    code = (
        "import compileall, sys, sysconfig; "
        "paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ('purelib', 'platlib')); "
        "[compileall.compile_dir(p, quiet=2, workers=0) for p in paths]"
    )
    try:
        subprocess.run(
            [python, "-I", "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StepError(f"compiling the bytecode with {python} failed: {exc}") from None
    return time.monotonic() - started


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack(prefix: str, image: str, python: str) -> Packed:
    """Compile, pack `prefix` into `image` (whole or absent), write `image`.sha256. Both are
    written in a private directory made beside `image` (confined.Beside: mksquashfs and the
    sum file only ever see a path inside it) and renamed into place when whole."""
    compiled = compile_bytecode(python, prefix)
    try:
        beside = Beside(image)
    except OSError as exc:
        raise StepError(f"--image {image}: cannot write beside it: {exc.strerror or exc}") from None
    with beside:
        started = time.monotonic()
        packed = beside.path("image")
        # gzip (mksquashfs' default): every squashfuse and kernel reads it; all cores pack.
        argv = [MKSQUASHFS, prefix, packed, "-noappend", "-all-root", "-quiet"]
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StepError(f"mksquashfs {prefix} failed: {exc}") from None
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise StepError(f"mksquashfs {prefix} {image} failed: {why}")
        digest = _sha256(packed)
        base = os.path.basename(image)
        beside.work.write_atomic("sha256", f"{digest}  {base}\n")
        beside.commit("image", base)
        beside.commit("sha256", base + ".sha256")
    return Packed(image, digest, os.path.getsize(image), compiled, time.monotonic() - started)


def interpreter_outside(prefix: str) -> str | None:
    """The interpreter the venv at `prefix` runs, when it lies outside the prefix (so outside
    the image: each node needs it at that path); None when it is inside (--python bundled)."""
    real = os.path.realpath(os.path.join(prefix, "bin", "python"))
    inside = real.startswith(os.path.realpath(prefix).rstrip(os.sep) + os.sep)
    return None if inside else real
