"""Signed bundles (build --sign KEY), checked offline with the real ssh-keygen (and gpgv):
good, wrong signer, altered after signing, missing signature; each refusal one line."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Stack, shared_build
from support.airgap import extract
from support.crossing import (
    NAME,
    Pair,
    allowed_signers,
    gnupg_home,
    python_lib,
    result,
    ssh_key,
    stop_gnupg,
    verl_bundle,
)
from support.shared import Value, once

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.signature import check_bundle, check_tarball, ssh_key_of


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """alice's and mallory's ssh keys, made once per run (read-only)."""

    def make(folder: Path) -> Value:
        return {who: str(ssh_key(folder, who)) for who in ("alice", "mallory")}

    made = once(tmp_path_factory, "signature.keys", make)
    assert isinstance(made, dict)
    return {who: Path(str(key)) for who, key in made.items()}


@pytest.fixture(scope="module")
def signed(
    pinned_pair: Pair, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, object]]:
    """Bundle B signed by alice, once per run (read-only): its folder and build JSON."""

    def build(stack: Stack, out: Path) -> Value:
        args = stack.args(
            "build", out, pinned_pair.cache, "--profile", str(pinned_pair.new_profile)
        )
        proc = verl_bundle(*args, "--sign", str(keys["alice"]), "--json")
        assert proc.returncode == 0, proc.stderr
        return {"out": str(out), "result": result(proc)}

    built = shared_build(tmp_path_factory, "signature.signed", build)
    assert isinstance(built, dict) and isinstance(built["result"], dict)
    return Path(str(built["out"])), built["result"]


def test_build_signs_the_manifest_inside_and_the_list_beside(
    signed: tuple[Path, dict[str, object]], keys: dict[str, Path], tmp_path: Path
) -> None:
    out, doc = signed
    tarball = out / f"{NAME}.tar"
    assert doc["signature"] == str(out / f"{NAME}.tar.sha256.sig")
    root = extract(tarball, tmp_path / "x")
    assert (root / mf.SIGNATURE).read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    assert mf.SIGNATURE in (root / mf.SUMS).read_text()
    # the key named from the signature is the one ssh-keygen names
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(keys["alice"]) + ".pub"], capture_output=True, text=True
    ).stdout.split()[1]
    assert ssh_key_of((root / mf.SIGNATURE).read_bytes()) == f"ED25519 key {fingerprint}"
    # the real ssh-keygen checks both signatures
    allowed = allowed_signers(tmp_path, ("alice", keys["alice"]))
    for data, sig in (
        (root / mf.MANIFEST, root / mf.SIGNATURE),
        (out / f"{NAME}.tar.sha256", out / f"{NAME}.tar.sha256.sig"),
    ):
        with data.open("rb") as fh:
            proc = subprocess.run(
                [
                    "ssh-keygen",
                    "-Y",
                    "verify",
                    "-f",
                    str(allowed),
                    "-I",
                    "alice",
                    "-n",
                    "verl-bundle",
                    "-s",
                    str(sig),
                ],
                stdin=fh,
                capture_output=True,
                text=True,
            )
        assert proc.returncode == 0, proc.stderr


def test_good_signer_passes_on_the_tarball_and_the_extracted_bundle(
    signed: tuple[Path, dict[str, object]], keys: dict[str, Path], tmp_path: Path
) -> None:
    out, _ = signed
    allowed = allowed_signers(tmp_path, ("alice", keys["alice"]))
    verdict = check_tarball(str(out / f"{NAME}.tar"), str(allowed))
    assert verdict.ok and verdict.signer == "alice", verdict.line
    root = extract(out / f"{NAME}.tar", tmp_path / "x")
    proc = python_lib(root, "verify", "--allowed-signers", str(allowed), str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("signed: manifest.json signed by alice (ED25519 key SHA256:")
    assert proc.stdout.rstrip().splitlines()[-1].startswith("OK: ")
    host = verl_bundle("verify", "--allowed-signers", str(allowed), str(out / f"{NAME}.tar"))
    assert host.returncode == 0, host.stdout + host.stderr
    assert "signed by alice" in host.stderr


def test_a_wrong_signer_is_refused_in_one_line(
    signed: tuple[Path, dict[str, object]], keys: dict[str, Path], tmp_path: Path
) -> None:
    out, _ = signed
    allowed = allowed_signers(tmp_path, ("mallory", keys["mallory"]))
    root = extract(out / f"{NAME}.tar", tmp_path / "x")
    proc = python_lib(root, "verify", "--allowed-signers", str(allowed), str(root))
    assert proc.returncode == 3
    line = proc.stdout.splitlines()[0]
    assert line.startswith("FAILED: signature: manifest.json is signed by ED25519 key SHA256:")
    assert f"which {allowed} does not allow" in line
    host = verl_bundle("verify", "--allowed-signers", str(allowed), str(out / f"{NAME}.tar"))
    assert host.returncode == 3 and "does not allow" in host.stdout


def test_a_file_altered_after_signing_is_refused(
    signed: tuple[Path, dict[str, object]], keys: dict[str, Path], tmp_path: Path
) -> None:
    out, _ = signed
    allowed = allowed_signers(tmp_path, ("alice", keys["alice"]))
    root = extract(out / f"{NAME}.tar", tmp_path / "x")
    manifest = root / mf.MANIFEST
    manifest.write_text(manifest.read_text().replace('"purpose": "', '"purpose": "x'))
    verdict = check_bundle(str(root), str(allowed))
    assert not verdict.ok
    assert verdict.line.startswith("manifest.json was altered after alice (ED25519 key SHA256:")
    # and the list beside the tarball
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in out.glob(f"{NAME}.tar*"):
        shutil.copy(f, copy)
    side = copy / f"{NAME}.tar.sha256"
    side.write_text("0" * 64 + side.read_text()[64:])
    assert "was altered after alice" in check_tarball(str(copy / f"{NAME}.tar"), str(allowed)).line


def test_a_signature_under_another_namespace_is_named_as_such(
    signed: tuple[Path, dict[str, object]], keys: dict[str, Path], tmp_path: Path
) -> None:
    """An allowed key's signature made for another purpose (`-n file`) is no release signature:
    said so, not called an alteration (ssh-keygen only says it could not verify)."""
    out, _ = signed
    allowed = allowed_signers(tmp_path, ("alice", keys["alice"]))
    root = extract(out / f"{NAME}.tar", tmp_path / "x")
    (root / mf.SIGNATURE).unlink()
    subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "sign",
            "-q",
            "-f",
            str(keys["alice"]),
            "-n",
            "file",
            root / mf.MANIFEST,
        ],
        check=True,
        timeout=60,
    )
    verdict = check_bundle(str(root), str(allowed))
    assert not verdict.ok
    assert verdict.line.startswith(
        "manifest.json is signed under namespace 'file', not 'verl-bundle': not a verl-bundle "
        "release signature; nothing was installed."
    ), verdict.line


def test_an_unsigned_bundle_is_refused(
    pinned_pair: Pair, keys: dict[str, Path], tmp_path: Path
) -> None:
    allowed = allowed_signers(tmp_path, ("alice", keys["alice"]))
    root = extract(pinned_pair.old, tmp_path / "x")
    verdict = check_bundle(str(root), str(allowed))
    assert not verdict.ok
    assert verdict.line == (
        "manifest.json is not signed (no manifest.json.sig); nothing was installed. Ask for a "
        "bundle built with `verl-bundle build --sign KEY`"
    )
    assert "is not signed" in check_tarball(str(pinned_pair.old), str(allowed)).line


def test_a_missing_key_stops_the_build_before_any_fetch(
    stack: Stack, pinned_pair: Pair, tmp_path: Path
) -> None:
    args = stack.args(
        "build", tmp_path / "out", tmp_path / "cache", "--profile", str(pinned_pair.new_profile)
    )
    proc = verl_bundle(*args, "--sign", str(tmp_path / "no-such-key"))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "no readable SSH key there" in line
    assert not (tmp_path / "cache").exists() and stack.pypi.file_requests() == []


@pytest.fixture
def gnupg(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = gnupg_home(tmp_path)
    yield env
    stop_gnupg(env)


def test_gpg_signs_where_a_site_uses_it(
    stack: Stack, pinned_pair: Pair, gnupg: dict[str, str], tmp_path: Path
) -> None:
    args = stack.args(
        "build", tmp_path / "out", pinned_pair.cache, "--profile", str(pinned_pair.new_profile)
    )
    proc = verl_bundle(
        *args, "--sign", "gpg:signer@example.invalid", env={"GNUPGHOME": gnupg["GNUPGHOME"]}
    )
    assert proc.returncode == 0, proc.stderr
    keyring = tmp_path / "allowed.gpg"
    keyring.write_bytes(
        subprocess.run(
            ["gpg", "--export", "signer@example.invalid"],
            capture_output=True,
            env=gnupg,
            check=True,
        ).stdout
    )
    # the gate the build printed, run as printed where the files are: gpgv, then sha256sum
    lines = proc.stdout.splitlines()
    gate = [
        x.strip() for x in lines[lines.index(next(x for x in lines if "the gate" in x)) + 1 :][:2]
    ]
    assert gate == [
        f"gpgv --keyring ./allowed.gpg {NAME}.tar.sha256.asc {NAME}.tar.sha256",
        f"sha256sum -c {NAME}.tar.sha256",
    ]
    shutil.copy(keyring, tmp_path / "out" / "allowed.gpg")
    ran = subprocess.run(
        ["sh", "-c", " && ".join(gate)], cwd=tmp_path / "out", capture_output=True, timeout=120
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    root = extract(tmp_path / "out" / f"{NAME}.tar", tmp_path / "x")
    assert (root / mf.SIGNATURE_GPG).read_text().startswith("-----BEGIN PGP SIGNATURE-----")
    good = check_bundle(str(root), str(keyring))
    assert good.ok and "Bundle Signer" in good.line, good.line
    other = tmp_path / "other.gpg"
    other.write_bytes(b"")
    assert "does not hold" in check_bundle(str(root), str(other)).line
    (root / mf.MANIFEST).write_text((root / mf.MANIFEST).read_text() + " ")
    assert "was altered after it was signed" in check_bundle(str(root), str(keyring)).line


def test_install_sh_refuses_an_unallowed_signer_before_anything_runs(
    signed: tuple[Path, dict[str, object]], keys: dict[str, Path], tmp_path: Path, home: Path
) -> None:
    """install.sh --allowed-signers: refused in one line, exit 3, before the doctor, the venv
    or any file of the bundle is used; the right signer installs."""
    from support.airgap import install_into

    out, _ = signed
    root = extract(out / f"{NAME}.tar", tmp_path / "x")
    (tmp_path / "w").mkdir()
    wrong = allowed_signers(tmp_path / "w", ("mallory", keys["mallory"]))
    prefix = tmp_path / "venv"
    proc = install_into(root, home, prefix, "--yes", "--allowed-signers", str(wrong))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "manifest.json is signed by ED25519 key" in proc.stderr
    assert f"which {wrong} does not allow" in proc.stderr
    assert "==> [3/7] doctor" not in proc.stdout and not prefix.exists()
    good = allowed_signers(tmp_path, ("alice", keys["alice"]))
    proc = install_into(root, home, prefix, "--yes", "--allowed-signers", str(good))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "manifest.json signed by alice (ED25519 key SHA256:" in proc.stdout
