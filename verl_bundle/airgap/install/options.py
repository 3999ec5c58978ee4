"""install.sh's options as one `Options` value, read from the one parser (airgap/cli.py) and
checked against the bundle's manifest, and install.sh's --help text."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from verl_bundle.airgap.contract.manifest import Manifest
from verl_bundle.airgap.contract.skip_phases import SkipPhases, skip_phases
from verl_bundle.airgap.errors import UsageError, exit_table


@dataclass(frozen=True)
class Options:
    bundle: str  # the bundle directory (where install.sh is)
    prefix: str | None = None
    python: str | None = None  # a path, or "bundled"
    bundled_python: str | None = None  # where install.sh unpacked the bundled CPython
    into_env: str | None = None
    dry_run: bool = False
    skip_doctor: bool = False
    require_gpu: bool = False
    skip_phases: SkipPhases = ()
    yes: bool = False
    log: str | None = None
    events: str | None = None
    json: bool = False
    allowed_signers: str | None = None  # refuse a bundle not signed by one of these keys
    allow_downgrade: bool = False  # install a bundle older than the one installed, on purpose
    base: str | None = None  # a delta's base: the old bundle's directory or its wheels
    repair: bool = False  # reinstall the distributions whose files or versions differ
    image: str | None = None  # pack the installed prefix into this squashfs image
    quick: bool = False  # leave out the trainer dry run (post-install's imports and config only)

    @property
    def target(self) -> str:
        """The environment installed into (absolute): --into-env, --prefix or the default."""
        chosen = self.into_env or self.prefix
        if chosen is None:
            raise UsageError("HOME is not set, so there is no default prefix; pass --prefix DIR")
        return os.path.abspath(chosen)


def default_prefix(m: Manifest) -> str | None:
    home = os.environ.get("HOME")
    if not home:
        return None
    return os.path.join(home, f"verl-{m.profile.name}-{m.target.python_tag}")


def options(args: argparse.Namespace, m: Manifest | None) -> Options:
    """The parsed command line as Options; UsageError for a phase the bundle does not have
    or two targets at once."""
    chosen = skip_phases(args.skip_phases, m.phase_names if m is not None else None)
    if args.image and args.into_env:
        raise UsageError(
            "--image packs a venv this installer makes (--prefix, the path nodes will mount "
            "it at), not --into-env"
        )
    if args.into_env and args.prefix:
        raise UsageError(
            "give --prefix (a new venv) or --into-env (an existing environment), not both"
        )
    for given, name in (
        (args.work, "--work"),
        (args.bundle_sha256, "--bundle-sha256"),
        (args.deadline, "--deadline"),
    ):
        if given is not None:
            raise UsageError(f"{name} is for a served bundle: give it with --from URL")
    prefix = args.prefix
    if m is not None and prefix is None and args.into_env is None:
        prefix = default_prefix(m)
    return Options(
        bundle=os.path.abspath(args.bundle),
        prefix=prefix,
        python=args.python,
        bundled_python=args.bundled_python,
        into_env=args.into_env,
        dry_run=args.dry_run,
        skip_doctor=args.skip_doctor,
        require_gpu=args.require_gpu,
        skip_phases=chosen,
        yes=args.yes,
        log=args.log,
        events=args.events,
        json=args.json,
        allowed_signers=args.allowed_signers,
        allow_downgrade=args.allow_downgrade,
        base=os.path.abspath(args.base) if args.base else None,
        repair=args.repair,
        image=args.image,
        quick=args.quick,
    )


def usage(m: Manifest | None) -> str:
    name = m.name if m else "this bundle"
    py = m.target.python if m else "X.Y"
    cuda = m.target.cuda if m else "?"
    profile = m.profile.name if m else "?"
    phases = " ".join(m.phase_names) if m else "(see manifest.json)"
    prefix = (default_prefix(m) if m else None) or "$HOME/verl-<profile>-<cpXY>"
    carried = f" ({m.interpreter.version})" if m and m.interpreter else " (if it carries one)"
    return f"""Usage: ./install.sh [options]

Installs {name} (profile {profile}, Python {py}, CUDA {cuda}) with no network.

Steps: (1) check every file against SHA256SUMS and the manifest; (2) check the Python
version; (3) run the doctor (stops on failures, prints the fixes); (4) create the venv and
bring pip (and uv, where it runs) from bootstrap/; (5) install the phases in order: {phases};
(6) post-install checks (versions, imports, torch version and CUDA, C++ ABI, GPU when
present) and readiness (verl's trainer modules import, its config composes), then the trainer
dry run: verl's own PPO entry started offline on a tiny model and dataset made here (or the
asset bundle installed for this prefix), up to the GPU boundary on a server without a GPU and
one PPO step where one is visible; (7) say how to activate. The last line is the verdict: ready to train, or why not. A second run after a
failure, Ctrl-C or kill continues where it stopped; a newer bundle run on the same prefix
installs what changed.

