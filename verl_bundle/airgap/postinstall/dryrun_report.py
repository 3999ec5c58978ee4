"""The trainer dry run's findings: its events (dryrun.py) as `Check`s, one per step.

Steps, in dryrun.json's order: assets, config, tokenizer, dataset, ray, workers, step. A step
is ok when a process wrote its `done` event. The first error that is not the GPU boundary, or
the step in progress when the deadline struck, fails, with the exception line and a cause and
fix from dryrun.json's known causes; the steps after it were not reached. On a host without a
GPU, verl's own "Total available GPUs 0" error is the expected end: the workers check is ok
("reached the GPU boundary") and the one PPO step is `untested`, which the one verdict never
counts as ready. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.postinstall.dryrun import DryRun
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


def _boundary(e: dict[str, Any], table: dict[str, Any]) -> bool:
    return table["boundary"]["match"] in str(e.get("error", ""))


def _failure(run: DryRun, order: Sequence[str], table: dict[str, Any]) -> tuple[str, str] | None:
    """(the step that failed, its exception line), or None: it ended as expected."""
    done = {e["step"] for e in run.events if e["event"] == "done"}
    # An error that a later call of the same step got past (a retried ray.init) is not the end.
    errors = [
        e
        for i, e in enumerate(run.events)
        if e["event"] == "error"
        and not _boundary(e, table)
        and not any(d["step"] == e["step"] and d["event"] == "done" for d in run.events[i:])
    ]
    boundary = any(e["event"] == "error" and _boundary(e, table) for e in run.events)
    ended_ok = any(e["step"] == "run" and e["event"] == "end" and e.get("ok") for e in run.events)
    if boundary or ended_ok:
        return None
    if errors and not run.timed_out:
        first = errors[0]
        step = first["step"] if first["step"] in order else _in_progress(run, order, done)
        return step, _line(first)
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
    """One check per step, in order; one failed check when the recipe's entry points are not
    in this verl (nothing ran)."""
    if run.moved:
        return [moved(run)]
    order = [s["id"] for s in table["steps"]]
    what = {s["id"]: s["what"] for s in table["steps"]}
    failed = _failure(run, order, table)
    done = {e["step"] for e in run.events if e["event"] == "done"}
    boundary = next((e for e in run.events if e["event"] == "error" and _boundary(e, table)), None)
    out: list[Check] = []
    reached = True
    for step in order:
        cid = f"dryrun:{step}"
        if failed is not None and step == failed[0]:
            cause, fix = explain(failed[1], step, run.verl, run.timed_out, table, run.cpus)
            out.append(Check(cid, "fail", f"{what[step]}: {failed[1]}", cause, fix, SUBJECT))
            reached = False
            continue
        if step == "workers" and boundary is not None:
            out.append(
                Check(
                    cid,
                    "ok",
                    f"reached the GPU boundary in {run.seconds:.0f} s: {_line(boundary)}",
                    subject=SUBJECT,
                )
            )
            continue
        if step == "model":
            out.append(_model(run, table, reached and failed is None, boundary is not None))
            continue
        if step == "step":
            out.append(_step(run, reached and failed is None, boundary is not None))
            continue
        if reached and step in done:
            out.append(Check(cid, "ok", _summary(step, run), subject=SUBJECT))
        elif reached and failed is None and boundary is not None:
            # Before the boundary, but not marked: the site is not in this release's table.
            out.append(Check(cid, "ok", f"{what[step]} (passed: the run reached the GPU)"))
        else:
            out.append(Check(cid, "skip", f"{what[step]}: not reached", subject=SUBJECT))
    return out


def _model(run: DryRun, table: dict[str, Any], clean: bool, boundary: bool) -> Check:
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
    if clean and not boundary and run.gpus > 0:
        return Check("dryrun:model", "ok", f"{what}: verl's workers loaded it", subject=SUBJECT)
    return Check("dryrun:model", "skip", f"{what}: not reached", subject=SUBJECT)


def _step(run: DryRun, clean: bool, boundary: bool) -> Check:
    """One PPO step: its time and memory where a GPU ran it; untested where none was."""
    if boundary or (clean and run.gpus == 0):
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


def unavailable(why: str) -> Check:
    """The dry run did not run: no recipe for this release, or readiness failed before it."""
    return Check("dryrun", "skip", f"trainer dry run not run: {why}", subject=SUBJECT)
