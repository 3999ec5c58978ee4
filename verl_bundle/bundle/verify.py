"""`verl-bundle verify` for everything `build` writes: a tarball or an extracted directory (the
server's own check, airgap/verify/bundle.py), a volume set (airgap/verify/volumes.py), a delta
(the files it leaves to its base are not missing), and with --allowed-signers its signature
(airgap/verify/signature.py) before anything else. It imports no part of the build (the
check loads only the server's standard-library code).
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.bundle import Problem, Report, verify
from verl_bundle.airgap.verify.signature import check_bundle, check_tarball
from verl_bundle.airgap.verify.volumes import verify_volumes


@dataclass(frozen=True)
class Checked:
    """The server check's report, and lines on what it means for a delta, a volume set or a
    signature (notes, shown on stderr)."""

    report: Report
    notes: tuple[str, ...] = ()


def volume_set(path: Path) -> tuple[Path, list[Path]] | None:
    """(the joined tarball's name, its volumes) when `path` names a volume set: its .sha256
    list, one of its volumes, or the joined name with volumes beside it."""
    name = path.name.removesuffix(".sha256")
    if re.search(r"\.\d{3}$", name):
        name = name[:-4]
    tarball = path.with_name(name)
    if tarball.is_file():
        return None
    found = sorted(p for p in path.parent.glob(f"{glob.escape(name)}.[0-9][0-9][0-9]"))
    return (tarball, found) if found else None


def _delta(report: Report, path: Path) -> list[str]:
    """A delta's omitted files are reported missing by the full check: they are not damage."""
    try:
        if path.is_dir():
            m = mf.load(str(path))
        else:
            from verl_bundle.bundle.read import open_bundle

            m = open_bundle(path).manifest
    except Exception:
        return []
    if m.delta is None:
        return []
    omitted = set(m.delta.omitted)
    left = [p for p in report.problems if p.path in omitted and p.what == "missing"]
    report.problems = [p for p in report.problems if p not in left]
    report.checked -= len(left)
    return [
        f"a delta of {m.delta.base}: {len(left)} file(s) are left to the base; install with "
        "install.sh --base OLD_DIR (the extracted base bundle)"
    ]


def check(path: Path, allowed_signers: Path | None = None) -> Checked:
    """Check what `build` wrote at `path`; the signature first when `allowed_signers` is given
    (a refusal is the only problem then)."""
    split = volume_set(path) if not path.is_dir() else None
    notes: list[str] = []
    if allowed_signers is not None:
        if path.is_dir():
            verdict = check_bundle(str(path), str(allowed_signers))
        else:
            verdict = check_tarball(str(split[0] if split else path), str(allowed_signers))
        if not verdict.ok:
            return Checked(Report(str(path), 0, [Problem("signature", verdict.line)]))
        notes.append(verdict.line)
    if split is not None:
        vols = verify_volumes(str(split[0]) + ".sha256")
        report = Report(
            vols.listing,
            vols.checked,
            [Problem(p, w) for p, w in vols.problems],
            what="volumes match their list",
        )
        notes.append(
            f"{len(split[1])} volumes; join them with `cat {split[0].name}.[0-9][0-9][0-9] | tar x`"
        )
        return Checked(report, tuple(notes))
    report = verify(str(path))
    notes += _delta(report, path)
    return Checked(report, tuple(notes))
