"""The trainer dry run's findings: its events (dryrun.py) as `Check`s, one per step.

Steps, in dryrun.json's order: assets, config, tokenizer, dataset, ray, workers, model,
worker-init, worker-model, step. A step of verl's own run is ok when a process wrote its `done`
event. The first error before the GPU boundary, or the step in progress when the deadline
struck, fails, with the exception line and a cause and fix from dryrun.json's known causes; the
steps after it were not reached. On a host without a GPU, verl's own GPU refusal (recognised at
its site by the hook: `boundary`) is the expected end: the workers check is ok ("reached the GPU
boundary", where and why). After it the entry's own steps: the model on the meta device, verl's
worker classes constructed (a verl error there fails; a harness error is `untested`, never a
finding) and their init_model up to the first GPU-only call (`untested`, naming where). What a
CPU cannot prove is `untested` and named (flash-attn kernels, the release's `workers.unproven`,
one PPO step), which the one verdict never counts as ready. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.postinstall.dryrun import DryRun, row_for
from verl_bundle.airgap.postinstall.readiness import release_of

SUBJECT = "trainer dry run"


def explain(
    text: str,
    step: str,
    verl: str,
    deadline: bool,
    table: dict[str, Any],
    cpus: int | None = None,
) -> tuple[str, str]:
    """(cause, fix) for a failed step: a known error, or a deadline at a known step (with the
    CPUs Ray was given, where the cause is too few of them)."""
    for entry in table["causes"]:
        if entry.get("on") == "deadline":
            if not deadline or entry["step"] != step:
                continue
            if entry.get("from") and release_of(verl) < release_of(entry["from"]):
                continue
            if "cpus_below" in entry and cpus is not None and cpus >= entry["cpus_below"]:
                continue
            return entry["cause"], entry["fix"]
        if deadline:
            continue
        hit = re.search(entry["match"], text)
        if hit:
            words = {k: v for k, v in hit.groupdict().items() if v is not None}
            return entry["cause"].format(**words), entry["fix"].format(**words)
    if deadline:
        return (
            "verl's trainer did not get past this step before the deadline",
            "rerun with a longer --deadline; if it still stops here, run verl's main_ppo by hand "
            "with the same overrides and look at where it waits",
        )
    return (
        "verl's trainer raised this before training could start",
        "run verl's main_ppo by hand on a small model to see the whole traceback, then "
        "`python -m verl_bundle.airgap explain LOG`",
    )


def _line(e: dict[str, Any]) -> str:
    """The exception line, and what raised it where that says more (a wrapped error)."""
    line = f"{e.get('type', 'Error')}: {e.get('error', '')}".strip()
    cause = str(e.get("cause") or "")
    return f"{line} (from {cause})" if cause and cause not in line else line


# Steps the entry runs after the GPU boundary, each with its own check: not verl's run itself.
AFTER = ("model", "worker-init", "worker-model", "worker-imports")


def boundary(run: DryRun) -> dict[str, Any] | None:
    """verl's own GPU refusal, by structure: the first `boundary` event (the hook saw verl's
    check raise it from its own frame with too few GPUs), provided the exception that ended
    verl's entry is that very one (the entry's error carries its tag). Never by its words."""
    first = next((e for e in run.events if e["event"] == "boundary"), None)
    ended = any(
        e["step"] == "entry" and e["event"] == "error" and e.get("boundary") for e in run.events
    )
    return first if first is not None and ended else None


def _failure(run: DryRun, order: Sequence[str], table: dict[str, Any]) -> tuple[str, str] | None:
    """(the step that failed, its exception line), or None: it ended as expected. An error
    before the boundary stays a failure whatever came after it; only verl's GPU refusal
    passing through (flagged at its site) is not one."""
    done = {e["step"] for e in run.events if e["event"] == "done"}
    # An error that a later call of the same step got past (a retried ray.init) is not the end.
    errors = [
        e
        for i, e in enumerate(run.events)
        if e["event"] == "error"
        and not e.get("boundary")
        and e["step"] not in AFTER
        and not any(d["step"] == e["step"] and d["event"] == "done" for d in run.events[i:])
    ]
    ended_ok = any(e["step"] == "run" and e["event"] == "end" and e.get("ok") for e in run.events)
    if errors and not run.timed_out:
        first = errors[0]
        step = first["step"] if first["step"] in order else _in_progress(run, order, done)
        return step, _line(first)
    if boundary(run) is not None or ended_ok:
        return None
    step = _in_progress(run, order, done)
    if run.timed_out:
        return step, f"no progress before the deadline ({run.seconds:.0f} s)"
    return step, f"the trainer exited {run.code} without a result: {(run.tail or ('',))[-1]}"


def _in_progress(run: DryRun, order: Sequence[str], done: set[str]) -> str:
    """The step a run stopped in: the last one started and not done, else the first not done."""
    started = [e["step"] for e in run.events if e["event"] == "start" and e["step"] in order]
    for step in reversed(started):
        if step not in done:
            return str(step)
    return next((s for s in order if s not in done), order[-1])


def _summary(step: str, run: DryRun) -> str:
    """What a step that passed did, from its events."""
    ev = [e for e in run.events if e["step"] == step and e["event"] == "done"]
    first = ev[0] if ev else {}
    secs = f" ({first['seconds']:.1f} s)" if isinstance(first.get("seconds"), (int, float)) else ""
    if step == "assets":
        if first.get("own"):
            return f"your model and data ({first.get('rows', '?')} rows)"
        mb = float(first.get("bytes", 0)) / 1e6
        return (
            f"a tiny random Qwen2 ({first.get('params', '?')} parameters, {mb:.1f} MB), a "
            f"tokenizer with a chat template, {first.get('rows', '?')} rows{secs}"
        )
    if step == "config":
        return f"verl's config composed with the dry run's overrides ({first.get('groups')} groups)"
    if step == "dataset":
        rows = [e.get("rows") for e in ev if e.get("rows") is not None]
        return f"verl's RLHFDataset loaded ({rows[0] if rows else '?'} rows){secs}"
    if step == "ray":
        cpus = f" with {run.cpus} CPUs" if run.cpus else ""
        return f"ray.init returned{cpus}{secs}"
    if step == "tokenizer":
        return f"verl's hf_tokenizer loaded it{secs}"
    return f"done{secs}"


def checks(run: DryRun, table: dict[str, Any]) -> list[Check]:
    """One check per step, in order; after the workers' steps, what a CPU cannot prove for
    this release, each named (untested); one failed check when the recipe's entry points are
    not in this verl (nothing ran)."""
    if run.moved:
        return [moved(run)]
    order = [s["id"] for s in table["steps"]]
    what = {s["id"]: s["what"] for s in table["steps"]}
    failed = _failure(run, order, table)
    done = {e["step"] for e in run.events if e["event"] == "done"}
    refused = boundary(run)
    unwatched = next((e for e in run.events if e["event"] == "unwatched"), None)
    out: list[Check] = []
    reached = True
    for step in order:
        cid = f"dryrun:{step}"
        if failed is not None and step == failed[0] and step == "workers" and unwatched:
            # verl has no function where dryrun.json's boundary site says: its end at the
            # GPU check cannot be recognised, so it is neither a finding nor a pass.
            out.append(_unrecognised(run, failed[1], unwatched))
            reached = False
            continue
        if failed is not None and step == failed[0]:
            cause, fix = explain(failed[1], step, run.verl, run.timed_out, table, run.cpus)
            out.append(Check(cid, "fail", f"{what[step]}: {failed[1]}", cause, fix, SUBJECT))
            reached = False
            continue
        clean = reached and failed is None
        if step == "workers" and refused is not None:
            out.append(Check(cid, "ok", _refusal(run, refused), subject=SUBJECT))
            continue
        if step == "model":
            out.append(_model(run, table, clean, refused is not None))
            out += _kernels(run)
            continue
        if step == "worker-init":
            out.append(_worker_init(run, table, clean and refused is not None))
            continue
        if step == "worker-model":
            out += _worker_model(run, table, clean and refused is not None)
            continue
        if step == "worker-imports":
            out.append(_worker_imports(run, table, clean and refused is not None))
            if refused is not None and not any(c.status == "fail" for c in out):
                out += _unproven(run, table)
            continue
        if step == "step":
            ok = not any(c.status == "fail" for c in out)  # a worker step may have failed
            out.append(_step(run, clean and ok, refused is not None and ok))
            continue
        if reached and step in done:
            out.append(Check(cid, "ok", _summary(step, run), subject=SUBJECT))
        elif clean and refused is not None:
            # Before the boundary, but not marked: the site is not in this release's table.
            out.append(Check(cid, "ok", f"{what[step]} (passed: the run reached the GPU)"))
        else:
            out.append(Check(cid, "skip", f"{what[step]}: not reached", subject=SUBJECT))
    return out


def _unrecognised(run: DryRun, line: str, unwatched: dict[str, Any]) -> Check:
    return Check(
        "dryrun:workers",
        "untested",
        f"workers initialising: {line}",
        detail=f"dryrun.json's GPU boundary site ({unwatched.get('site')}) is not in verl "
        f"{run.verl}, so whether this is verl's GPU refusal cannot be told",
        fix="add this release's boundary site to dryrun.json (where it raises 'Total available "
        "GPUs ...'), or run readiness --deep on a GPU server",
        subject="where verl's trainer stopped",
    )


def _short(path: str) -> str:
    """A file inside verl (or anything installed) from its package down: verl/x/y.py:LINE."""
    for top in ("/verl/", "/site-packages/"):
        if top in path:
            return path[path.rindex(top) + 1 :] if top == "/verl/" else path.split(top)[-1]
    return path


def _refusal(run: DryRun, refused: dict[str, Any]) -> str:
    """Where verl's control flow was when it refused the GPUs: its check, the raising line, the
    verl frames above it, and verl's own counts."""
    chain = [c for c in refused.get("callers", ()) if not str(c).startswith("dryrun_")][:3]
    entry = next((e for e in run.events if e["step"] == "entry" and e["event"] == "error"), {})
    return (
        f"reached the GPU boundary in {run.seconds:.0f} s: {refused.get('site')} refused "
        f"{refused.get('required')} GPU(s) with {refused.get('available')} available "
        f"({_short(str(refused.get('at', '')))}, from {' <- '.join(chain) or '?'}): {_line(entry)}"
    )


