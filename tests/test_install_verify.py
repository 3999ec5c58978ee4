"""install.sh verifies the payload behind the install (install/verification.py): a damaged file
of a later phase still fails the install with exit 3, before its phase starts, and leaves
nothing under final names; a rerun with a good copy installs. Run with the network cut."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.airgap import install_into

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.contract.events import read_events
from verl_bundle.airgap.install.verification import Verification

pytestmark = pytest.mark.slow


def flip(path: Path) -> bytes:
    """Flip one byte in the middle of `path`; returns the original bytes."""
    good = path.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return good


def last_phase_wheel(bundle: Path) -> tuple[str, Path]:
    m = mf.load(str(bundle))
    last = m.phases[-1].name
    wheel = next(f for f in m.files_of(last) if f.path.endswith(".whl"))
    return last, bundle / wheel.path


def test_the_payload_is_hashed_in_install_order(bundle: Path) -> None:
    m = mf.load(str(bundle))
    checking = Verification(str(bundle), m)
    assert mf.SUMS in checking.first and mf.MANIFEST in checking.first
    generated = {g.path for g in m.generated} | {mf.SUMS, mf.MANIFEST}
    assert all(p.startswith("lib/") or p in generated for p in checking.first)
    rank = {f.path: i for i, p in enumerate(m.phases) for f in m.files_of(p.name)}
    order = [p for p in checking.later if p in rank]
    assert [f.path for f in m.bootstrap] == checking.later[: len(m.bootstrap)]
    assert [rank[p] for p in order] == sorted(rank[p] for p in order)
    assert checking.begin() is True
    assert checking.require(order) is True
    assert checking.finish().ok


def test_a_damaged_file_of_a_later_phase_fails_before_its_phase_and_leaves_nothing(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    last, wheel = last_phase_wheel(bundle)
    good = flip(wheel)
    prefix = tmp_path / "venv"
    events = tmp_path / "events.jsonl"
    proc = install_into(bundle, home, prefix, "--yes", "--events", str(events))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"{wheel.relative_to(bundle)}: altered: sha256" in proc.stderr
    assert "nothing was installed" in proc.stderr
    assert not prefix.exists()  # the venv this run made (and any phase in it) is gone again
    started = [e["phase"] for e in read_events(str(events)) if e["event"] == "phase"]
    assert last not in started  # the damaged phase never began
    # Resumable: with a good copy, the same command installs.
    wheel.write_bytes(good)
    again = install_into(bundle, home, prefix, "--yes")
    assert again.returncode == 0, again.stdout + again.stderr


def test_an_existing_environment_is_not_changed_by_a_damaged_bundle(
    bundle: Path, home: Path, tmp_path: Path
) -> None:
    """Into a venv an earlier run made, no phase starts before every file is verified."""
    prefix = tmp_path / "venv"
    first = install_into(bundle, home, prefix, "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    m = mf.load(str(bundle))
    state = prefix / ".verl-bundle"
    (state / f"done-{m.phases[0].name}").unlink()  # the first phase would be installed again
    _, wheel = last_phase_wheel(bundle)
    flip(wheel)
    before = sorted(p.name for p in state.iterdir())
    proc = install_into(bundle, home, prefix, "--yes")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"nothing was changed in {prefix}" in proc.stderr
    assert not (state / f"started-{m.phases[0].name}").exists()
    after = sorted(p.name for p in state.iterdir())
    assert [n for n in after if n.startswith(("done-", "started-"))] == [
        n for n in before if n.startswith(("done-", "started-"))
    ]
