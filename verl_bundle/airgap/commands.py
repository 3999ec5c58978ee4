"""Each server command run: its inputs checked (a mistake is a UsageError, exit 2), its one core
function called with the typed manifest, its result rendered as text or the versioned JSON
envelope (render.show), and its exit code returned, the one verdict's. The parser that reaches
these is cli.py's. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import of_verify
from verl_bundle.airgap.contract.skip_phases import skip_phases
from verl_bundle.airgap.errors import EXIT_FAILED, EXIT_OK, UsageError


def _manifest(path: str, command: str) -> Any:
    """The manifest of the bundle at `path`: a path with no manifest is a usage error (it is not
    a bundle); a manifest that cannot be read is damage (ManifestError, exit 3)."""
    from verl_bundle.airgap.contract.manifest import MANIFEST, find_root, load

    root = find_root(path)
    if not os.path.isfile(os.path.join(root, MANIFEST)):
        raise UsageError(
            f"{command}: cannot read {os.path.join(root, MANIFEST)}: not an extracted bundle "
            "(give the directory install.sh is in)"
        )
    return load(root)


def verify(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.verify import check

    if not os.path.exists(args.path):
        raise UsageError(f"verify: {args.path}: no such file or directory")
    from verl_bundle.airgap.heartbeat import heartbeat

    def say(text: str) -> None:  # progress goes to stderr: stdout is the result (--json)
        print(text.strip(), file=sys.stderr, flush=True)

    say(f"verifying {args.path} ...")
    with heartbeat(say, "verify"):
        found = check.check(args.path, args.allowed_signers, args.each_file)
    lines = [f"FAILED: {p}" for p in found.problems]
    if found.signed:
        lines.insert(0, f"signed: {found.signed}")
    report = found.report
    v = of_verify(found.problems, f"OK: {report.checked} {report.what}")
    lines.append(v.line)
    result = {"path": report.subject, "checked": report.checked, "problems": found.problems}
    result["signed_by"] = found.signer
    render.show("verify", v.ok, result, "\n".join(lines), args.json, v)
    return v.code


def doctor(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.doctor import locate, render_json, render_text, run_doctor

    root = locate(args.bundle)
    manifest = _manifest(root, "doctor") if root is not None else None
    if manifest is None and args.skip_phases:
        raise UsageError("doctor: --skip-phase needs a bundle (--bundle DIR)")
    report = run_doctor(
        manifest, args.python, args.prefix, args.require_gpu, args.skip_phases, args.deep
    )
    v = report.verdict
    render.show("doctor", v.ok, render_json(report), render_text(report), args.json, v)
    return v.code


def entry(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.launch.entry import examine

    found = examine(args.module)
    text = f"{'trainer' if found.trainer else 'not a trainer'}: {found.why}"
    result = {"module": found.module, "trainer": found.trainer, "why": found.why}
    render.show("entry", found.trainer, result, render.printable(text), args.json)
    return EXIT_OK if found.trainer else EXIT_FAILED


def max_jobs(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.doctor.resources import max_jobs

    if args.gib_per_job <= 0 or args.limit < 0:
        raise UsageError("max-jobs: --gib-per-job must be above 0 and --limit at least 0")
    render.say(str(max_jobs(args.gib_per_job, args.limit or None)))
    return EXIT_OK


def postinstall(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.postinstall.run import run_checks

    manifest = _manifest(args.bundle, "postinstall")
    deep = _deep(args)
    found = run_checks(
        manifest,
        args.require_gpu,
        skip_phases(args.skip_phases, manifest.phase_names),
        args.check_files,
        sys.executable,
        deep,
        uv=args.uv,
    )
    v = found.verdict
    if args.result:  # for the installer: the typed findings, which it renders and judges
        _write_result(args.result, render.envelope("postinstall", v.ok, found.to_dict(), v))
        return EXIT_OK
    text = render.checks_text(found.installed + found.readiness, f"post-install: {v.line}")
    render.show("postinstall", v.ok, found.to_dict(), text, args.json, v)
    return v.code


def _write_result(path: str, doc: dict[str, Any]) -> None:
    """Write the envelope whole or not at all, in the directory given (the install's state
    directory): a fresh hidden name, renamed over the final one (airgap/confined.py)."""
    from verl_bundle.airgap.confined import Confined

    with Confined(os.path.dirname(os.path.abspath(path))) as where:
        where.write_atomic(os.path.basename(path), render.dumps(doc))


def readiness(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.postinstall.probing import run_readiness
    from verl_bundle.airgap.postinstall.readiness import render_text

    manifest = _manifest(args.bundle, "readiness")
    deep = _deep(args)
    chosen = skip_phases(args.skip_phases, manifest.phase_names)
    report = run_readiness(
        manifest, args.python, args.require_gpu, args.purpose, args.timeout, deep, chosen
    )
    v = report.verdict
    render.show(
        "readiness", v.ok, report.to_dict(), f"{render_text(report)}\n{v.line}", args.json, v
    )
    return v.code


def _deep(args: argparse.Namespace) -> Any:
    """The trainer dry run's request (--deep and its options), or None; bad input is a usage
    error before anything runs."""
    from verl_bundle.airgap.postinstall.dryrun import dry_run_request

    given = args.model or args.data or args.override
    if not args.deep:
        if given:
            raise UsageError("--model, --data and --override go with --deep (the dry run)")
        return None
    return dry_run_request(args.model, args.data, args.deadline, 0, args.override)


def explain(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.explain import engine

    try:
        text = engine.read_log(args.log)
    except OSError as exc:
        raise UsageError(f"explain: {args.log}: {exc.strerror or exc}") from None
    findings = engine.explain_text(text)
    v = engine.verdict_of(findings)
    json_doc = engine.result_json(findings, text)
    render.show("explain", v.ok, json_doc, engine.render_text(findings, text), args.json, v)
    return v.code


def assets(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.assets import place

    if args.action == "install":
        if not args.bundle:
            raise UsageError("assets install: give the asset bundle directory")
        result = place.install_assets(args.bundle, args.prefix, args.assets_dir, args.python)
    else:
        result = place.check_prefix(args.prefix, args.python)
    v = result.verdict
    text = f"{place.result_text(result)}\n{v.line}"
    render.show(f"assets {args.action}", v.ok, place.result_json(result), text, args.json, v)
    return v.code


def rendezvous_of(args: argparse.Namespace) -> Any:
    """torchrun's rendezvous flags as preflight was given them (only with --launcher torchrun)."""
    from verl_bundle.airgap.launch.ranks import Rendezvous

    given = Rendezvous(
        args.rdzv_endpoint or "",
        args.master_addr or "",
        args.master_port or "",
        args.node_rank or "",
    )
    if (given.endpoint or given.master_addr or given.master_port or given.node_rank) and (
        args.launcher != "torchrun"
    ):
        raise UsageError(
            "preflight: --rdzv-endpoint, --master-addr, --master-port and --node-rank are "
            "torchrun's; give --launcher torchrun"
        )
    if given.endpoint and given.master_addr:
        raise UsageError("preflight: give --rdzv-endpoint or --master-addr, as torchrun takes one")
    if (given.master_port or given.node_rank) and not given.master_addr:
        raise UsageError("preflight: --master-port and --node-rank go with --master-addr")
    return given