def _kernels(run: DryRun) -> list[Check]:
    """flash-attn's kernels: transformers refuses them without a GPU, so the model (and the
    workers' models) were built with eager attention here; never proven on a CPU."""
    model = any(
        e["step"] == "model" and e["event"] == "done" and e.get("gpu_only") for e in run.events
    )
    answered = any(e.get("answer") == "eager-attention" for e in run.events)
    if not (model or answered):
        return []
    return [
        Check(
            "dryrun:flash-attn",
            "untested",
            "transformers refuses flash_attention_2 without a GPU: verl's model was built with "
            "eager attention here (its architecture proven, not flash-attn's kernels)",
            fix="run readiness --deep on a GPU server to prove it",
            subject="flash-attn kernels",
        )
    ]


def _events(run: DryRun, step: str) -> list[dict[str, Any]]:
    return [e for e in run.events if e["step"] == step]


HARNESS = "the dry run's own harness failed here, not verl: no finding about this environment"


def _harness(cid: str, subject: str, run: DryRun, e: dict[str, Any]) -> Check:
    role = f"{e['role']}: " if e.get("role") else ""
    return Check(
        cid,
        "untested",
        f"{role}{_line(e)} (at {_short(str(e.get('at', '')))})",
        detail=HARNESS,
        fix=f"report it with this output: dryrun.json's worker recipe for verl {run.verl} does "
        "not fit what its trainer decided",
        subject=subject,
    )


