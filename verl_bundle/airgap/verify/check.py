"""The server's `verify PATH`: whichever shape the bundle came in, one answer.

A directory or a tarball is checked against SHA256SUMS and the manifest (bundle.py); a volume
set, named by its NAME.tar.sha256 or one of its volumes, volume by volume and whole
(volumes.py); a delta's directory without the files it leaves to its base (`install.sh --base`
fills them in at install time, install/base.py); and with an allowed-signers file, the signature first
(signature.py). Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify import signature, volumes
from verl_bundle.airgap.verify.bundle import verify

_VOLUME = re.compile(r"\.\d{3}$")


@dataclass
class Checked:
    subject: str
    what: str = ""  # what matched (default: files match SHA256SUMS and the manifest)
    checked: int = 0
    problems: list[str] = field(default_factory=list)
    signer: str = ""
    signed: str = ""  # the signature's line, when one was asked for and is good

    @property
    def ok(self) -> bool:
        return not self.problems


def check(path: str, allowed_signers: str | None = None) -> Checked:
    """Every file of the bundle at `path` (see the module's docstring)."""
    split = path.endswith(".sha256") or bool(_VOLUME.search(path))
    if allowed_signers:
        signed = (
            signature.check_bundle(path, allowed_signers)
            if os.path.isdir(path)
            else signature.check_tarball(volumes.listing_of(path) or path, allowed_signers)
        )
        if not signed.ok:
            return Checked(path, problems=[f"signature: {signed.line}"])
        signer, said = signed.signer, signed.line
    else:
        signer, said = "", ""
    if split:
        vol = volumes.verify_volumes(path)
        return Checked(
            vol.listing, "volumes match their list", vol.checked, vol.lines(), signer, said
        )
    report = verify(path)
    problems = [p.line() for p in report.problems]
    if os.path.isdir(path):  # a delta lacks what it leaves to its base: not damage
        try:
            m = mf.load(path)
        except mf.ManifestError:
            m = None
        if m is not None and m.delta is not None:
            left = set(m.delta.omitted)
            problems = [
                p.line() for p in report.problems if not (p.what == "missing" and p.path in left)
            ]
    return Checked(report.subject, "", report.checked, problems, signer, said)
