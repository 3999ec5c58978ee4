"""What install.sh runs with the Python it found, before any of the bundle is checked.

install.sh carries this file's text (the build puts it there) and runs it isolated:
`python -I -B -c BOOT SERVED URL HERE ARGS...`. It imports nothing of the project, since it runs
where lib/ is not yet checked, or (with --from URL) where there is no lib/ at all:
- with --from URL: fetch the served copy's verify/served.py, run it only if its sha256 is SERVED
  (the hash install.sh was made with), and hand it the arguments; beside its own checked bundle,
  this install.sh also pins the fetch to that bundle (--bundle-sha256);
- else: refuse a lib/ that holds anything but verl_bundle/ (a planted sitecustomize.py never
  runs), switch the bytecode off and hand over to the server program's installer.
"""

import base64
import hashlib
import os
import sys
import urllib.parse
import urllib.request
from typing import Dict, List, NoReturn

FETCHER = "lib/verl_bundle/airgap/verify/served.py"
MAX_FETCHER = 4 << 20  # bytes: served.py is about 30 KB
MAX_SUMS = 64 << 20


def stop(code: int, text: str) -> NoReturn:
    sys.stderr.write(f"install.sh: {text}\n")
    sys.exit(code)


def _read(here: str, name: str) -> bytes:
    path = os.path.join(here, name)
    if not os.path.isfile(path):
        return b""
    with open(path, "rb") as fh:
        return fh.read(MAX_SUMS)


def _pin(here: str, args: List[str]) -> List[str]:
    """--bundle-sha256 of the bundle beside this install.sh, when its SHA256SUMS lists this very
    install.sh and the user gave no pin of their own."""
    if any(a.split("=")[0] == "--bundle-sha256" for a in args):
        return args
    sums = _read(here, "SHA256SUMS")
    mine = hashlib.sha256(_read(here, "install.sh")).hexdigest()
    lines = set(sums.decode("utf-8", "replace").split("\n"))
    if lines & {mine + "  install.sh", mine + " *install.sh"}:
        return ["--bundle-sha256", hashlib.sha256(sums).hexdigest(), *args]
    return args


def fetch_and_run(served: str, url: str, here: str, args: List[str]) -> NoReturn:
    if not url.startswith(("http://", "https://")):
        stop(2, "--from needs the http:// or https:// URL of a served bundle")
    parts = urllib.parse.urlsplit(url)
    auth, _, host = parts.netloc.rpartition("@")
    where = f"{parts.scheme}://{host}{parts.path.rstrip('/')}/{FETCHER}"
    request = urllib.request.Request(where)  # noqa: S310 - http(s) only, checked above
    if auth:  # sent to this host only: never passed on to a redirect
        token = base64.b64encode(urllib.parse.unquote(auth).encode()).decode()
        request.add_unredirected_header("Authorization", "Basic " + token)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            code = response.read(MAX_FETCHER)
    except Exception as exc:  # any failure to fetch is one line
        stop(1, f"cannot fetch {where}: {' '.join(str(exc).split())[:300]}")
    if hashlib.sha256(code).hexdigest() != served:
        stop(
            3,
            f"{where} is not the fetcher this install.sh was made with; run the install.sh "
            "served with the bundle: curl -fsS URL/install.sh | sh -s -- --from URL",
        )
    space: Dict[str, object] = {"__name__": "served"}
    exec(compile(code, "served.py", "exec"), space)  # noqa: S102 - its sha256 is SERVED
    main = space["main"]
    assert callable(main)
    sys.exit(main(_pin(here, args)))


def install(here: str, args: List[str]) -> NoReturn:
    lib = os.path.join(here, "lib")
    if not os.path.isdir(lib):
        stop(
            2,
            f"no bundle beside this install.sh ({lib} is missing); run the install.sh of an "
            "extracted bundle, or give --from URL of a served one",
        )
    odd = sorted(set(os.listdir(lib)) - {"verl_bundle"})
    if odd:
        stop(
            3,
            f"the bundle is damaged: {lib} holds files the manifest does not list: "
            f"{', '.join(odd)}; nothing was installed. Copy the tarball again.",
        )
    sys.path.insert(0, lib)
    from verl_bundle.airgap.install import bytecode

    bytecode.switch()
    from verl_bundle.airgap.cli import main

    sys.exit(main(["install", here, *args]))


def boot(argv: List[str]) -> NoReturn:
    sys.pycache_prefix = "/dev/null/none"  # a prefix that cannot exist: no bytecode read
    served, url, here, args = argv[0], argv[1], argv[2], argv[3:]
    if url:
        fetch_and_run(served, url, here, args)
    install(here, args)


if __name__ == "__main__":
    boot(sys.argv[1:])
