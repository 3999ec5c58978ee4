"""The trust root outside the bundle (airgap/trust): the release number a build signs into the
manifest, the downgrade install.sh refuses, and the installed verifier: set up once from an
approved bundle, it checks every later one with its own code and keys, so a forged bundle
whose own checks pass is refused. Real bundles of the toy stack, signed with the real
ssh-keygen; installs run offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Stack, shared_build
from support.airgap import extract, find_python, install_into
from support.bundlefix import replace_wheel
from support.crossing import NAME, Pair, allowed_signers, python_lib, result, ssh_key, verl_bundle
from support.shared import Value

from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.trust import release

OLD, NEW = 100, 200  # the releases the two signed bundles are built with


@dataclass(frozen=True)
class Signed:
    """Bundles A (einops 1.0.0, release OLD) and B (1.1.0, release NEW), each signed by
    alice, each in its own folder with its .sha256 and .sha256.sig; the keys."""

    old: Path
    new: Path
    alice: Path
    mallory: Path
    signers: Path  # allows alice
    gate: tuple[str, ...]  # B's gate, from build --json


@pytest.fixture(scope="module")
def signed(pinned_pair: Pair, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    """Built once per run (read-only)."""
    from support.crossing import pinned_profile

    def build(stack: Stack, work: Path) -> Value:
        keys = work / "keys"
        keys.mkdir()
        alice, mallory = ssh_key(keys, "alice"), ssh_key(keys, "mallory")
        built: dict[int, str] = {}
        gates: dict[int, list[object]] = {}
        for number, profile in ((OLD, "1.0.0"), (NEW, "1.1.0")):
            out = work / str(number)
            prof = pinned_profile(work, profile)
            args = stack.args("build", out, pinned_pair.cache, "--profile", str(prof))
            proc = verl_bundle(*args, "--sign", str(alice), "--release", str(number), "--json")
            assert proc.returncode == 0, proc.stderr
            built[number] = str(result(proc)["bundle"])
            gate = result(proc)["gate"]
            assert isinstance(gate, list)
            gates[number] = gate
        signers = allowed_signers(keys, ("alice", alice))
        return [built[OLD], built[NEW], str(alice), str(mallory), str(signers), gates[NEW]]

    made = shared_build(tmp_path_factory, "trust.signed", build)
    assert isinstance(made, list) and isinstance(made[5], list)
    assert all(isinstance(line, str) for line in made[5])
    old, new, alice, mallory, signers = (Path(str(p)) for p in made[:5])
    return Signed(old, new, alice, mallory, signers, tuple(str(line) for line in made[5]))


def manifest_of(tarball: Path) -> dict[str, object]:
    with tarfile.open(tarball) as tf:
        doc: dict[str, object] = json.load(tf.extractfile(f"{NAME}/{mf.MANIFEST}"))  # type: ignore[arg-type]
    return doc


# -- the release number -------------------------------------------------------------------------


def test_build_signs_the_release_into_the_manifest(signed: Signed, pinned_pair: Pair) -> None:
    """`build --release N` is the manifest's release; without it, the lock's time."""
    assert manifest_of(signed.old)["release"] == OLD
    assert manifest_of(signed.new)["release"] == NEW
    doc = manifest_of(pinned_pair.new)
    assert doc["release"] == release.of_time(str(doc["created"])) > 20_000_000_000_000
    assert release.of_time("2026-12-03T13:16:43Z") == 20261203131643
    assert release.of_time("") == 0


def test_install_sh_refuses_an_older_release_over_a_newer_one(
    signed: Signed, tmp_path: Path, home: Path
) -> None:
    """B installed, then A into the same prefix: refused in one line before anything
    changes (exit 3), unless --allow-downgrade. Against accidents: install.sh is the bundle's."""
    prefix = tmp_path / "venv"
    new = extract(signed.new, tmp_path / "b")
    old = extract(signed.old, tmp_path / "a")
    proc = install_into(new, home, prefix, "--yes", "--quick")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    recorded = json.loads((prefix / ".verl-bundle" / release.RECORD).read_text())
    assert recorded["release"] == NEW and recorded["name"] == NAME
    proc = install_into(old, home, prefix, "--yes", "--quick")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr
    assert (
        f"{NAME} is release {OLD}, older than release {NEW} ({NAME}) installed in {prefix}; "
        "nothing was installed. Install the newer bundle, or pass --allow-downgrade"
    ) in proc.stderr
    assert "==> [2/7]" not in proc.stdout
    assert "einops-1.1.0.dist-info" in str(list((prefix / "lib").glob("python*/site-packages/*")))
    dry = install_into(old, home, prefix, "--yes", "--dry-run")
    assert dry.returncode == 3 and "older than release" in dry.stderr
    proc = install_into(old, home, prefix, "--yes", "--quick", "--allow-downgrade")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert f"--allow-downgrade: release {OLD} replaces {NEW}" in proc.stdout
    recorded = json.loads((prefix / ".verl-bundle" / release.RECORD).read_text())
    assert recorded["release"] == OLD


