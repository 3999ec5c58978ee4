"""`make python-real`: the bundled interpreter from the real release host (needs the internet).

Fetches python-build-standalone's install_only CPython for cp310 x86_64-linux-gnu through the
same code path as `build --with-python` (the built-in location and release, its hash from the
release's SHA256SUMS unless the profile pins it), checks it as a build would (name, ELF machine,
libc, glibc against manylinux_2_17, safe members), unpacks it into a scratch directory and runs
it: version, prefix, headers, and a venv made from it. Not part of `make test`: the release host
is not reachable from the machines the tests run on.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from verl_bundle.errors import BundleError
from verl_bundle.fetch.standalone import fetch_interpreter
from verl_bundle.net.cache import Cache, default_cache_dir
from verl_bundle.net.download import Downloader
from verl_bundle.net.http import Http
from verl_bundle.profile.catalog import select_profile
from verl_bundle.profile.model import parse_mirror
from verl_bundle.profile.target import Target, parse_python
from verl_bundle.progress import reporter

CODE = (
    "import sys, sysconfig, ssl, sqlite3, venv, os; print(sys.version.split()[0], sys.prefix); "
    "print(os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cu124")
    parser.add_argument("--python", default="3.10")
    parser.add_argument("--platform", default="manylinux_2_17_x86_64")
    parser.add_argument("--mirror", action="append", default=[], metavar="NAME=URL")
    args = parser.parse_args()
    profile = select_profile(None, args.profile).with_mirrors(
        dict(parse_mirror(m) for m in args.mirror)
    )
    target = Target(parse_python(args.python), args.platform)
    urls = [loc.url for loc in profile.locations.values() if loc.url]
    try:
        with reporter(quiet=False) as rep:
            downloader = Downloader(Cache(default_cache_dir()), Http.for_urls(urls), rep)
            python = fetch_interpreter(profile, target, downloader, rep)
    except BundleError as exc:
        print(f"python-real: {exc}", file=sys.stderr)
        return 1
    e = python.entry
    print(f"{e.path}: CPython {e.version}, {e.arch}-{e.libc}, sha256 {e.sha256}, {e.size} bytes")
    with tempfile.TemporaryDirectory(prefix="verl-python-real-") as tmp:
        with tarfile.open(python.source) as tf:
            tf.extractall(tmp, filter="data")
        binary = Path(tmp, "python", "bin", f"python{args.python}")
        ran = subprocess.run([str(binary), "-I", "-c", CODE], capture_output=True, text=True)
        print(ran.stdout.strip() or ran.stderr.strip())
        made = subprocess.run([str(binary), "-m", "venv", "--without-pip", str(Path(tmp, "v"))])
        print("venv:", "made" if made.returncode == 0 else f"failed ({made.returncode})")
        return ran.returncode or made.returncode


if __name__ == "__main__":
    sys.exit(main())
