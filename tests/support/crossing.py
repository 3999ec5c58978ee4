"""Two bundles of the toy stack that differ in one pin (einops 1.0.0 -> 1.1.0), for the delta,
split, signature and inspect tests; and the tools those tests use for real (ssh-keygen keys,
a GnuPG home)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, Stack, build_bundle, clean_environ

PROFILE = (ROOT / "profiles" / "cu118-legacy.toml").read_text()
NAME = "verl-bundle-pinned-cp310-manylinux_2_17_x86_64"


def pinned_profile(folder: Path, einops: str) -> Path:
    """The cu118-legacy profile with einops pinned (the one pin the two bundles differ in)."""
    marker = "requirements = [\n"
    assert marker in PROFILE
    text = PROFILE.replace(marker, f'{marker}    "einops=={einops}",\n', 1)
    path = folder / f"pinned-{einops}.toml"
    path.write_text(text.replace('name = "cu118-legacy"', 'name = "pinned"'))
    return path


@dataclass(frozen=True)
class Pair:
    """Bundle A (einops 1.0.0) and bundle B (1.1.0), built from one cache: their tarballs, B's
    profile (to build B again as a delta), the cache and a scratch folder."""

    old: Path
    new: Path
    new_profile: Path
    cache: Path
    work: Path

    def to_json(self) -> dict[str, object]:
        return {k: str(v) for k, v in vars(self).items()}

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> Pair:
        return cls(**{k: Path(str(v)) for k, v in doc.items()})


def build_pair(stack: Stack, work: Path) -> Pair:
    cache = work / "cache"
    a = build_bundle(stack, work / "a", cache, "--profile", str(pinned_profile(work, "1.0.0")))
    b_profile = pinned_profile(work, "1.1.0")
    b = build_bundle(stack, work / "b", cache, "--profile", str(b_profile))
    return Pair(Path(str(a["bundle"])), Path(str(b["bundle"])), b_profile, cache, work)


def verl_bundle(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m verl_bundle ARGS` as a real subprocess, with the machine's pip/uv settings
    stripped."""
    environ = clean_environ(cwd or Path.cwd())
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "verl_bundle", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
        cwd=cwd,
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    doc = json.loads(proc.stdout)
    out: dict[str, object] = doc["result"]
    return out


def ssh_key(folder: Path, who: str) -> Path:
    """A new ed25519 key pair (no passphrase) made with the real ssh-keygen; the private key's
    path (FILE.pub beside it)."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    key = folder / f"id_{who}"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(key)],
        check=True,
        timeout=60,
    )
    return key


def allowed_signers(folder: Path, *keys: tuple[str, Path]) -> Path:
    """An allowed-signers file (`PRINCIPAL KEYTYPE KEY` lines) for the given (principal, key)."""
    path = folder / "allowed_signers"
    lines = []
    for who, key in keys:
        kind, blob = key.with_name(key.name + ".pub").read_text().split()[:2]
        lines.append(f'{who} namespaces="verl-bundle" {kind} {blob}')
    path.write_text("\n".join(lines) + "\n")
    return path


def python_lib(bundle_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The server program (`python3 -m verl_bundle.airgap COMMAND ...`) run from the bundle's
    own lib/, isolated, as install.sh runs it."""
    code = (
        f"import sys; sys.path.insert(0, {str(bundle_dir / 'lib')!r}); "
        "from verl_bundle.airgap.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-I", "-B", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_environ(bundle_dir.parent),
    )


def gnupg_home(folder: Path) -> dict[str, str]:
    """A GnuPG home with one new signing key (no passphrase); its environment. The agent it
    starts is stopped by `stop_gnupg`."""
    if shutil.which("gpg") is None or shutil.which("gpgv") is None:
        pytest.skip("gpg and gpgv are not installed")
    home = folder / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "Bundle Signer <signer@example.invalid>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env=env,
    )
    return env


def stop_gnupg(env: dict[str, str]) -> None:
    subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, timeout=60)
