"""`verify PATH`, the one implementation: whichever shape the bundle came in, one answer, for the
server's `verify` and the host's `verl-bundle verify` alike (the host calls this).

A directory or a tarball is checked against SHA256SUMS and the manifest (bundle.py; a tarball
is read once, tarread.py); a volume set, named by its NAME.tar.sha256, one of its volumes or
the joined name with volumes beside it, volume by volume and whole (volumes.py); a delta
without the files it leaves to its base (delta.py's `left_out`; `install.sh --base` fills them
in at install time, install/base.py); and with an allowed-signers file, the signature first
(signature.py). Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify import delta, signature, volumes
from verl_bundle.airgap.verify.bundle import Problem, Report, verify, verify_tar

VOLUMES_MATCH = "volumes match their list"


@dataclass(frozen=True)
class Checked:
    """The check's report; the signature's line and signer when one was asked for and is good;
    lines on what the result means (a delta's files left to its base, how to join volumes)."""

    report: Report
    signer: str = ""
    signed: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.report.ok

    @property
    def problems(self) -> list[str]:
        """One line per problem: 'PATH: what'."""
        return [p.line() for p in self.report.problems]


def volume_set(path: str) -> tuple[str, list[str]] | None:
    """(the joined tarball's name, its volumes in join order) when `path` names a volume set:
    its list or one of its volumes, or the joined name with volumes beside it, and no tarball
    of that name; None otherwise (a directory, a tarball)."""
    if os.path.isdir(path):
        return None
    joined = volumes.joined_of(path)
    if os.path.isfile(joined):
        return None
    folder = os.path.dirname(joined) or "."
    found = volumes.volumes_in(folder, os.path.basename(joined)) if os.path.isdir(folder) else []
    # A list or a volume named is a set even with every volume gone (each is then missing).
    return (joined, found) if found or path != joined else None


def _left_to_base(report: Report, path: str) -> list[str]:
    """A delta's omitted files, which the full check reports missing, taken out of the report
    (they are not damage); the note that says so. The manifest is the one the check read (a
    tarball's from its single read)."""
    try:
        if os.path.isdir(path):
            m = mf.load(path)
        elif mf.MANIFEST in report.kept:
            m = mf.loads(report.kept[mf.MANIFEST].decode("utf-8", errors="replace"))
        else:
            return []
    except (mf.ManifestError, OSError, ValueError):
        return []  # an unreadable manifest is the report's problem already
    if m.delta is None:
        return []
    omitted = delta.left_out(m)
    left = [p for p in report.problems if p.what == "missing" and p.path in omitted]
    report.problems = [p for p in report.problems if p not in left]
    report.checked -= len(left)
    return [
        f"a delta of {m.delta.base}: {len(left)} file(s) are left to the base; install with "
        "install.sh --base OLD_DIR (the extracted base bundle)"
    ]


def check(path: str, allowed_signers: str | None = None, each_file: bool = False) -> Checked:
    """Every file of the bundle at `path` (see the module's docstring); the signature first
    when `allowed_signers` is given (a refusal is then the only problem). A tarball that
    matches its .sha256 is hashed whole (bundle.verify_tar), or member by member as well with
    `each_file`."""
    split = volume_set(path)
    signer, said = "", ""
    if allowed_signers:
        signed = (
            signature.check_bundle(path, allowed_signers)
            if os.path.isdir(path)
            else signature.check_tarball(volumes.listing_of(path), allowed_signers)
        )
        if not signed.ok:
            return Checked(Report(path, 0, [Problem("signature", signed.line)]))
        signer, said = signed.signer, signed.line
    if split is not None:
        joined, found = split
        vol = volumes.verify_volumes(volumes.listing_of(joined))
        report = Report(
            vol.listing, vol.checked, [Problem(p, w) for p, w in vol.problems], what=VOLUMES_MATCH
        )
        glob = volumes.volumes_glob(os.path.basename(joined))
        note = f"{len(found)} volumes; join them with `cat {glob} | tar x`"
        return Checked(report, signer, said, (note,))
    if path.endswith(".sha256") and os.path.isfile(path[: -len(".sha256")]):
        path = path[: -len(".sha256")]  # a tarball's own .sha256 named: the tarball checked
    report = verify_tar(path, members=True) if each_file and os.path.isfile(path) else verify(path)
    return Checked(report, signer, said, tuple(_left_to_base(report, path)))
