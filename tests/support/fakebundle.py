"""A tiny stand-in bundle for the cluster engines' own logic (what the Slurm script and the
playbook do around an install, in seconds): an install.sh that records its arguments and
writes the prefix's fingerprint, a doctor that prints a doctor --json document, a VERSION and
SHA256SUMS, as a tarball under the bundle's name. Real executables, not mocks; the whole-stack
installs use the built test bundle instead."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

INSTALL = """#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
prefix=""
given="$*"
while [ $# -gt 0 ]; do
  case "$1" in --prefix) prefix=$2; shift ;; esac
  shift
done
if [ -e "$prefix.fail" ]; then echo "fake install: failing as asked" >&2; exit 3; fi
mkdir -p "$prefix/.verl-bundle" || exit 1
cp "$here/VERSION" "$prefix/VERSION"
sha256sum < "$prefix/VERSION" | cut -c1-64 > "$prefix/.verl-bundle/fingerprint"
echo "$here" >> "$prefix/.verl-bundle/installed-from"
echo "$given" >> "$prefix/.verl-bundle/install-args"
echo "fake install: $(cat "$here/VERSION") into $prefix"
"""
# The environment's live fingerprint is the sha256 of PREFIX/VERSION (what is installed there
# now), the installed one what the install recorded; a check per run, as a doctor reports them.
DOCTOR = """#!/bin/sh
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in --prefix) prefix=$2; shift ;; esac
  shift
done
text() { if [ -n "$1" ]; then printf '"%s"' "$1"; else printf null; fi; }
live=""
[ ! -f "$prefix/VERSION" ] || live=$(sha256sum < "$prefix/VERSION" | cut -c1-64)
installed=$(cat "$prefix/.verl-bundle/fingerprint" 2> /dev/null)
printf '{"schema": 1, "command": "doctor", "result": {"ok": true, "checks": [{"id": "os", \
"status": "ok"}], "host": {"hostname": "%s", "python": "3.10.12", "fingerprint": %s, \
"installed_fingerprint": %s}}}\\n' "$(hostname)" "$(text "$live")" "$(text "$installed")"
"""


def fingerprint_of(version: str) -> str:
    """The fingerprint the fake install records for `version` (and the doctor reports)."""
    return hashlib.sha256(f"{version}\n".encode()).hexdigest()


def fake_bundle(directory: Path, version: str = "v1", name: str = "verl-bundle-fake") -> Path:
    """directory/NAME.tar holding NAME/{SHA256SUMS, install.sh, doctor, VERSION} (SHA256SUMS
    first, as a built bundle has it); rewritten in place for another `version`."""
    root = directory / name
    root.mkdir(parents=True, exist_ok=True)
    files = {"install.sh": INSTALL, "doctor": DOCTOR, "VERSION": version + "\n"}
    for file, text in files.items():
        (root / file).write_text(text)
        (root / file).chmod(0o755)
    sums = "".join(
        f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n" for f in sorted(files)
    )
    (root / "SHA256SUMS").write_text(sums)
    tarball = directory / f"{name}.tar"
    with tarfile.open(tarball, "w") as tf:
        tf.add(root, arcname=name, recursive=False)
        for file in ("SHA256SUMS", *files):
            tf.add(root / file, arcname=f"{name}/{file}")
    return tarball


def bundle_id(tarball: Path, name: str = "verl-bundle-fake") -> str:
    with tarfile.open(tarball) as tf:
        fh = tf.extractfile(f"{name}/SHA256SUMS")
        assert fh is not None
        return hashlib.sha256(fh.read()).hexdigest()