def _verl_error(
    cid: str, what: str, run: DryRun, e: dict[str, Any], table: dict[str, Any]
) -> Check:
    line = _line(e)
    where = e.get("verl_at") or _short(str(e.get("at", "")))
    cause, fix = explain(line, cid.split(":")[-1], run.verl, False, table, run.cpus)
    role = f"{e.get('role')} ({str(e.get('cls', '')).split(':')[-1]})"
    return Check(cid, "fail", f"{what}: {role}: {line} (raised at {where})", cause, fix, SUBJECT)


def _worker_init(run: DryRun, table: dict[str, Any], reached: bool) -> Check:
    """verl's worker classes constructed with the config verl held at the boundary."""
    what = "verl's worker classes constructed"
    ev = _events(run, "worker-init")
    if not reached or not ev:
        return Check("dryrun:worker-init", "skip", f"{what}: not reached", subject=SUBJECT)
    if any(e["event"] == "norecipe" for e in ev):
        return Check(
            "dryrun:worker-init",
            "untested",
            f"{what}: dryrun.json has no worker recipe measured for verl {run.verl}",
            detail=f"no worker recipe for verl {run.verl}",
            fix="run readiness --deep on a GPU server to prove it",
            subject="verl's workers",
        )
    for e in ev:
        if e["event"] != "error":
            continue
        if e.get("harness"):
            return _harness("dryrun:worker-init", "verl's worker classes", run, e)
        return _verl_error("dryrun:worker-init", what, run, e, table)
    built = [
        f"{e['role']} ({str(e.get('cls', '')).split(':')[-1]})"
        for e in ev
        if e["event"] in ("done", "stopped") and e.get("role")
    ]
    if not any(e["event"] == "end" for e in ev):
        return Check("dryrun:worker-init", "untested", f"{what}: it never ended", subject=SUBJECT)
    return Check(
        "dryrun:worker-init",
        "ok",
        f"{', '.join(built)}: __init__ and verl's own config checks ran, with the config verl "
        "held at the GPU boundary",
        subject=SUBJECT,
    )


