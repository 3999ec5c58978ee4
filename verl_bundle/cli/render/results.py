"""Every command's result as a `Shown`: text for people, and the JSON result that the CLI wraps
in airgap/render.py's versioned envelope for machines. The JSON shapes are pinned by tests.

Host results are rendered here (profiles in cli/render/profile.py); the server tools' (doctor,
explain) come from their own renderers in airgap/, and are wrapped the same way. Imports of result types are for the type
checker only, so that rendering costs no start-up time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl_bundle.airgap.render import LABELS
from verl_bundle.cli.render.shown import Shown, human_size

if TYPE_CHECKING:
    from verl_bundle.airgap.checks import Verdict
    from verl_bundle.airgap.doctor import Report as DoctorReport
    from verl_bundle.airgap.explain.engine import Finding
    from verl_bundle.airgap.launch.preflight import Preflight
    from verl_bundle.airgap.verify.bundle import Report
    from verl_bundle.assets.plan import AssetsBuilt
    from verl_bundle.cluster.fleet.report import FleetReport
    from verl_bundle.compile.toolchain import ToolchainReport
    from verl_bundle.fetch.wheelhouse import Wheelhouse
    from verl_bundle.pipeline import BuildResult, LockCheck, LockResult
    from verl_bundle.rehearse.rehearsal import Rehearsal
    from verl_bundle.resolve.lock import Lock


def _target(lock: Lock) -> dict[str, str]:
    return {
        "python": lock.target.python_version,
        "python_tag": lock.target.python_tag,
        "platform": lock.target.platform,
        "cuda": lock.cuda,
    }


def lock_json(result: LockResult) -> dict[str, Any]:
    lock = result.lock
    return {
        "lock": str(result.path),
        "profile": lock.profile,
        "target": _target(lock),
        "packages": [
            {
                "name": p.name,
                "version": p.version,
                "file": p.file.filename,
                "location": p.location,
                "url": p.file.url,
                "sha256": p.file.sha256,
                "size": p.file.size,
                "kind": p.kind,
                "role": p.role,
                "phase": p.phase,
            }
            for p in lock.packages
        ],
        "notes": list(result.notes),
    }


def lock_text(result: LockResult) -> str:
    lock = result.lock
    kinds = {
        k: sum(1 for p in lock.packages if p.kind == k) for k in ("wheel", "host-build", "sdist")
    }
    lines = [
        f"locked {len(lock.packages)} packages for {lock.target.describe()} (CUDA {lock.cuda}), "
        f"{human_size(lock.total_size)}: {kinds['wheel']} wheels, {kinds['host-build']} pure sdists "
        f"to build here, {kinds['sdist']} to build on the server",
        str(result.path),
    ]
    return "\n".join(lines)


def build_json(result: BuildResult) -> dict[str, Any]:
    from verl_bundle.cli.render import crossing

    b, w = result.bundle, result.wheelhouse
    return {
        "bundle": str(b.path.resolve()),
        "sha256": b.sha256,
        "size": b.size,
        "files": b.files,
        "profile": result.lock.profile,
        "target": _target(result.lock),
        "lock": result.lock_source,
        "packages": len(result.lock.packages),
        "downloaded": {"files": w.downloaded_files, "bytes": w.downloaded_bytes},
        "cached_files": w.cached_files,
        "written_as_fetched": b.early_files,
        "host_built": w.host_built,
        "compiled": list(w.compiled),
        "interpreter": _interpreter(w),
        "volumes": [
            {"path": str(v.path.resolve()), "sha256": v.sha256, "size": v.size} for v in b.volumes
        ],
        "sidecar": str(b.sidecar.resolve()),
        "signature": str(b.signature.resolve()) if b.signature else None,
        "gate": crossing.gate(result),
        "delta": crossing.delta_json(result),
        "notes": list(result.notes),
    }


def _interpreter(w: Wheelhouse) -> dict[str, Any] | None:
    """The bundled CPython (build --with-python), or None."""
    if w.interpreter is None:
        return None
    e = w.interpreter.entry
    return {"path": e.path, "version": e.version, "sha256": e.sha256, "size": e.size}


def build_text(result: BuildResult) -> str:
    from verl_bundle.cli.render import crossing

    b, w = result.bundle, result.wheelhouse
    python = w.interpreter.entry if w.interpreter else None
    return "\n".join(
        [
            f"{len(result.lock.packages)} packages for {result.lock.target.describe()} "
            f"(CUDA {result.lock.cuda}); downloaded {w.downloaded_files} files "
            f"({human_size(w.downloaded_bytes)}), {w.cached_files} from the cache, "
            f"{w.host_built} built into wheels here",
            *w.compiled,
            *(
                [f"bundled CPython {python.version} ({python.path}, {human_size(python.size)})"]
                if python
                else []
            ),
            f"bundle: {human_size(b.size)}, sha256 {b.sha256}"
            + (
                f"; {b.early_files} files written into it as their downloads ended"
                if b.early_files
                else ""
            ),
            *crossing.build_lines(result),
            str((b.sidecar if b.volumes else b.path).resolve()),
        ]
    )


def verify_json(report: Report) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "subject": report.subject,
        "checked": report.checked,
        "problems": [{"path": p.path, "problem": p.what} for p in report.problems],
        "extra": report.extra,
    }


def verify_text(report: Report) -> str:
    """Each problem, then the verdict line (verify's own: intact or damaged, exit 3)."""
    return "\n".join([*(f"FAILED: {p.line()}" for p in report.problems), _verified(report).line])


def _verified(report: Report) -> Verdict:
    from verl_bundle.airgap.checks import of_verify

    extra = f"; {len(report.extra)} extra files not in the bundle" if report.extra else ""
    return of_verify(
        [p.line() for p in report.problems], f"OK: {report.checked} {report.what}{extra}"
    )


def lock_check_json(check: LockCheck) -> dict[str, Any]:
    return {
        "lock": str(check.path),
        "current": check.current,
        "profile_changed": check.profile_changed,
        "differences": list(check.differences),
    }


def lock_check_text(check: LockCheck) -> str:
    if check.current:
        extra = (
            " (the profile file changed, but resolves the same)" if check.profile_changed else ""
        )
        return f"{check.path}: current; the profile resolves to exactly this lock today{extra}"
    lines = [f"{check.path}: out of date; resolving the profile today gives:"]
    lines += [f"  {d}" for d in check.differences]
    lines.append("run `verl-bundle lock` with the same options to update it")
    return "\n".join(lines)


def rehearsal_json(r: Rehearsal) -> dict[str, Any]:
    return {
        "ok": r.ok,
        "installed": r.installed,
        "not_rehearsed": [{"phase": p, "why": w} for p, w in r.not_rehearsed],
        "bundle": str(r.bundle),
        "python": r.python,
        "network": r.network,
        "steps": [
            {"name": s.name, "status": s.status, "seconds": round(s.seconds, 2), "detail": s.detail}
            for s in r.steps
        ],
        "log_tail": list(r.log_tail),
    }


def rehearsal_text(r: Rehearsal) -> str:
    lines = [f"rehearsal of {r.bundle.name} with {r.python or '?'}, network cut ({r.network})"]
    width = max((len(s.name) for s in r.steps), default=10)
    for s in r.steps:
        timing = f"{s.seconds:7.1f} s" if s.status in ("ok", "fail") else " " * 9
        label = LABELS[s.status]
        lines.append(f"  {label:<9} {s.name:<{width}} {timing}  {s.detail}".rstrip())
    if not r.installed:
        lines.append("the last lines of install.sh:")
        lines += [f"    {t}" for t in r.log_tail]
    lines.append(r.last_line)
    return "\n".join(lines)


def _notes(notes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n if n.startswith("note:") else f"note: {n}" for n in notes)


# -- one Shown per command ---------------------------------------------------------------------


def lock(result: LockResult) -> Shown:
    return Shown("lock", True, lock_json(result), lock_text(result), _notes(result.notes))


def lock_check(check: LockCheck) -> Shown:
    return Shown("lock", check.current, lock_check_json(check), lock_check_text(check))


def build(result: BuildResult) -> Shown:
    return Shown("build", True, build_json(result), build_text(result), _notes(result.notes))


def verify(report: Report) -> Shown:
    v = _verified(report)
    return Shown("verify", v.ok, verify_json(report), verify_text(report), verdict=v)


def rehearsal(r: Rehearsal) -> Shown:
    """Ends with install.sh's own verdict; exits with its code (0 only when ready to train)."""
    return Shown("rehearse", r.ok, rehearsal_json(r), rehearsal_text(r), verdict=r.verdict)


def doctor(report: DoctorReport) -> Shown:
    from verl_bundle.airgap import doctor as server

    v = report.verdict
    text = server.render_text(report)
    return Shown("doctor", v.ok, server.render_json(report), text, verdict=v)


def explain(findings: list[Finding], log: str) -> Shown:
    from verl_bundle.airgap.explain import engine as server

    text = server.render_text(findings, log)
    v = server.verdict_of(findings)
    return Shown("explain", v.ok, server.result_json(findings, log), text, verdict=v)


def fleet(report: FleetReport) -> Shown:
    """Nodes x (install, checks), then each missing, stale or failed node in one line with its
    fix, each drift with the nodes on each side, and a verdict."""
    ids = report.check_ids()
    width = max([len(n.name) for n in report.nodes] + [4])
    header = f"{'node':<{width}}  install  " + "  ".join(ids)

    def install(rc: int | None) -> str:
        return "-" if rc is None else ("ok" if rc == 0 else f"exit {rc}")

    rows = [
        f"{n.name:<{width}}  {install(n.install_rc):<7}  "
        + "  ".join(f"{LABELS.get(dict(n.checks).get(i, '-'), '-'):<{len(i)}}" for i in ids)
        for n in report.nodes
    ]
    lines = [header, *rows]
    for p in report.problems:
        lines += ["", f"FAIL {p.node}: {p.what}" if p.node else f"FAIL {p.what}"]
        lines.append(f"  fix: {p.fix}")
    for d in report.drift:
        lines += ["", f"DRIFT {d.fact.label}: {d.fact.why}"]
        lines += [f"  {value}: {', '.join(names)}" for value, names in d.groups]
        lines += [f"    {line}" for line in d.detail]
        lines.append(f"  fix: {d.fact.fix}")
    if report.ok:
        verdict = f"fleet: {len(report.nodes)} node(s) agree"
        if report.images:
            verdict += (
                f" ({len(report.images)} on a read-only image: installed once, its install "
                "record checked on each)"
            )
        if report.uncompared:
            verdict += (
                f" on their doctor results ({len(report.uncompared)} with no install record "
                "(--doctor-only): their installs were not compared"
                + (
                    ""
                    if report.expected is not None
                    else "; no --expect: a node that never reported is not seen"
                )
                + ")"
            )
    else:
        failed = len({p.node for p in report.problems})
        verdict = (
            f"fleet: {len(report.nodes)} node(s) reported"
            + (f", {len(report.expected)} expected" if report.expected is not None else "")
            + f"; {failed} failed, missing or stale, {len(report.drift)} drift(s): "
            "fix them before starting Ray"
        )
    lines += ["", verdict]
    result = {
        "ok": report.ok,
        "run": report.run,
        "expected": list(report.expected) if report.expected is not None else None,
        "missing": list(report.missing),
        "uncompared": list(report.uncompared),
        "images": list(report.images),
        "nodes": [
            {
                "name": n.name,
                "file": n.source,
                "run": n.run,
                "bundle": n.bundle,
                "install_rc": n.install_rc,
                "doctor_rc": n.doctor_rc,
                "ok": n.ok,
                "checks": dict(n.checks),
                "host": n.host,
                "env": n.env,
            }
            for n in report.nodes
        ],
        "drift": [
            {
                "fact": d.fact.key,
                "label": d.fact.label,
                "values": [{"value": v, "nodes": list(names)} for v, names in d.groups],
                "detail": list(d.detail),
                "why": d.fact.why,
                "fix": d.fact.fix,
            }
            for d in report.drift
        ],
        "problems": [{"node": p.node, "what": p.what, "fix": p.fix} for p in report.problems],
    }
    return Shown("fleet", report.ok, result, "\n".join(lines))


def preflight(result: Preflight) -> Shown:
    from verl_bundle.airgap.launch import preflight as server

    v = result.verdict
    return Shown(
        "preflight", v.ok, server.render_json(result), server.render_text(result), verdict=v
    )


def toolchain_json(report: ToolchainReport) -> dict[str, Any]:
    return {
        "profiles": [
            {
                "profile": p.profile,
                "cuda": p.cuda,
                "python": p.python,
                "source_builds": list(p.packages),
                "can_compile": p.can_compile,
                "parts": [{"name": x.name, "found": x.found, "why": x.why} for x in p.parts],
            }
            for p in report.profiles
        ]
    }


def toolchain_text(report: ToolchainReport) -> str:
    lines = []
    for p in report.profiles:
        head = f"{p.profile} (CUDA {p.cuda}, Python {p.python}): "
        if not p.packages:
            lines.append(head + "no source builds; nothing to compile")
            continue
        what = ", ".join(p.packages)
        verdict = "can compile" if p.can_compile else "cannot compile"
        lines.append(f"{head}{verdict} {what} here")
        lines += [f"  {x.name}: {x.found}" if x.ok else f"  {x.name}: {x.why}" for x in p.parts]
    return "\n".join(lines)


def toolchain(report: ToolchainReport) -> Shown:
    return Shown("toolchain", True, toolchain_json(report), toolchain_text(report))


def assets(built: AssetsBuilt) -> Shown:
    """The result for people (the last line is the tarball's path) and for scripts."""
    from verl_bundle.airgap.contract import assets as am

    b, m = built.bundle, built.manifest
    lines = [
        f"{a.kind} {a.repo_id}@{a.revision} = {a.commit}: {len(a.files)} file(s)"
        + (
            f", {a.conversion} -> {', '.join(n for _, n in a.splits)}"
            if a.kind == "dataset"
            else ""
        )
        for a in m.assets
    ]
    lines += [f"asset bundle: {human_size(b.size)}, sha256 {b.sha256}", str(b.path)]
    result = {
        "bundle": str(b.path),
        "sha256": b.sha256,
        "size": b.size,
        "files": b.files,
        "assets": am.to_dict(m)["assets"],
        "unhashed": list(built.unhashed),
    }
    return Shown("assets", True, result, "\n".join(lines), built.notes)