def test_install_sh_help_says_its_signature_check_catches_accidents_only() -> None:
    from verl_bundle.airgap.install.options import usage

    text = " ".join(usage(None).split())
    assert "catches a damaged or unsigned copy, not a forged one" in text
    assert "ssh-keygen -Y verify of NAME.tar.sha256.sig, then sha256sum -c NAME.tar.sha256" in text


# -- the installed verifier ---------------------------------------------------------------------


def the_python() -> str:
    """The oldest Python the server program supports, when this host has it."""
    return find_python("3.8") or sys.executable


def setup_verifier(signed: Signed, tmp_path: Path) -> Path:
    """The verifier installed from A (approved: the gate passed), into tmp_path/root."""
    root = tmp_path / "root"
    approved = extract(signed.old, tmp_path / "approved")
    entry = approved / "lib/verl_bundle/airgap/trust"
    proc = subprocess.run(
        [
            the_python(),
            "-I",
            "-B",
            entry,
            "setup",
            "--allowed-signers",
            signed.signers,
            "--root",
            root,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"installed verl-bundle-verify from {NAME} (release {OLD}) in {root}" in proc.stdout
    shutil.rmtree(approved.parent)  # the verifier needs nothing of the bundle it came from
    return root


def verify(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "bin" / "verl-bundle-verify"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": "/nonexistent"},
    )


def copy_of(tarball: Path, dest: Path) -> Path:
    """The tarball with its .sha256 and .sha256.sig, as it arrives in `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in tarball.parent.glob(tarball.name + "*"):
        shutil.copy(f, dest)
    return dest / tarball.name


def test_the_installed_verifier_checks_later_bundles_and_refuses_a_downgrade(
    signed: Signed, tmp_path: Path
) -> None:
    root = setup_verifier(signed, tmp_path)
    assert json.loads((root / "VERIFIER.json").read_text())["name"] == NAME
    proc = verify(root, str(signed.new))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    assert line.startswith(
        f"OK: {NAME} release {NEW}: {NAME}.tar.sha256 signed by alice (ED25519 key SHA256:"
    ) and line.endswith("files match SHA256SUMS and the manifest, through the tarball's .sha256")
    accepted = json.loads((root / "accepted.json").read_text())["lines"]
    assert [v["release"] for v in accepted.values()] == [NEW]
    # A is older than B, accepted now: refused, unless asked for
    proc = verify(root, str(signed.old))
    assert proc.returncode == 3
    assert proc.stderr.startswith(
        f"REFUSED: {NAME} is release {OLD}, older than release {NEW} ({NAME}) accepted by "
        "verl-bundle-verify before"
    ), proc.stderr
    assert verify(root, str(signed.old), "--allow-downgrade").returncode == 0
    doc = json.loads(verify(root, str(signed.new), "--json").stdout)
    assert doc["command"] == "verify" and doc["result"]["release"] == NEW
    # a store another user could write is no root of trust
    os.chmod(root / "allowed_signers", 0o666)  # noqa: S103 - the hazard under test
    proc = verify(root, str(signed.new))
    assert proc.returncode == 4 and "is writable by other users" in proc.stderr
    os.chmod(root / "allowed_signers", 0o644)
    assert verify(root, str(tmp_path)).returncode == 2  # a directory is not as it arrived


def forge(tarball: Path, work: Path) -> Path:
    """H1's forgery of a signed bundle: its own signature check patched to say yes, the einops
    wheel swapped for one with more in it, manifest.json and SHA256SUMS made to agree, the
    tarball written again beside the ORIGINAL .sha256 and .sha256.sig. Its extracted
    directory is returned; the tarball is work/NAME.tar."""
    root = extract(tarball, work / "x")
    check = root / "lib/verl_bundle/airgap/verify/signature.py"
    text = check.read_text()
    head = "def check(signed: str, allowed: str) -> Signed:\n"
    forged = '    return Signed(True, "manifest.json signed by alice (forged)", "alice")\n'
    check.write_text(text.replace(head, head + forged, 1))
    replace_wheel(root, "einops", bulk=1)  # re-makes the manifest and SHA256SUMS
    with tarfile.open(work / tarball.name, "w") as tf:
        tf.add(root, arcname=NAME)
    for suffix in (".sha256", ".sha256.sig"):
        shutil.copy(tarball.parent / (tarball.name + suffix), work)
    return root


def test_a_forged_bundle_passes_its_own_checks_and_the_installed_verifier_refuses_it(
    signed: Signed, tmp_path: Path
) -> None:
    """H1: the forged bundle's own verify --allowed-signers says OK (its code is the forger's);
    the installed verifier, the OS-only gate and the host's verify refuse it."""
    root = setup_verifier(signed, tmp_path)
    work = tmp_path / "forged"
    work.mkdir()
    forged_dir = forge(signed.new, work)
    own = python_lib(
        forged_dir, "verify", "--allowed-signers", str(signed.signers), str(forged_dir)
    )
    assert own.returncode == 0 and "signed: manifest.json signed by alice (forged)" in own.stdout
    proc = verify(root, str(work / f"{NAME}.tar"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"FAILED: {NAME}.tar: does not match {NAME}.tar.sha256" in proc.stderr
    assert not proc.stdout
    gate = subprocess.run(
        ["sha256sum", "-c", f"{NAME}.tar.sha256"], cwd=work, capture_output=True, timeout=120
    )
    assert gate.returncode == 1
    host = verl_bundle(
        "verify", "--allowed-signers", str(signed.signers), str(work / f"{NAME}.tar")
    )
    assert host.returncode == 3
    # the list re-made for the forged tarball: its signature no longer holds
    listing = work / f"{NAME}.tar.sha256"
    digest = subprocess.run(
        ["sha256sum", f"{NAME}.tar"], cwd=work, capture_output=True, text=True, check=True
    ).stdout
    listing.write_text(digest)
    proc = verify(root, str(work / f"{NAME}.tar"))
    assert proc.returncode == 3
    assert f"REFUSED: {NAME}.tar.sha256 was altered after alice" in proc.stderr
    # ... and signed again by a key the trust root does not hold
    (work / f"{NAME}.tar.sha256.sig").unlink()
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-f", str(signed.mallory), "-n", "verl-bundle", listing],
        check=True,
        timeout=60,
    )
    proc = verify(root, str(work / f"{NAME}.tar"))
    assert proc.returncode == 3 and "which" in proc.stderr and "does not allow" in proc.stderr


def test_upgrade_takes_the_new_code_only_after_checking_the_bundle(
    signed: Signed, tmp_path: Path
) -> None:
    root = setup_verifier(signed, tmp_path)
    before = (root / "lib/verl_bundle/airgap/trust/verifier.py").read_bytes()
    work = tmp_path / "forged"
    work.mkdir()
    forge(signed.new, work)
    proc = verify(root, str(work / f"{NAME}.tar"), "--upgrade")
    assert proc.returncode == 3
    assert not (root / "lib.prev").exists()
    assert json.loads((root / "VERIFIER.json").read_text())["release"] == OLD
    proc = verify(root, str(signed.new), "--upgrade")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"upgraded verl-bundle-verify to the code of {NAME} (release {NEW})" in proc.stdout
    origin = json.loads((root / "VERIFIER.json").read_text())
    assert origin["release"] == NEW and origin["signer"].startswith(f"{NAME}.tar.sha256 signed")
    assert (root / "lib.prev/verl_bundle/airgap/trust/verifier.py").read_bytes() == before
    with tarfile.open(signed.new) as tf:
        member = tf.extractfile(f"{NAME}/lib/verl_bundle/airgap/verify/signature.py")
        assert member is not None
        assert (root / "lib/verl_bundle/airgap/verify/signature.py").read_bytes() == member.read()
    assert verify(root, str(signed.new)).returncode == 0  # the new code runs


def test_the_verifier_compares_with_the_release_installed_in_a_prefix(
    signed: Signed, tmp_path: Path
) -> None:
    root = setup_verifier(signed, tmp_path)
    prefix = tmp_path / "venv"
    (prefix / ".verl-bundle").mkdir(parents=True)
    manifest = manifest_of(signed.new)
    rec = release.Release(NAME, NEW, str(manifest["profile"]["name"]), "0" * 64)  # type: ignore[index]
    with Confined(str(prefix / ".verl-bundle")) as state:
        release.record(state, rec)
    assert verify(root, str(signed.old)).returncode == 0  # A is what it accepted: no older
    proc = verify(root, str(signed.old), "--prefix", str(prefix))
    assert proc.returncode == 3
    assert f"older than release {NEW} ({NAME}) installed in {prefix}" in proc.stderr


@pytest.fixture(scope="module")
def signed_volumes(
    pinned_pair: Pair, signed: Signed, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """B again, in volumes of at most 4 MB, signed: its NAME.tar.sha256. Once per run
    (read-only)."""
    from support.crossing import pinned_profile

    def build(stack: Stack, out: Path) -> Value:
        args = stack.args(
            "build", out, pinned_pair.cache, "--profile", str(pinned_profile(out, "1.1.0"))
        )
        proc = verl_bundle(
            *args, "--sign", str(signed.alice), "--release", str(NEW), "--split-size", "4M"
        )
        assert proc.returncode == 0, proc.stderr
        (out / "build.txt").write_text(proc.stdout)  # the text output, for the gate's lines
        return str(out / f"{NAME}.tar.sha256")

    return Path(str(shared_build(tmp_path_factory, "trust.volumes", build)))


def test_the_verifier_checks_a_volume_set_in_one_read(
    signed: Signed, signed_volumes: Path, tmp_path: Path
) -> None:
    """Each volume and their join against the signed list, and the joined tar member by
    member (the list alone says nothing of what is inside): a stray and a damaged volume are
    refused."""
    root = setup_verifier(signed, tmp_path)
    proc = verify(root, str(signed_volumes))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "files match SHA256SUMS and the manifest" in proc.stdout
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in signed_volumes.parent.glob(f"{NAME}.tar*"):
        shutil.copy(f, copy)
    (copy / f"{NAME}.tar.0001").write_bytes(b"left beside the set")
    proc = verify(root, str(copy / f"{NAME}.tar.000"))
    assert proc.returncode == 3
    assert f"FAILED: {NAME}.tar.0001: not in {NAME}.tar.sha256: remove it" in proc.stderr
    (copy / f"{NAME}.tar.0001").unlink()
    last = sorted(copy.glob(f"{NAME}.tar.[0-9][0-9][0-9]"))[-1]
    data = bytearray(last.read_bytes())
    data[-2000] ^= 1
    last.write_bytes(bytes(data))
    proc = verify(root, str(copy / f"{NAME}.tar.sha256"))
    assert proc.returncode == 3
    assert f"FAILED: {last.name}: damaged: sha256 " in proc.stderr


def test_the_one_read_of_a_volume_set_reads_the_tar_inside(
    pinned_pair: Pair, tmp_path: Path
) -> None:
    """volumes.read_volumes, the verifier's pass: the volumes hashed against their list and,
    from the same bytes, the joined tar's members (a name twice is a problem there, as in a
    tarball), so a consistent list of a bad tar is not enough."""
    import hashlib
    import io

    from verl_bundle.airgap.verify.volumes import read_volumes

    data = pinned_pair.new.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        end = max(m.offset_data + m.size for m in tf.getmembers())
    extra = io.BytesIO()
    with tarfile.open(fileobj=extra, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(f"{NAME}/{mf.MANIFEST}")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"{}"))
    joined = data[: end + (-end) % 512] + extra.getvalue()
    size = 3_000_000
    lines = [f"{hashlib.sha256(joined).hexdigest()}  -"]
    for i in range(0, len(joined), size):
        part = tmp_path / f"{NAME}.tar.{i // size:03d}"
        part.write_bytes(joined[i : i + size])
        lines.append(f"{hashlib.sha256(part.read_bytes()).hexdigest()}  {part.name}")
    listing = tmp_path / f"{NAME}.tar.sha256"
    listing.write_text("\n".join(lines) + "\n")
    vols, done, problems = read_volumes(str(listing), None)
    assert vols.ok and vols.checked == len(lines) - 1
    assert done is not None
    assert [p.line() for p in problems] == [
        f"{NAME}/{mf.MANIFEST}: unsafe tar member: in the tarball twice (tar x keeps the later "
        "one); copy it again"
    ]


def run_gate(lines: list[str], folder: Path, signers: Path) -> subprocess.CompletedProcess[str]:
    """The printed gate, as an operator runs it: in the files' directory, PRINCIPAL filled in."""
    shutil.copy(signers, folder / "allowed_signers")
    script = " && ".join(line.replace("PRINCIPAL", "alice") for line in lines)
    return subprocess.run(
        ["sh", "-c", script], cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_build_prints_the_os_only_gate_and_it_holds(
    signed: Signed, signed_volumes: Path, tmp_path: Path
) -> None:
    """A signed build prints the two-line gate that needs only ssh-keygen and sha256sum (in
    its text after 'signed:', and in --json): run as printed, it passes the bundle and refuses
    H1's forgery; for volumes, with the three-digit glob."""
    proc = verl_bundle("build", "--help")  # the option is documented
    assert "--release" in proc.stdout
    text = (signed_volumes.parent / "build.txt").read_text().splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("signed: "))
    assert text[at + 1].startswith("the gate on the server, with the OS's tools only")
    assert text[at + 2 : at + 4] == [
        f"  ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n verl-bundle -s "
        f"{NAME}.tar.sha256.sig < {NAME}.tar.sha256",
        f"  cat {NAME}.tar.[0-9][0-9][0-9] | sha256sum -c {NAME}.tar.sha256",
    ]
    assert (
        run_gate(
            [t.strip() for t in text[at + 2 : at + 4]], signed_volumes.parent, signed.signers
        ).returncode
        == 0
    )
    built = tmp_path / "plain"
    good = copy_of(signed.new, built)
    gate = list(signed.gate)  # build --json's "gate"
    assert gate == [
        f"ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n verl-bundle -s "
        f"{good.name}.sha256.sig < {good.name}.sha256",
        f"sha256sum -c {good.name}.sha256",
    ]
    ran = run_gate(gate, built, signed.signers)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert 'Good "verl-bundle" signature for alice' in ran.stdout + ran.stderr
    assert f"{good.name}: OK" in ran.stdout
    forged = tmp_path / "forged"
    forged.mkdir()
    forge(signed.new, forged)
    ran = run_gate(gate, forged, signed.signers)
    assert ran.returncode == 1 and f"{good.name}: FAILED" in ran.stdout


def test_the_bundles_own_verify_help_says_it_catches_accidents_only() -> None:
    from verl_bundle.airgap import cli

    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    text = " ".join(sub.choices["verify"].format_help().split())  # type: ignore[index]
    assert "catches a damaged or unsigned copy, not a forged one" in text
    assert "installed verl-bundle-verify" in text


def test_inspect_shows_the_release_and_flags_a_downgrade(signed: Signed) -> None:
    proc = verl_bundle("inspect", str(signed.new), "--base", str(signed.old))
    assert proc.returncode == 0, proc.stderr
    assert f"release:   {NEW} ({NAME}: {OLD})" in proc.stdout
    proc = verl_bundle("inspect", str(signed.old), "--base", str(signed.new), "--json")
    doc = json.loads(proc.stdout)["result"]
    assert (doc["release"], doc["base_release"]) == (OLD, NEW)
    text = verl_bundle("inspect", str(signed.old), "--base", str(signed.new)).stdout
    assert f"release:   {OLD} ({NAME}: {NEW}; OLDER: a downgrade)" in text


def run_setup(bundle: Path, signers: Path, root: Path) -> subprocess.CompletedProcess[str]:
    entry = bundle / "lib/verl_bundle/airgap/trust"
    return subprocess.run(
        [the_python(), "-I", "-B", entry, "setup", "--allowed-signers", signers, "--root", root],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_setup_refuses_a_bundle_its_signers_do_not_allow_or_an_altered_lib(
    signed: Signed, tmp_path: Path
) -> None:
    """setup is the one time a bundle's code runs unchecked by code on the server: it still
    refuses a bundle the given keys did not sign, a lib/ file that is not as listed, and a
    second install over the first; nothing is left in the root when it refuses."""
    bundle = extract(signed.old, tmp_path / "x")
    root = tmp_path / "root"
    other = tmp_path / "other"
    other.mkdir()
    wrong = allowed_signers(other, ("mallory", signed.mallory))
    proc = run_setup(bundle, wrong, root)
    assert proc.returncode == 3 and "which" in proc.stderr and "does not allow" in proc.stderr
    assert not root.exists()
    altered = bundle / "lib/verl_bundle/airgap/verify/bundle.py"
    original = altered.read_bytes()
    altered.write_bytes(original + b"\n# altered\n")
    proc = run_setup(bundle, signed.signers, root)
    assert proc.returncode == 3
    assert "lib/verl_bundle/airgap/verify/bundle.py does not match SHA256SUMS" in proc.stderr
    assert not root.exists()
    altered.write_bytes(original)
    assert run_setup(bundle, signed.signers, root).returncode == 0
    origin = json.loads((root / "VERIFIER.json").read_text())
    assert origin["signer"].startswith("manifest.json signed by alice (ED25519 key SHA256:")
    again = run_setup(bundle, signed.signers, root)
    assert again.returncode == 2 and "a verifier is installed in" in again.stderr