Options:
  --prefix DIR      create the venv in DIR (default: {prefix}); an existing
                    directory must be empty or a venv this installer made
  --python PATH     the Python {py} to create the venv from (default: python{py}, then python3);
                    `bundled`: the CPython this bundle carries{carried}, unpacked into
                    PREFIX/python (the default when this server has no Python {py})
  --into-env PATH   install into an existing environment instead (a venv or conda env whose
                    bin/python is Python {py}); its own pip is not changed. What would be
                    up- or downgraded is shown and asked about first (unless --yes)
  --dry-run         print the plan: exactly the commands a run would execute; change nothing
  --skip-doctor     do not run the pre-install checks
  --require-gpu     make the doctor's driver and GPU checks failures, not warnings, and
                    readiness needs a GPU (a CUDA op and a flash-attn call)
  --skip-phase NAME leave a phase out (repeatable; phases: {phases}); its packages are not
                    installed. What the trainer needs from it makes the verdict "not ready to
                    train" (exit 5); rerun without it to install what is missing.
  --repair          check every installed file of the bundle's distributions against its
                    RECORD and reinstall, offline, exactly those whose files or versions
                    differ from the bundle (or that are missing); the rest is left as it is.
                    A plain rerun trusts the phases it finished: after a package was removed
                    or a file deleted from the venv, --repair is what brings it back. It also
                    names and removes what no RECORD lists that came after the install (a
                    planted .pth or sitecustomize.py) and links leading outside the prefix
                    (the link, never its target)
  --quick           leave out the trainer dry run (minutes on a small server): post-install
                    then proves imports and the config only, and the verdict says the
                    trainer's start is not proven here. Prove it later with the venv's python:
                    PREFIX/bin/python -I -B BUNDLE/lib/verl_bundle/airgap readiness
                    --bundle BUNDLE --deep [--model DIR --data FILE]
  --image FILE      after the install, compile every module to bytecode (all cores) and
                    pack the prefix into one read-only squashfs image FILE (mksquashfs, from
                    squashfs-tools), with FILE.sha256 beside it, for a shared filesystem:
                    each node mounts it at the same path as --prefix, read-only
                    (squashfuse FILE PREFIX, or mount -t squashfs -o ro,loop FILE PREFIX).
                    Written beside FILE in a private directory and renamed into place; a
                    link or a directory at FILE is refused before anything is installed
  --yes, -y         do not ask before installing
  --log FILE        also write everything to FILE (default: <prefix>/.verl-bundle/install.log);
                    a link or FIFO there is not followed: the install goes on without it
  --events FILE     append each step's events to FILE as JSON lines (for scripts); a link
                    or FIFO there is refused (exit 2)
  --json            print the result as JSON on stdout (progress goes to stderr)
  --allowed-signers FILE
                    before anything else, refuse a bundle that is not signed by a key in FILE
                    (an ssh allowed-signers file, or a GPG keyring), or altered since. This
                    catches a damaged or unsigned copy, not a forged one: it is this bundle's
                    own code, which a forged bundle forges too. Check the tarball before it is
                    extracted: with the OS's tools (ssh-keygen -Y verify of NAME.tar.sha256.sig,
                    then sha256sum -c NAME.tar.sha256), or the installed verl-bundle-verify
  --allow-downgrade install this bundle even though its release number is older than that
                    of the bundle installed in the prefix (refused otherwise, exit 3)
  --base OLD_DIR    this bundle is a delta (build --base): take the files it left out from
                    OLD_DIR (the extracted older bundle, or its wheels), each checked against
                    this bundle's manifest, then install as from a full bundle
  --from URL        install from a served bundle (an extracted bundle behind python3 -m
                    http.server or nginx: http://head:8000/<bundle>/): every file is fetched
                    into a local copy, checked against its sha256 as it arrives, then that
                    copy is installed as above. Credentials go in the URL (user:password@)
  --bundle-sha256 H with --from: install only the bundle whose SHA256SUMS has sha256 H (run
                    `sha256sum SHA256SUMS` in your own copy, or read it from the build's
                    output); SHA256SUMS lists every other file, install.sh included, so a
                    served copy replaced in any file is refused (exit 3). The install.sh of
                    an extracted bundle pins its own bundle by itself
  --work DIR        where --from keeps its copy (kept; a rerun fetches only what is missing):
                    a new or empty directory, or one an earlier fetch made; never another's.
                    Default: $TMPDIR/verl-bundle-<uid>/served-<host>-<key> (mode 0700),
                    resumed by a rerun and removed after a successful install
  --deadline SECONDS
                    with --from: give up the fetch after this long (default 7200), with a
                    progress line every 10 s; a rerun continues where it stopped
  --help, -h        this text

Exit codes:
{exit_table()}

Uninstall: remove the prefix directory. Upgrade: run a newer bundle's install.sh with the
same --prefix; it installs what changed and removes what left the bundle.
"""
