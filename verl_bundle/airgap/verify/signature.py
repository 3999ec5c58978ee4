"""A bundle's signatures, made on the host and checked offline with what every server has:
the one place that runs ssh-keygen, gpg or gpgv, so that what is signed and what is checked
(the namespace, the file names, the key's name) cannot drift apart.

`build --sign KEY` signs manifest.json (the signature travels inside the bundle, listed in
SHA256SUMS) and the tarball's hash list NAME.tar.sha256 (the signature lies beside it): an SSH
key with `ssh-keygen -Y sign -n verl-bundle`, `gpg:KEYID` with GnuPG for a site that uses it.
An SSH signature is checked with `ssh-keygen -Y` (OpenSSH 8.2+) against an allowed-signers file
(`PRINCIPAL KEYTYPE KEY` lines, as `ssh-keygen -Y verify` reads them); a GPG one with `gpgv`
against a keyring (`gpg --export KEYID > FILE`). Refused, in one line each: an unsigned
bundle, a signature by a key the file does not hold, a file altered after signing.

Because manifest.json lists every file's sha256 and the installer checks every file against
it, a good signature of manifest.json vouches for the whole bundle. Standard library only,
Python 3.8+ (the host signs with it; the bundle carries it to the server).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Mapping

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.errors import StepError, UsageError

NAMESPACE = mf.SIGNING_NAMESPACE
SSH_SUFFIX, GPG_SUFFIX = ".sig", ".asc"
SUFFIXES = (SSH_SUFFIX, GPG_SUFFIX)  # the order a signature is looked for: SSH's first
GPG_PREFIX = "gpg:"  # --sign gpg:KEYID
SIGN_TIMEOUT = 300  # seconds; a key in ssh-agent may ask its holder to confirm
CHECK_TIMEOUT = 120
_KEY_NAMES = {
    "ssh-ed25519": "ED25519",
    "ssh-rsa": "RSA",
    "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA",
    "ecdsa-sha2-nistp521": "ECDSA",
    "sk-ssh-ed25519@openssh.com": "ED25519-SK",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK",
}


@dataclass(frozen=True)
class Signed:
    """`ok`: signed by an allowed signer and unaltered. `line`: one line saying so, or why it
    is refused and what to do. `signer`: the principal (SSH) or key (GPG) that signed."""

    ok: bool
    line: str
    signer: str = ""


def _sshsig(armored: bytes) -> tuple[bytes, str] | None:
    """(the public key blob, the namespace) of an armored SSH signature (OpenSSH's PROTOCOL.sshsig:
    "SSHSIG", a version, then strings: the key, the namespace, ...); None when it is none."""
    lines = armored.decode("ascii", errors="replace").strip().splitlines()
    if len(lines) < 3 or lines[0] != "-----BEGIN SSH SIGNATURE-----":
        return None
    try:
        blob = base64.b64decode("".join(lines[1:-1]))
        if blob[:6] != b"SSHSIG":
            return None
        (length,) = struct.unpack(">I", blob[10:14])
        key = blob[14 : 14 + length]
        at = 14 + length
        (ns_len,) = struct.unpack(">I", blob[at : at + 4])
        namespace = blob[at + 4 : at + 4 + ns_len].decode("ascii")
    except (ValueError, struct.error, UnicodeDecodeError):
        return None
    if len(key) < 4 or at + 4 + ns_len > len(blob):
        return None
    return key, namespace


def ssh_key_of(armored: bytes) -> str | None:
    """The key an SSH signature was made with, as ssh-keygen names it ("ED25519 key
    SHA256:..."); None when it is not an SSH signature."""
    parsed = _sshsig(armored)
    if parsed is None:
        return None
    key = parsed[0]
    try:
        (kind_len,) = struct.unpack(">I", key[:4])
        kind = key[4 : 4 + kind_len].decode("ascii")
    except (struct.error, UnicodeDecodeError):
        return None
    digest = base64.b64encode(hashlib.sha256(key).digest()).decode().rstrip("=")
    return f"{_KEY_NAMES.get(kind, kind)} key SHA256:{digest}"


def ssh_namespace_of(armored: bytes) -> str | None:
    """The namespace an SSH signature was made under (`ssh-keygen -Y sign -n NAMESPACE`)."""
    parsed = _sshsig(armored)
    return parsed[1] if parsed else None


def signature_of(signed: str) -> str | None:
    """The signature file of `signed` (an SSH .sig, else a GPG .asc), or None."""
    for suffix in SUFFIXES:
        if os.path.isfile(signed + suffix):
            return signed + suffix
    return None


def signature_in(files: Mapping[str, bytes], signed: str) -> tuple[str, bytes] | None:
    """(its suffix, its bytes) of the signature of the file named `signed` among `files` (a
    bundle's members read into memory), looked for as `signature_of` looks on disk; or None."""
    for suffix in SUFFIXES:
        if signed + suffix in files:
            return suffix, files[signed + suffix]
    return None


def unsigned(what: str, missing: str, outcome: str) -> str:
    """The one line for a file that should be signed and is not: `what` (a file, as the user
    knows it), the signature `missing`, and what that meant (nothing was installed...)."""
    return (
        f"{what} is not signed (no {missing}); {outcome}. Ask for a bundle built with "
        "`verl-bundle build --sign KEY`"
    )


def gate_command(sig: str, signed: str) -> str:
    """The command that checks the signature `sig` of the file `signed` with the operating
    system's own tools only (the gate: no code of the bundle runs), as typed where both lie."""
    if sig.endswith(GPG_SUFFIX):
        return f"gpgv --keyring ./allowed.gpg {sig} {signed}"
    return (
        f"ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n {NAMESPACE} -s {sig} < {signed}"
    )


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    if stdin is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT)
    with open(stdin, "rb") as fh:
        return subprocess.run(argv, stdin=fh, capture_output=True, timeout=CHECK_TIMEOUT)


