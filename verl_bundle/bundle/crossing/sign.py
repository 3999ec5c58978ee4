"""Signing a bundle (build --sign KEY): manifest.json's signature goes into the bundle, the
tarball's hash list (<tarball>.sha256) gets one beside it.

An SSH key signs with `ssh-keygen -Y sign -n verl-bundle` (OpenSSH 8.2+ verifies it on any
server, with nothing new installed); `gpg:KEYID` signs with GnuPG for a site that uses it
(gpgv verifies). The server checks either against a file of allowed signers
(airgap/verify/signature.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.errors import AssembleError, UsageError

if TYPE_CHECKING:
    from verl_bundle.bundle.entries import Entry

GPG_PREFIX = "gpg:"


@dataclass(frozen=True)
class Signer:
    """An SSH private key (a path; or a public key whose private half is in ssh-agent) or a
    GPG key id (`gpg:KEYID`)."""

    kind: str  # "ssh" or "gpg"
    key: str

    @classmethod
    def parse(cls, value: str) -> Signer:
        """--sign's value, checked before anything is fetched: the tool is there, the key is."""
        if value.startswith(GPG_PREFIX):
            signer = cls("gpg", value[len(GPG_PREFIX) :])
            if not signer.key:
                raise UsageError("--sign gpg:KEYID needs a key id (gpg --list-secret-keys)")
        else:
            signer = cls("ssh", value)
            path = Path(value).expanduser()
            if not path.is_file() or not os.access(path, os.R_OK):
                raise UsageError(
                    f"--sign {value}: no readable SSH key there; make one with "
                    "`ssh-keygen -t ed25519 -f FILE`, or give gpg:KEYID to sign with GnuPG"
                )
        if shutil.which(signer.tool) is None:
            raise UsageError(f"--sign: {signer.tool} is not on PATH; install it to sign bundles")
        return signer

    @property
    def tool(self) -> str:
        return "ssh-keygen" if self.kind == "ssh" else "gpg"

    @property
    def suffix(self) -> str:
        """The signature file's suffix: .sig (SSH) or .asc (GPG, armored)."""
        return ".sig" if self.kind == "ssh" else ".asc"

    def command(self) -> list[str]:
        """Signs standard input, writing the signature to standard output."""
        if self.kind == "ssh":
            key = str(Path(self.key).expanduser())
            return ["ssh-keygen", "-Y", "sign", "-q", "-f", key, "-n", mf.SIGNING_NAMESPACE]
        return ["gpg", "--batch", "--yes", "--armor", "--local-user", self.key, "--detach-sign"]

    def sign(self, data: bytes, what: str) -> bytes:
        """The detached signature of `data`; AssembleError naming `what` when it fails."""
        try:
            proc = subprocess.run(self.command(), input=data, capture_output=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AssembleError(f"cannot sign {what} with {self.tool}: {exc}") from None
        if proc.returncode != 0 or not proc.stdout:
            said = " ".join(proc.stderr.decode(errors="replace").split())[-300:]
            raise AssembleError(
                f"{self.tool} could not sign {what} with {self.key}: {said or 'no signature'}; "
                "check the key (and its passphrase or agent)"
            )
        return proc.stdout

    def sign_manifest(self, manifest: bytes) -> Entry:
        """manifest.json's signature as a bundle file (listed in SHA256SUMS)."""
        from verl_bundle.bundle.entries import Entry

        data = self.sign(manifest, mf.MANIFEST)
        name = mf.SIGNATURE if self.kind == "ssh" else mf.SIGNATURE_GPG
        return Entry(name, hashlib.sha256(data).hexdigest(), len(data), data=data)

    def sign_file(self, path: Path) -> Path:
        """`path`'s signature written beside it (PATH.sig / PATH.asc), atomically."""
        sig = path.with_name(path.name + self.suffix)
        tmp = path.with_name(f".{sig.name}.partial-{os.getpid()}")
        try:
            tmp.write_bytes(self.sign(path.read_bytes(), path.name))
            os.replace(tmp, sig)
        finally:
            tmp.unlink(missing_ok=True)
        return sig
