"""How the crossing is shown: build's lines and JSON for a delta, volumes and a signature, and
`verl-bundle inspect` as text for an approver and as JSON (pinned by tests/test_inspect.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.signature import gate_command
from verl_bundle.airgap.verify.volumes import volumes_glob
from verl_bundle.cli.render.shown import Shown, human_size

if TYPE_CHECKING:
    from verl_bundle.bundle.crossing.inspection import Inspection
    from verl_bundle.pipeline import BuildResult


def delta_json(result: BuildResult) -> dict[str, Any] | None:
    d = result.delta
    if d is None:
        return None
    return {
        "base": d.base,
        "carried_files": d.carried_files,
        "payload_files": d.payload_files,
        "size": result.bundle.size,
        "full_size": d.full_size,
    }


def build_lines(result: BuildResult) -> list[str]:
    """The delta's figures, the volumes and the signature, one line each."""
    b, d = result.bundle, result.delta
    lines = []
    if d is not None:
        lines.append(
            f"delta: {d.carried_files} of {d.payload_files} files, {human_size(b.size)} "
            f"(full bundle {human_size(d.full_size)}); install with install.sh --base OLD_DIR "
            f"(the extracted {d.base})"
        )
    if b.volumes:
        lines.append(
            f"{len(b.volumes)} volumes of at most {human_size(max(v.size for v in b.volumes))}: "
            f"{b.volumes[0].path.name} .. {b.volumes[-1].path.name}; check them with "
            f"`cat {volumes_glob(b.path.name)} | sha256sum -c {b.sidecar.name}`"
        )
    if b.signature is not None:
        lines.append(f"signed: {b.signature.name} (and manifest.json inside)")
        lines.append(
            "the gate on the server, with the OS's tools only, before anything of the bundle "
            "runs (where the files are; PRINCIPAL: the approver's name in allowed_signers):"
        )
        lines += [f"  {line}" for line in gate(result)]
    return lines


def gate(result: BuildResult) -> list[str]:
    """The two commands that check a signed bundle with nothing but the operating system's
    tools: the hash list's signature, then the tarball (or each volume and their join) against
    it. Empty for an unsigned bundle. The bundle's own checks cannot stand in for these: a
    forged bundle forges its own code."""
    b = result.bundle
    if b.signature is None:
        return []
    sums = b.sidecar.name
    first = gate_command(b.signature.name, sums)
    if b.volumes:
        return [first, f"cat {volumes_glob(b.path.name)} | sha256sum -c {sums}"]
    return [first, f"sha256sum -c {sums}"]


def inspect_json(i: Inspection) -> dict[str, Any]:
    m, o = i.manifest, i.opened
    return {
        "bundle": o.where,
        "name": m.name,
        "profile": m.profile.name,
        "target": {
            "python": m.target.python,
            "python_tag": m.target.python_tag,
            "platform": m.target.platform,
            "cuda": m.target.cuda,
            "glibc": m.target.glibc,
        },
        "created": m.created,
        "written": i.written or None,
        "created_by": m.created_by,
        "release": m.release,
        "lock_sha256": i.lock_sha256,
        "manifest_sha256": o.manifest_sha256,
        "files": len(m.files) + (1 if m.interpreter else 0),
        "payload_bytes": sum(f.size for f in m.files)
        + (m.interpreter.size if m.interpreter else 0),
        "installed_size": m.installed_size,
        "size": o.size,
        "volumes": [str(v) for v in o.volumes],
        "delta": None
        if m.delta is None
        else {"base": m.delta.base, "omitted": len(m.delta.omitted)},
        "licences": [
            {"licence": g.name, "open": g.open, "why": g.why, "components": list(g.components)}
            for g in i.licences
        ],
        "signer": {"state": i.signer.state, "line": i.signer.line},
        "base": i.base,
        "base_release": i.base_release,
        "changes": [{"name": c.name, "old": c.old, "new": c.new} for c in i.changes],
        "sources": [
            {"name": f.name, "version": f.version, **mf.source_dict(f.source)}
            for f in m.files
            if f.source is not None
        ],
    }