def _said(proc: subprocess.CompletedProcess) -> str:  # type: ignore[type-arg]
    err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    return " ".join(err.split())[-200:]


def _check_ssh(signed: str, sig: str, allowed: str) -> Signed:
    name = os.path.basename(signed)
    if shutil.which("ssh-keygen") is None:
        return Signed(False, "cannot check the signature: ssh-keygen is not installed here")
    with open(sig, "rb") as fh:
        armored = fh.read()
    key = ssh_key_of(armored) or "an unreadable key"
    namespace = ssh_namespace_of(armored)
    if namespace is not None and namespace != NAMESPACE:
        # ssh-keygen would say only that it "could not verify": a signature made for another
        # purpose is no release signature, whoever made it.
        return Signed(
            False,
            f"{name} is signed under namespace {namespace!r}, not {NAMESPACE!r}: not a "
            "verl-bundle release signature; nothing was installed. Ask for a bundle built with "
            "`verl-bundle build --sign KEY`",
        )
    found = _run(["ssh-keygen", "-Y", "find-principals", "-s", sig, "-f", allowed])
    if found.returncode != 0:
        said = _said(found)
        if "illegal option" in said or "unknown option" in said or "usage" in said.lower():
            return Signed(
                False,
                "cannot check the signature: this ssh-keygen has no -Y find-principals "
                "(OpenSSH 8.2 or newer is needed); check it on a newer machine",
            )
        return Signed(
            False,
            f"{name} is signed by {key}, which {allowed} does not allow; nothing was installed. Get the "
            "bundle from an allowed signer, or add the key to the file if it is trusted",
        )
    principal = (found.stdout.split() or ["?"])[0]
    verified = _run(
        ["ssh-keygen", "-Y", "verify", "-f", allowed, "-I", principal, "-n", NAMESPACE, "-s", sig],
        stdin=signed,
    )
    if verified.returncode != 0:
        return Signed(
            False,
            f"{name} was altered after {principal} ({key}) signed it; nothing was installed. Copy the bundle "
            "again from the approved copy",
        )
    return Signed(True, f"{name} signed by {principal} ({key})", principal)


def _check_gpg(signed: str, sig: str, allowed: str) -> Signed:
    name = os.path.basename(signed)
    if shutil.which("gpgv") is None:
        return Signed(False, "cannot check the signature: gpgv is not installed here")
    proc = _run(["gpgv", "--status-fd", "1", "--keyring", os.path.abspath(allowed), sig, signed])
    status = proc.stdout.split("\n")
    good = [s for s in status if s.startswith("[GNUPG:] GOODSIG ")]
    if proc.returncode == 0 and good:
        who = good[0].split(" ", 3)[-1]
        return Signed(True, f"{name} signed by {who} (GPG)", who)
    if any(" BADSIG " in s + " " for s in status):
        return Signed(
            False,
            f"{name} was altered after it was signed (GPG); nothing was installed. Copy the bundle "
            "again from the approved copy",
        )
    missing = [s.split()[-1] for s in status if s.startswith("[GNUPG:] NO_PUBKEY ")]
    return Signed(
        False,
        "{} is signed by GPG key {}, which {} does not hold; nothing was installed. Get the "
        "bundle from an allowed signer".format(name, missing[0] if missing else "?", allowed),
    )


