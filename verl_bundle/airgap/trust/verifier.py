"""`verl-bundle-verify`: a bundle checked by code already on the server, never by its own.

A bundle's own checks (install.sh --allowed-signers, its lib/'s verify) run the bundle's code,
so a forged bundle forges them too: they catch accidents. This is the check that decides. The
first approved bundle (after the gate with the OS's own tools) installs it, with the approver's
keys, into the trust root (store.py):

    python3 -I -B NAME/lib/verl_bundle/airgap/trust setup --allowed-signers FILE [--root DIR]

and every later bundle is checked by that copy, as it arrived (a tarball or a volume set,
before anything of it is extracted or run):

    ROOT/bin/verl-bundle-verify NAME.tar [--prefix P] [--allow-downgrade] [--upgrade] [--json]

In order, stopping at the first refusal (one line each, exit 3): the signature of the hash
list NAME.tar.sha256 by an allowed signer; in one read, the whole tarball (or each volume and
their join) against that list and every member against SHA256SUMS and the manifest (no
member unsafe, repeated or cut short); the signature of manifest.json inside; the release
number, not older than the one accepted before for the bundle's line, nor than the one
installed in --prefix. `--upgrade` then replaces the verifier's code by the checked bundle's
lib/, taken from the bytes that were just hashed. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, NoReturn, Sequence

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import Verdict, of_error
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.errors import (
    EXIT_DAMAGED,
    EXIT_OK,
    DamagedError,
    ServerError,
    UsageError,
    exit_table,
)
from verl_bundle.airgap.install.state import STATE
from verl_bundle.airgap.trust import release
from verl_bundle.airgap.trust.store import DEFAULT_ROOT, ENTRY, PROGRAM, Store
from verl_bundle.airgap.verify import signature, volumes
from verl_bundle.airgap.verify.bundle import Report, decoded, judge, parse_sums, verify_tar
from verl_bundle.airgap.verify.tarread import Problem, lists

LIST_LIMIT = 1 << 20  # a hash list is a few lines; never read more of a file given as one
SHOWN = 8  # problems named before "... and N more"


@dataclass(frozen=True)
class Verified:
    """A bundle that passed every check: what it is, who signed it, what was compared."""

    manifest: mf.Manifest
    manifest_sha256: str
    signed: str  # the hash list's signature line
    checked: int
    what: str
    kept: dict[str, bytes] = field(default_factory=dict)

    @property
    def record(self) -> release.Release:
        return release.Release.of(self.manifest, self.manifest_sha256)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read(LIST_LIMIT + 1)
    except OSError as exc:
        raise DamagedError(f"{what}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > LIST_LIMIT:
        raise DamagedError(f"{what}: larger than a hash list is; not a bundle's list")
    return data


def listing_of(path: str) -> str:
    """NAME.tar.sha256 of what `path` names: the list itself, a volume, or the tarball."""
    if os.path.isdir(path):
        raise UsageError(
            f"{PROGRAM}: {path} is a directory: give the tarball as it arrived (NAME.tar, or "
            "NAME.tar.sha256 for volumes), checked before anything of it is extracted"
        )
    return volumes.listing_of(path)


def _signed_list(listing: str, signers: str) -> tuple[str, str]:
    """The list's text and its signature's line: the bytes checked are the bytes used."""
    data = _read(listing, os.path.basename(listing))
    beside = signature.signature_of(listing)
    if beside is not None:
        suffix = beside[len(listing) :]
        sig = _read(beside, os.path.basename(beside))
        found = signature.check_copy(os.path.basename(listing), data, sig, suffix, signers)
        if not found.ok:
            raise DamagedError(found.line)
        return data.decode("utf-8", errors="replace"), found.line
    name = os.path.basename(listing)
    missing = f"{name}{signature.SSH_SUFFIX} beside it"
    raise DamagedError(signature.unsigned(name, missing, "nothing of it was trusted"))


def _keep(upgrade: bool) -> Any:
    """The members whose bytes are kept from the one read: the lists, manifest.json's
    signature and, for --upgrade, lib/."""
    signatures = (mf.SIGNATURE, mf.SIGNATURE_GPG)
    return lambda rel: lists(rel) or rel in signatures or (upgrade and rel.startswith("lib/"))


def _damaged(subject: str, problems: list[str]) -> NoReturn:
    shown = problems[:SHOWN]
    more = [f"... and {len(problems) - SHOWN} more"] if len(problems) > SHOWN else []
    raise DamagedError(
        "\n".join([f"FAILED: {p}" for p in shown] + more)
        + f"\n{subject}: {len(problems)} problem(s); nothing of it may be trusted: copy it again "
        "from the approved copy"
    )


def _contents(listing: str, text: str, upgrade: bool) -> Report:
    """One read of the tarball or the volume set, checked against the signed `text`."""
    keep = _keep(upgrade)
    if (
        volumes.parse(text)[0] is not None
    ):  # a volume set: `-` is the joined stream, the rest its volumes
        vols, done, tar_problems = volumes.read_volumes(listing, text, keep)
        report = Report(listing, what="files match SHA256SUMS and the manifest")
        report.problems.extend(tar_problems)
        report.problems.extend(Problem(name, what) for name, what in vols.problems)
        if done is not None and not report.problems:
            actual, kept, _ = done
            report.kept = kept
            judge(report, actual, decoded(kept))
        return report
    tarball = listing[: -len(".sha256")]
    sums = parse_sums(text)
    if list(sums) != [os.path.basename(tarball)]:
        raise DamagedError(
            f"{os.path.basename(listing)} names {', '.join(sums) or 'nothing'}, not "
            f"{os.path.basename(tarball)}: not this tarball's signed list"
        )
    return verify_tar(tarball, sums[os.path.basename(tarball)], keep)


def check(
    path: str,
    store: Store,
    prefix: str | None = None,
    allow_downgrade: bool = False,
    upgrade: bool = False,
) -> Verified:
    """Every check of the module's docstring, in order; DamagedError (exit 3) at the first
    refusal, UsageError (exit 2) for a path that is not a bundle as it arrives."""
    listing = listing_of(path)
    text, signed = _signed_list(listing, store.signers)
    report = _contents(listing, text, upgrade)
    if report.problems:
        _damaged(os.path.basename(report.subject), [p.line() for p in report.problems])
    kept = report.kept
    manifest = kept.get(mf.MANIFEST, b"")
    inside = signature.signature_in(kept, mf.MANIFEST)
    if inside is not None:
        suffix, sig = inside
        found = signature.check_copy(mf.MANIFEST, manifest, sig, suffix, store.signers)
        if not found.ok:
            raise DamagedError(found.line)
    else:
        inner = f"{mf.MANIFEST} inside"
        raise DamagedError(signature.unsigned(inner, mf.SIGNATURE, "nothing of it was trusted"))
    try:
        m = mf.loads(manifest.decode("utf-8", errors="replace"))
    except mf.ManifestError as exc:
        raise DamagedError(f"{mf.MANIFEST}: {exc}") from None
    older = []
    accepted = store.accepted().get(release.line_of(m))
    if accepted is not None:
        older.append(release.downgrade(m, accepted, f"accepted by {PROGRAM} before"))
    if prefix is not None:
        installed = release.installed(os.path.join(os.path.abspath(prefix), STATE))
        if installed is not None:
            older.append(release.downgrade(m, installed, f"installed in {prefix}"))
    refusals = [why for why in older if why]
    if refusals and not allow_downgrade:
        raise DamagedError(refusals[0])
    sha = hashlib.sha256(manifest).hexdigest()
    return Verified(m, sha, signed, report.checked, report.what, kept)


# -- the command ------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROGRAM,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check a bundle as it arrived (its tarball or volume set), with this "
        "installed code and the approver's keys in the trust root, never with the bundle's own "
        "code. Install it once from an approved bundle: python3 -I -B "
        "NAME/lib/verl_bundle/airgap/trust setup --allowed-signers FILE [--root DIR].",
        epilog="Exit codes:\n" + exit_table(),
    )
    p.add_argument("path", metavar="NAME.tar|NAME.tar.sha256|NAME.tar.000")
    p.add_argument("--root", default=DEFAULT_ROOT, help=f"the trust root (default {DEFAULT_ROOT})")
    p.add_argument(
        "--prefix",
        metavar="DIR",
        help="the install this bundle is for: refuse a release older than the one installed there",
    )
    p.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="accept a release older than the one accepted or installed before, on purpose",
    )
    p.add_argument(
        "--upgrade",
        action="store_true",
        help="after every check passed, replace this verifier's code by the bundle's lib/ "
        "(the one before is kept in ROOT/lib.prev)",
    )
    p.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    return p


def setup_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"{PROGRAM} setup",
        allow_abbrev=False,
        description="Install the verifier from the bundle this code is in (check it first with "
        "the OS's tools: ssh-keygen -Y verify of NAME.tar.sha256.sig, then sha256sum -c): its "
        "lib/, checked file by file against its SHA256SUMS, and the approver's keys.",
    )
    p.add_argument("--allowed-signers", required=True, metavar="FILE")
    p.add_argument("--root", default=DEFAULT_ROOT, help=f"the trust root (default {DEFAULT_ROOT})")
    return p


def _lib_files(bundle: str, signers: str) -> tuple[dict[str, bytes], mf.Manifest, str, str]:
    """The bundle's lib/ as SHA256SUMS lists it, each file checked against its line; its
    manifest, signed by `signers`, the manifest's sha256 and the signature's line."""
    found = signature.check_bundle(bundle, signers)
    if not found.ok:
        raise DamagedError(found.line)
    sums = parse_sums(_read(os.path.join(bundle, mf.SUMS), mf.SUMS).decode("utf-8", "replace"))
    with open(os.path.join(bundle, mf.MANIFEST), "rb") as fh:
        manifest = fh.read()
    sha = hashlib.sha256(manifest).hexdigest()
    if sums.get(mf.MANIFEST) != sha:
        raise DamagedError(f"{mf.MANIFEST} does not match {mf.SUMS}; copy the bundle again")
    files = {}
    for rel, want in sums.items():
        if not rel.startswith("lib/"):
            continue
        with open(os.path.join(bundle, rel), "rb") as fh:
            data = fh.read()
        if hashlib.sha256(data).hexdigest() != want:
            raise DamagedError(f"{rel} does not match {mf.SUMS}; copy the bundle again")
        files[rel[len("lib/") :]] = data
    return files, mf.loads(manifest.decode("utf-8", errors="replace")), sha, found.line


def setup(argv: Sequence[str]) -> int:
    args = setup_parser().parse_args(argv)
    from verl_bundle.airgap.install import bytecode

    bundle = os.path.dirname(bytecode.LIB)
    if not os.path.isfile(args.allowed_signers):
        raise UsageError(f"--allowed-signers {args.allowed_signers}: no such file")
    files, m, sha, signed = _lib_files(bundle, args.allowed_signers)
    if "/".join((*ENTRY, "__main__.py")) not in files:
        raise DamagedError(f"{m.name} carries no verifier (lib/{'/'.join(ENTRY)}/)")
    store = Store(args.root)
    with open(args.allowed_signers, "rb") as fh:
        signers = fh.read()
    existed = os.path.lexists(store.root)
    store.create(signers)
    origin = release.Release.of(m, sha)
    try:
        store.install_lib(files)
        store.write_program(sys.executable, origin)
        note = store.accept(origin)
        store.write_origin(origin, signed, sys.executable)
    except BaseException:  # nothing half made is left to be taken for a trust root
        if not existed:
            shutil.rmtree(store.root, ignore_errors=True)
        raise
    render.say(
        f"installed {PROGRAM} from {m.name} (release {m.release}) in {store.root}, with the keys "
        f"of {args.allowed_signers}; check every later bundle with it before extracting it:\n"
        f"  {store.program} NAME.tar [--prefix PREFIX]" + (f"\nnote: {note}" if note else "")
    )
    return EXIT_OK


def _upgrade(store: Store, done: Verified) -> str:
    files = {k[len("lib/") :]: v for k, v in done.kept.items() if k.startswith("lib/")}
    if "/".join((*ENTRY, "__main__.py")) not in files:
        raise DamagedError(f"{done.manifest.name} carries no verifier (lib/{'/'.join(ENTRY)}/)")
    python = str((store.installed() or {}).get("python") or sys.executable)
    store.install_lib(files)
    store.write_origin(done.record, done.signed, python)
    store.write_program(python, done.record)
    return (
        f"upgraded {PROGRAM} to the code of {done.manifest.name} (release "
        f"{done.manifest.release}); the code before is in {store.path('lib.prev')}"
    )


def run(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    store = Store(args.root)
    if store.installed() is None:
        raise UsageError(
            f"{PROGRAM}: no verifier is installed in {store.root}; install it once from an "
            "approved bundle: python3 -I -B NAME/lib/verl_bundle/airgap/trust setup "
            "--allowed-signers FILE"
        )
    store.require_safe()
    done = check(args.path, store, args.prefix, args.allow_downgrade, args.upgrade)
    m = done.manifest
    notes = [n for n in [store.accept(done.record)] if n]
    if args.upgrade:
        notes.append(_upgrade(store, done))
    line = (
        f"OK: {m.name} release {m.release}: {done.signed}; {done.checked} {done.what}"
        if done.checked
        else f"OK: {m.name}"
    )
    result = {
        "bundle": args.path,
        "name": m.name,
        "release": m.release,
        "line": release.line_of(m),
        "manifest_sha256": done.manifest_sha256,
        "signed": done.signed,
        "checked": done.checked,
        "notes": notes,
    }
    text = "\n".join([*notes, line])
    render.show("verify", True, result, text, args.json, Verdict(EXIT_OK, "ok", line))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """One check (or the setup); every refusal is its lines on stderr and its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    json_out = "--json" in args
    try:
        try:
            return setup(args[1:]) if args[:1] == ["setup"] else run(args)
        except SystemExit as done:  # --help printed its text
            return done.code if isinstance(done.code, int) else EXIT_OK
    except ServerError as exc:
        if json_out:
            verdict = of_error(exc.code, exc.message.splitlines()[-1])
            render.show("verify", False, {"message": exc.message}, "", True, verdict)
        lead = "REFUSED: " if exc.code == EXIT_DAMAGED else f"{PROGRAM}: "
        for text in exc.message.splitlines():
            said = text.startswith(("FAILED:", f"{PROGRAM}:", f"{PROGRAM} setup:"))
            render.say(text if said else lead + text, sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        render.say("interrupted; nothing was accepted", sys.stderr)
        return 130