def preflight(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.launch.preflight import render_json, render_text, run_preflight

    if args.nproc_per_node is not None and args.launcher != "torchrun":
        raise UsageError("preflight: --nproc-per-node is torchrun's; give --launcher torchrun")
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        raise UsageError("preflight: --nproc-per-node must be 1 or more")
    if args.min_open_files < 0:
        raise UsageError("preflight: --min-open-files must be 0 or more")
    result = run_preflight(
        args.overrides,
        args.config,
        os.environ,
        args.launcher,
        args.nproc_per_node,
        args.min_open_files,
        rendezvous_of(args),
    )
    text = render.printable(render_text(result))
    v = result.verdict
    render.show("preflight", v.ok, render_json(result), text, args.json, v)
    return v.code


def serve(args: argparse.Namespace) -> int:
    from verl_bundle.airgap import serve as serving

    root = os.path.abspath(args.dir)
    server = serving.make_server(root, args.bind, args.port)
    port = server.server_address[1]
    everywhere = args.bind in ("", "0.0.0.0", "::")  # noqa: S104 - the nodes' addresses
    url = f"http://{os.uname().nodename if everywhere else args.bind}:{port}/"
    render.say(
        f"serving {root} at {url} (threaded, backlog {serving.BACKLOG}, at most {serving.HANDLERS} "
        f"at once, {serving.TIMEOUT:.0f} s idle timeout, HTTP Range); Ctrl-C stops"
    )
    for b in serving.bundles(root):
        render.say(f"  install.sh --from {url}{b.path} --bundle-sha256 {b.pin}")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return EXIT_OK


def install(args: argparse.Namespace) -> int:
    from verl_bundle.airgap.install import main

    return main.install(args)