def _worker_model(run: DryRun, table: dict[str, Any], reached: bool) -> list[Check]:
    """Each worker's init_model up to the first recorded GPU-only call (a stop in __init__
    counts too): ok only when every one completed, which no CPU does as configured."""
    what = "the workers' init_model"
    ev = _events(run, "worker-model")
    init = _events(run, "worker-init")
    if not reached or not ev:
        return [Check("dryrun:worker-model", "skip", f"{what}: not reached", subject=SUBJECT)]
    for e in ev:
        if e["event"] != "error":
            continue
        if e.get("harness"):
            return [_harness("dryrun:worker-model", "the workers' init_model", run, e)]
        return [_verl_error("dryrun:worker-model", what, run, e, table)]
    stops = [e for e in (*init, *ev) if e["event"] == "stopped"]
    answers = sorted({str(e["answer"]) for e in (*init, *ev) if e["event"] == "answered"})
    said = f"; answered here: {', '.join(answers)} (dryrun.json)" if answers else ""
    ran = [e["role"] for e in ev if e["event"] == "done"]
    if not stops:
        return [
            Check(
                "dryrun:worker-model",
                "ok",
                f"{', '.join(ran)}: init_model completed{said}",
                subject=SUBJECT,
            )
        ]
    whats = list(dict.fromkeys(str(e.get("what")) for e in stops))
    where = "; ".join(
        f"{e.get('role')} at {e.get('what')}, {e.get('caller') or e.get('site')}"
        + (f": `{e['line']}`" if e.get("line") else "")
        for e in stops
    )
    done = f"; completed: {', '.join(ran)}" if ran else ""
    return [
        Check(
            "dryrun:worker-model",
            "untested",
            f"init_model ran on this CPU up to its first GPU-only call: {where}{done}{said}",
            fix="run readiness --deep on a GPU server to prove it",
            subject=f"worker model init from {' / '.join(whats)}",
        )
    ]


def _worker_imports(run: DryRun, table: dict[str, Any], reached: bool) -> Check:
    """The modules init_model imports (the recipe's list), past where a CPU stops it: each
    imports, is not in this release, or needs a GPU to import (untested); an error fails."""
    what = "the modules init_model imports"
    ev = [e for e in _events(run, "worker-imports") if e.get("module")]
    if not reached or not _events(run, "worker-imports"):
        return Check("dryrun:worker-imports", "skip", f"{what}: not reached", subject=SUBJECT)
    for e in ev:
        if e["event"] != "error":
            continue
        if e.get("harness"):
            return _harness("dryrun:worker-imports", what, run, e)
        line = _line(e)
        cause, fix = explain(line, "worker-imports", run.verl, False, table, run.cpus)
        where = e.get("verl_at") or _short(str(e.get("at", "")))
        summary = f"{what}: {e['module']}: {line} (raised at {where})"
        return Check("dryrun:worker-imports", "fail", summary, cause, fix, SUBJECT)
    done = [str(e["module"]) for e in ev if e["event"] == "done"]
    gpu = [str(e["module"]) for e in ev if e["event"] == "stopped"]
    absent = [str(e["module"]) for e in ev if e["event"] == "absent"]
    told = f"{len(done)} imported: {', '.join(done)}"
    told += f"; not in verl {run.verl}: {', '.join(absent)}" if absent else ""
    if gpu:
        return Check(
            "dryrun:worker-imports",
            "untested",
            f"{told}; import only where a GPU is visible: {', '.join(gpu)}",
            fix="run readiness --deep on a GPU server to prove it",
            subject=", ".join(gpu),
        )
    return Check("dryrun:worker-imports", "ok", told, subject=SUBJECT)


def _unproven(run: DryRun, table: dict[str, Any]) -> list[Check]:
    """What this release does only on a GPU, or only in the PPO step (dryrun.json's
    `workers.unproven`): named, never claimed."""
    row = row_for(run.verl, table) or {}
    return [
        Check(
            f"dryrun:unproven:{u['id']}",
            "untested",
            str(u["summary"]),
            detail=str(u.get("detail", "")),
            fix="run readiness --deep on a GPU server to prove it",
            subject=str(u["subject"]),
        )
        for u in (row.get("workers") or {}).get("unproven", ())
    ]