def _change(old: str | None, new: str | None, name: str) -> str:
    if old is None:
        return f"  + {name} {new}"
    if new is None:
        return f"  - {name} {old}"
    return f"  ~ {name} {old} -> {new}"


def inspect_text(i: Inspection) -> str:
    m, o = i.manifest, i.opened
    t = m.target
    files = len(m.files) + (1 if m.interpreter else 0)
    payload = sum(f.size for f in m.files) + (m.interpreter.size if m.interpreter else 0)
    review = [g for g in i.licences if not g.open]
    good = [g for g in i.licences if g.open]
    lines = [m.name + (f" (a delta of {m.delta.base})" if m.delta else "")]
    lines.append(
        f"profile:   {m.profile.name}"
        + (f": {m.profile.description}" if m.profile.description else "")
    )
    lines.append(
        f"target:    Python {t.python} ({t.python_tag}), {t.platform}, CUDA {t.cuda}"
        + (f", glibc >= {t.glibc}" if t.glibc else "")
    )
    lines.append(f"written:   {i.written or '?'} by {m.created_by or '?'} (the bundle file's time)")
    lines.append(f"locked:    {m.created or '?'} (when the lock was resolved)")
    release = f"release:   {m.release or '(none: built before release numbers)'}"
    if i.base_release is not None:
        older = m.release < i.base_release
        release += f" ({i.base}: {i.base_release}" + ("; OLDER: a downgrade)" if older else ")")
    lines.append(release)
    for f in m.files:
        if f.source is not None:
            lines.append(f"source:    {f.name} {f.version} from {f.source.describe()}")
    lines.append(f"lock:      pylock.toml sha256 {i.lock_sha256 or '(none)'}")
    size = f"; tarball {human_size(o.size)}" if o.size else ""
    vols = f" in {len(o.volumes)} volumes" if o.volumes else ""
    lines.append(
        f"contents:  {files} files, {human_size(payload)}, {human_size(m.installed_size)} "
        f"installed{size}{vols}"
    )
    if m.delta is not None:
        lines.append(
            f"delta:     carries {files - len(m.delta.omitted)} of {files} files; the other "
            f"{len(m.delta.omitted)} come from {m.delta.base} (install.sh --base OLD_DIR)"
        )
    lines.append(
        f"licences:  {sum(len(g.components) for g in good)} open source ("
        + ", ".join(f"{g.name} {len(g.components)}" for g in good[:6])
        + (", ..." if len(good) > 6 else "")
        + f"); {sum(len(g.components) for g in review)} to review"
        + (":" if review else "")
    )
    for g in review:
        shown = ", ".join(g.components[:8]) + (", ..." if len(g.components) > 8 else "")
        lines.append(f"  {g.name} ({len(g.components)}; {g.why}): {shown}")
    lines.append(f"signer:    {i.signer.line}")
    if i.base is not None:
        kinds = [c for c in i.changes if c.old and c.new], [c for c in i.changes if not c.old]
        gone = [c for c in i.changes if not c.new]
        lines.append(
            f"changes against {i.base}: {len(kinds[0])} changed, {len(kinds[1])} added, "
            f"{len(gone)} removed"
        )
        lines += [_change(c.old, c.new, c.name) for c in i.changes]
    lines.append(o.where)
    return "\n".join(lines)


def inspect(i: Inspection) -> Shown:
    """A refused signature exits 3, as the server's refusal does (the one exit table)."""
    from verl_bundle.airgap.checks import of_error
    from verl_bundle.airgap.errors import EXIT_DAMAGED

    refused = None if i.ok else of_error(EXIT_DAMAGED, f"refused: {i.signer.line}")
    return Shown("inspect", i.ok, inspect_json(i), inspect_text(i), verdict=refused)
