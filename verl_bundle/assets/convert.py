"""Datasets into the parquet files verl's trainer reads, made on the online host.

Converting here (not on the server) keeps pyarrow and `datasets` off the air-gapped side: the
server only carries and checks files. A gsm8k-shaped dataset (question/answer columns) becomes
train.parquet/test.parquet with exactly the columns verl's own preprocessing writes
(verl v0.4.1, examples/data_preprocess/gsm8k.py): data_source, prompt ([{role, content}]),
ability, reward_model ({style: "rule", ground_truth}), extra_info ({split, index, answer,
question}). A dataset already in that shape passes through.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_bundle.airgap.contract.assets import VERL_COLUMNS
from verl_bundle.assets.fetch import FetchedFile
from verl_bundle.errors import FetchError, UsageError

# verl's gsm8k.py: the instruction appended to each question, and how the answer is found.
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_SOLUTION = re.compile(r"#### (\-?[0-9\.\,]+)")
_SPLIT = re.compile(r"(?:^|[/_.-])(train|test|validation|valid|val|dev)(?=[/_.-]|$)")
DATA_SUFFIXES = (".parquet", ".jsonl", ".json")
# verl's data.train_files / data.val_files names, as its preprocessing writes them.
OUTPUTS = {"train": "train.parquet", "val": "test.parquet"}


@dataclass(frozen=True)
class Converted:
    files: tuple[tuple[str, Path], ...]  # ("train.parquet", path), ("test.parquet", path)
    splits: tuple[tuple[str, str], ...]  # ("train", "train.parquet"), ("val", "test.parquet")
    sources: tuple[FetchedFile, ...]
    conversion: str  # "gsm8k" or "verl"


def _split_of(name: str) -> str | None:
    found = _SPLIT.findall(name.lower())
    if not found:
        return None
    split = found[-1]
    return "train" if split == "train" else "test" if split == "test" else "validation"


def _config_of(name: str) -> str:
    """The dataset configuration a file belongs to: its first folder, unless that names a split."""
    first = name.split("/")[0] if "/" in name else ""
    return "" if first in ("data", "") or _split_of(first) else first


def group_splits(repo_id: str, files: list[FetchedFile]) -> dict[str, list[FetchedFile]]:
    """train/val -> data files; one line when the layout is ambiguous or has no train split."""
    data = [f for f in files if f.name.endswith(DATA_SUFFIXES)]
    configs = sorted({_config_of(f.name) for f in data})
    if len(configs) > 1:
        raise UsageError(
            f"dataset {repo_id} has several configurations ({', '.join(configs)}): pick one, "
            f"e.g. --allow '{repo_id}:{configs[0]}/*'"
        )
    by_split: dict[str, list[FetchedFile]] = {}
    for f in data:
        split = _split_of(f.name)
        if split:
            by_split.setdefault(split, []).append(f)
    if "train" not in by_split:
        raise UsageError(
            f"dataset {repo_id}: no train split among {', '.join(f.name for f in data) or 'no data files'}"
        )
    val = by_split.get("test") or by_split.get("validation") or []
    return {
        "train": sorted(by_split["train"], key=lambda f: f.name),
        "val": sorted(val, key=lambda f: f.name),
    }


def _read(files: list[FetchedFile]) -> Any:  # a pyarrow.Table
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    tables = [
        pq.read_table(f.path) if f.name.endswith(".parquet") else pj.read_json(f.path)
        for f in files
    ]
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


def gsm8k_rows(
    repo_id: str, split: str, questions: list[str], answers: list[str]
) -> list[dict[str, object]]:
    """verl's gsm8k.py `process_fn`, row by row (data_source is the dataset's id, which is what
    verl's reward function dispatches on: openai/gsm8k)."""
    rows: list[dict[str, object]] = []
    for index, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        found = _SOLUTION.search(answer or "")
        if found is None:
            raise FetchError(
                f"dataset {repo_id}: {split} row {index} has no '#### <number>' answer: "
                "not gsm8k-shaped; convert it with verl's examples/data_preprocess first"
            )
        rows.append(
            {
                "data_source": repo_id,
                "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": found.group(1).replace(",", "")},
                "extra_info": {
                    "split": split,
                    "index": index,
                    "answer": answer,
                    "question": question,
                },
            }
        )
    return rows


def _write(table: Any, dest: Path) -> None:
    import pyarrow.parquet as pq

    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def convert(repo_id: str, files: list[FetchedFile], work: Path) -> Converted:
    """train.parquet and test.parquet for `repo_id` in `work` (made afresh each time)."""
    try:
        import pyarrow as pa
    except ImportError:
        raise UsageError(
            "--dataset needs pyarrow on this host: pip install pyarrow (or, in verl-bundle's "
            "clone, pip install '.[assets]')"
        ) from None

    groups = group_splits(repo_id, files)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out: list[tuple[str, Path]] = []
    splits: list[tuple[str, str]] = []
    kinds = set()
    for split, members in groups.items():
        if not members:
            continue
        table = _read(members)
        names = set(table.column_names)
        name = OUTPUTS[split]
        if set(VERL_COLUMNS) <= names:
            kinds.add("verl")
            if len(members) == 1 and members[0].name.endswith(".parquet"):
                out.append((name, members[0].path))  # passed through byte for byte
            else:
                _write(table, work / name)
                out.append((name, work / name))
        elif {"question", "answer"} <= names:
            kinds.add("gsm8k")
            verl_split = "train" if split == "train" else "test"
            rows = gsm8k_rows(
                repo_id,
                verl_split,
                table.column("question").to_pylist(),
                table.column("answer").to_pylist(),
            )
            _write(pa.Table.from_pylist(rows), work / name)
            out.append((name, work / name))
        else:
            raise UsageError(
                f"dataset {repo_id}: columns {', '.join(sorted(names))} are neither gsm8k-shaped "
                f"(question, answer) nor verl-shaped ({', '.join(VERL_COLUMNS)}); convert it with "
                "verl's examples/data_preprocess and fetch the result"
            )
        splits.append((split, name))
    used = tuple(f for members in groups.values() for f in members)
    return Converted(tuple(out), tuple(splits), used, "+".join(sorted(kinds)))
