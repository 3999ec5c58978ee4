"""Readiness of placed models and datasets: every file intact, the model's config and tokenizer
load offline with the environment's transformers, and the parquet files have verl's columns.

The loading runs in the target environment's python (a subprocess with the offline variables
set), since that is where verl will run; what cannot be checked there (no transformers, no
pyarrow) is a `skip` that says so, never a silent pass. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Sequence

from verl_bundle.airgap.checks import Check
from verl_bundle.airgap.contract import assets as am
from verl_bundle.airgap.contract.hashing import sha256_file


def check_placed(directory: str, asset: am.Asset) -> list[str]:
    """'<file>: missing' / '<file>: altered' for each placed file that is not as recorded."""
    problems = []
    for f in asset.files:
        rel = f.path[len(asset.path) + 1 :]
        full = os.path.join(directory, rel)
        if not os.path.isfile(full):
            problems.append(f"{full}: missing")
        elif os.path.getsize(full) != f.size or sha256_file(full) != f.sha256:
            problems.append(f"{full}: altered (sha256 does not match the asset manifest)")
    return problems


# Run by the environment's python: loads each model's config and tokenizer with
# local_files_only (the offline variables are set too), and reads each parquet file's schema.
_PROBE = r"""
import json, sys
job = json.loads(sys.argv[1])
out = []
for path in job["models"]:
    try:
        import transformers
    except ImportError as exc:
        out.append({"path": path, "status": "skip", "what": "not checked: transformers not installed (%s)" % exc})
        continue
    try:
        cfg = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
        tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        ids = tok("1 + 1 = 2")["input_ids"]
        out.append({"path": path, "status": "ok", "what": "config %s, tokenizer %s (%d tokens for a probe)" % (cfg.model_type, type(tok).__name__, len(ids))})
    except Exception as exc:
        out.append({"path": path, "status": "fail", "what": "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")})
for path in job["parquet"]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        out.append({"path": path, "status": "skip", "what": "not checked: pyarrow not installed"})
        continue
    try:
        f = pq.ParquetFile(path)
        names = f.schema_arrow.names
        missing = [c for c in job["columns"] if c not in names]
        if missing:
            out.append({"path": path, "status": "fail", "what": "missing columns: %s (has %s)" % (", ".join(missing), ", ".join(names))})
        else:
            out.append({"path": path, "status": "ok", "what": "%d rows, columns %s" % (f.metadata.num_rows, ", ".join(names))})
    except Exception as exc:
        out.append({"path": path, "status": "fail", "what": "%s: %s" % (type(exc).__name__, exc)})
print(json.dumps(out))
"""

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _probe(python: str, prefix: str, models: list[str], parquet: list[str]) -> list[dict[str, str]]:
    env = dict(os.environ)
    env.update(OFFLINE)
    env["HF_HOME"] = os.path.join(prefix, "hf-home")
    job = json.dumps({"models": models, "parquet": parquet, "columns": list(am.VERL_COLUMNS)})
    proc = subprocess.run(
        [python, "-I", "-c", _PROBE, job],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        found = None
    if proc.returncode != 0 or not isinstance(found, list):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [
            {"path": p, "status": "fail", "what": f"{python} failed: {tail}"}
            for p in models + parquet
        ]
    return found


def readiness(
    pairs: Sequence[tuple[str, am.Asset]], python: str | None, prefix: str
) -> list[Check]:
    """One `files` check per placed (directory, asset), then one load check per model and per
    parquet file."""
    checks = []
    models: list[str] = []
    parquet: list[str] = []
    for directory, asset in pairs:
        problems = check_placed(directory, asset)
        checks.append(
            Check(
                f"{asset.kind}.files",
                "fail" if problems else "ok",
                f"{asset.repo_id}: {len(problems)} of {len(asset.files)} file(s) missing or altered"
                if problems
                else f"{asset.repo_id}: {len(asset.files)} file(s) intact",
                detail="\n".join(problems),
                fix="install the asset bundle again (it replaces a damaged copy)"
                if problems
                else "",
            )
        )
        if asset.kind == "model":
            models.append(directory)
        else:
            parquet += [os.path.join(directory, name) for _, name in asset.splits]
    if not models and not parquet:
        return checks
    if python is None:
        where = os.path.join(prefix, "bin", "python")
        fix = "install the stack bundle into this prefix, or pass --python"
        return [*checks, Check("load", "skip", f"not checked: no python at {where}", fix=fix)]
    for row in _probe(python, prefix, models, parquet):
        kind = "model.load" if row["path"] in models else "dataset.columns"
        fix = ""
        if row["status"] == "fail":
            fix = (
                "the model directory must hold config.json and the tokenizer files; rebuild the "
                "asset bundle without a --deny that drops them"
                if kind == "model.load"
                else "rebuild the asset bundle from a gsm8k-shaped or verl-shaped dataset"
            )
        checks.append(Check(kind, row["status"], f"{row['path']}: {row['what']}", fix=fix))
    return checks
