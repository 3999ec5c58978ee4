"""`python3 -m verl_bundle.airgap COMMAND ...`: the server-side tools a bundle carries.

doctor      check this server against the bundle's needs (before installing)
verify      check every file of the bundle against SHA256SUMS and the manifest
explain     match a failed install's log to known causes and fixes
postinstall check the installed environment (run with the venv's python)
install     install the bundle DIR (what its install.sh runs): install DIR [options]
readiness   prove the venv can start the bundle's verl trainer (run with the venv's python)
max-jobs    the MAX_JOBS a source build should use on this machine's RAM
assets      install an asset bundle (models, datasets) / check what was placed
preflight   check this node before ray start / torchrun: preflight [verl overrides] [--config YAML]
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "doctor":
        from verl_bundle.airgap import doctor

        return doctor.main(rest)
    if command == "verify":
        from verl_bundle.airgap.verify import bundle as verify

        return verify.main(rest)
    if command == "explain":
        from verl_bundle.airgap.explain import engine as explain

        return explain.main(rest)
    if command == "postinstall":
        from verl_bundle.airgap.postinstall import run as postinstall

        return postinstall.main(rest)
    if command == "install":
        from verl_bundle.airgap.install.main import main as install

        return install(rest)
    if command == "readiness":
        from verl_bundle.airgap.postinstall import readiness

        return readiness.main(rest)
    if command == "preflight":
        from verl_bundle.airgap.launch import preflight

        return preflight.main(rest)
    if command == "max-jobs":
        from verl_bundle.airgap import doctor

        return doctor.max_jobs_main(rest)
    if command == "assets":
        from verl_bundle.airgap.assets import place as place_assets

        return place_assets.main(rest)
    print(f"unknown command {command!r}; see --help", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