def check(signed: str, allowed: str) -> Signed:
    """Whether `signed` (manifest.json, or a NAME.tar.sha256 list) carries a good signature by
    a signer `allowed` (an SSH allowed-signers file or a GPG keyring) holds."""
    name = os.path.basename(signed)
    if not os.path.isfile(allowed):
        return Signed(False, f"--allowed-signers {allowed}: no such file")
    if not os.path.isfile(signed):
        return Signed(False, f"{name} is missing, so there is nothing to check a signature of")
    sig = signature_of(signed)
    if sig is None:
        return Signed(False, unsigned(name, name + SSH_SUFFIX, "nothing was installed"))
    if sig.endswith(SSH_SUFFIX):
        return _check_ssh(signed, sig, allowed)
    return _check_gpg(signed, sig, allowed)


def check_copy(name: str, data: bytes, sig: bytes, suffix: str, allowed: str) -> Signed:
    """`data` (what the file `name` holds) and its signature (`suffix`: .sig or .asc), checked
    from a private copy, so that the bytes checked are the bytes the caller goes on to use (a
    file read twice can change in between)."""
    with tempfile.TemporaryDirectory(prefix="verl-bundle-sig-") as tmp:
        signed = os.path.join(tmp, name)
        with open(signed, "wb") as fh:
            fh.write(data)
        with open(signed + suffix, "wb") as fh:
            fh.write(sig)
        return check(signed, allowed)


def check_bundle(root: str, allowed: str) -> Signed:
    """An extracted bundle's manifest.json (install.sh --allowed-signers, before anything)."""
    return check(os.path.join(mf.find_root(root), mf.MANIFEST), allowed)


def check_tarball(path: str, allowed: str) -> Signed:
    """A tarball's (or a volume set's) NAME.tar.sha256 list, before it is extracted."""
    side = path if path.endswith(".sha256") else path + ".sha256"
    return check(side, allowed)


# -- signing (the host's build --sign) --------------------------------------------------------


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
            path = os.path.expanduser(value)
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
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
        return SSH_SUFFIX if self.kind == "ssh" else GPG_SUFFIX

    def command(self) -> list[str]:
        """Signs standard input, writing the signature to standard output."""
        if self.kind == "ssh":
            key = os.path.expanduser(self.key)
            return ["ssh-keygen", "-Y", "sign", "-q", "-f", key, "-n", NAMESPACE]
        return ["gpg", "--batch", "--yes", "--armor", "--local-user", self.key, "--detach-sign"]

    def sign(self, data: bytes, what: str) -> bytes:
        """The detached signature of `data`; StepError (exit 1) naming `what` when it fails."""
        try:
            proc = subprocess.run(
                self.command(), input=data, capture_output=True, timeout=SIGN_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StepError(f"cannot sign {what} with {self.tool}: {exc}") from None
        if proc.returncode != 0 or not proc.stdout:
            said = " ".join(proc.stderr.decode(errors="replace").split())[-300:]
            raise StepError(
                f"{self.tool} could not sign {what} with {self.key}: {said or 'no signature'}; "
                "check the key (and its passphrase or agent)"
            )
        return bytes(proc.stdout)

    def manifest_signature(self, manifest: bytes) -> tuple[str, bytes]:
        """(its bundle path, its bytes): manifest.json's signature, a file of the bundle."""
        name = mf.SIGNATURE if self.kind == "ssh" else mf.SIGNATURE_GPG
        return name, self.sign(manifest, mf.MANIFEST)

    def sign_file(self, path: str) -> str:
        """`path`'s signature written beside it (PATH.sig / PATH.asc), atomically."""
        folder, name = os.path.split(path)
        sig = path + self.suffix
        tmp = os.path.join(folder, f".{name}{self.suffix}.partial-{os.getpid()}")
        try:
            with open(path, "rb") as fh:
                signature = self.sign(fh.read(), name)
            with open(tmp, "wb") as fh:
                fh.write(signature)
            os.replace(tmp, sig)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        return sig