def _model(run: DryRun, table: dict[str, Any], clean: bool, refused: bool) -> Check:
    """The model built as verl's workers build it: by verl itself where a GPU ran the step,
    by the entry after the GPU boundary where none is visible (dryrun_entry.model_step)."""
    what = "model built as verl's workers build it"
    ev = [e for e in run.events if e["step"] == "model"]
    error = next((e for e in ev if e["event"] == "error"), None)
    if error is not None:
        cause, fix = explain(_line(error), "model", run.verl, False, table, run.cpus)
        return Check("dryrun:model", "fail", f"{what}: {_line(error)}", cause, fix, SUBJECT)
    done = next((e for e in ev if e["event"] == "done"), None)
    if done is not None:
        attn = done.get("attn", "?")
        secs = f", {done['seconds']:.1f} s" if isinstance(done.get("seconds"), (int, float)) else ""
        gpu = "; its flash-attn kernels need a GPU" if done.get("gpu_only") else ""
        return Check(
            "dryrun:model",
            "ok",
            f"{what} (attn_implementation={attn}, on the meta device{secs}){gpu}",
            subject=SUBJECT,
        )
    if clean and not refused and run.gpus > 0:
        return Check("dryrun:model", "ok", f"{what}: verl's workers loaded it", subject=SUBJECT)
    return Check("dryrun:model", "skip", f"{what}: not reached", subject=SUBJECT)


def _step(run: DryRun, clean: bool, refused: bool) -> Check:
    """One PPO step: its time and memory where a GPU ran it; untested where none was."""
    if refused or (clean and run.gpus == 0):
        return Check(
            "dryrun:step",
            "untested",
            "one PPO step needs a GPU (none visible here)",
            fix="run readiness --deep on a GPU server to prove it",
            subject="one PPO step",
        )
    if not clean:
        return Check("dryrun:step", "skip", "one PPO step: not reached", subject=SUBJECT)
    done = [e for e in run.events if e["step"] == "step" and e["event"] == "done"]
    secs = f"{done[0]['seconds']:.1f} s" if done else f"{run.seconds:.0f} s (the whole run)"
    mem = f", at most {run.memory_mib} MiB of GPU memory in use" if run.memory_mib else ""
    return Check("dryrun:step", "ok", f"one PPO step in {secs}{mem}", subject=SUBJECT)


def left_out(how: str, prove: str) -> Check:
    """The dry run was left out on request (`how`, e.g. "--quick"): the trainer's start is
    not proven, which the verdict says (its detail is why), never a bare "ready"."""
    return Check(
        "dryrun",
        "untested",
        f"verl's trainer was not started: the dry run was left out ({how})",
        detail=f"left out by {how}",
        fix=prove,
        subject="the trainer's start",
    )


def moved(run: DryRun) -> Check:
    """A fork, or a later release, whose entry points are not where verl {recipe}'s are."""
    first = run.moved[0]
    more = f" (and {len(run.moved) - 1} more)" if run.moved[1:] else ""
    return Check(
        "dryrun",
        "fail",
        f"verl {run.verl}: {first} is not there{more} (verl {run.recipe}'s entry moved); no "
        "dry run",
        detail="; ".join(run.moved),
        fix=f"the dry run follows verl {run.recipe}'s recipe (dryrun.json); a fork that moved "
        "its entry points needs a recipe of its own, or run its trainer by hand once",
        subject=SUBJECT,
    )


def not_started(how: str, prove: str) -> Check:
    """Readiness without the dry run (no --deep): verl's trainer never started, so its start
    is named as not proven, never a bare "ready"."""
    return Check(
        "dryrun",
        "untested",
        f"verl's trainer was not started ({how} starts it offline on a tiny model)",
        detail=f"not started: {how}",
        fix=prove,
        subject="the trainer's start",
    )


def no_recipe(verl: str) -> Check:
    """This verl release has no dry run (dryrun.json: verl 0.3 and later): its trainer's
    start cannot be proven here, which the verdict says."""
    return Check(
        "dryrun",
        "untested",
        f"verl {verl} has no trainer dry run (dryrun.json covers verl 0.3 and later)",
        detail=f"no dry run for verl {verl}",
        fix="start verl's main_ppo by hand on a small model on the GPU server",
        subject="the trainer's start",
    )


def unavailable(why: str) -> Check:
    """The dry run did not run because readiness already failed before it."""
    return Check("dryrun", "skip", f"trainer dry run not run: {why}", subject=SUBJECT)
