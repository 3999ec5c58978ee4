"""The trainer dry run's entry wrapper: run as a script by the installed environment's python.

`python -B dryrun_entry.py SPEC.json`, with dryrun_hooks.py on PYTHONPATH as sitecustomize (so
the tokenizer, dataset, workers and step sites are marked in this process and in every Ray
worker). In order, each a step with JSON-line events in SPEC's `events` file:
  assets   a tiny random model (the Qwen2 family, written with transformers' own save_pretrained),
           a byte-level BPE tokenizer with a chat template, and a parquet of a few rows in verl's
           RL format (examples/data_preprocess/gsm8k.py) -- or the user's own model and data
  config   verl's own Hydra config, composed with the overrides that point it at them
  ray      ray.init, as verl's entry calls it (marked here, in the driver)
  then verl's own PPO entry (run_ppo(cfg), or main.__wrapped__(cfg)), whose tokenizer, dataset,
  workers and step are marked by the hooks.
  model    where verl stopped at the GPU boundary (no GPU here): the model built as verl's
           workers build it, with verl's attention (flash_attention_2 unless overridden), on
           the meta device (no weights in memory), so a missing flash-attn or an architecture
           transformers cannot build is found here, not on the GPU node.
  worker-init, worker-model   then verl's own worker classes built with the config verl held
           at the boundary, and their init_model run up to the first GPU-only call
           (dryrun_workers.py).
The last event is `run/end`. Nothing of verl_bundle
  is imported: the environment is seen exactly as the trainer sees it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

# `python script.py` puts the script's directory first on sys.path: drop it, so our sibling
# modules can never shadow what the environment holds.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from dryrun_hooks import boundary_of, emit, error_fields, marked
from dryrun_workers import NOT_ON_CPU, run_workers

# ChatML, as Qwen2's instruct tokenizers carry it (verl applies the chat template to every
# prompt, with add_generation_prompt=True).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "7"),
    ("A box holds 6 eggs. How many eggs are in 5 boxes?", "30"),
    ("Sara read 12 pages on Monday and 15 on Tuesday. How many pages in all?", "27"),
    ("There are 20 birds and 8 fly away. How many birds are left?", "12"),
    ("A pen costs 2 dollars. How much do 9 pens cost?", "18"),
    ("Ben had 50 marbles and gave half to Ann. How many does he keep?", "25"),
    ("A class has 4 rows of 7 desks. How many desks are there?", "28"),
    ("Mia walks 3 miles a day for 6 days. How far does she walk?", "18"),
]
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def make_tokenizer(where: str) -> Any:
    """A byte-level BPE trained here on the questions, with ChatML's special tokens and
    template, saved with transformers' save_pretrained (nothing is downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [f"{q} {INSTRUCTION} #### {a}" for q, a in QUESTIONS] * 4
    bpe.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe,
        eos_token="<|im_end|>",  # noqa: S106 - a token, not a password
        pad_token="<|endoftext|>",  # noqa: S106 - a token, not a password
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(where)
    return tok


def make_model(where: str, tok: Any) -> int:
    """A random two-layer Qwen2 (head size 64, as the attention kernels want), saved with
    transformers' own save_pretrained; returns its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=((len(tok) + 63) // 64) * 64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(where)
    return int(sum(p.numel() for p in model.parameters()))


def make_data(path: str) -> int:
    """A parquet of a few rows in verl's RL format (examples/data_preprocess/gsm8k.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{q} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": a},
            "extra_info": {"split": "train", "index": i, "answer": f"#### {a}", "question": q},
        }
        for i, (q, a) in enumerate(QUESTIONS)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return len(rows)


def count_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def assets(spec: dict[str, Any], events: str) -> tuple[str, str, int]:
    """(model dir, data file, rows): made here, or the user's own."""
    emit(events, "assets", "start", made=not spec.get("model"))
    started = time.monotonic()
    if spec.get("model"):
        model, data = spec["model"], spec["data"]
        rows = count_rows(data)
        emit(events, "assets", "done", seconds=time.monotonic() - started, rows=rows, own=True)
        return model, data, rows
    model = os.path.join(spec["work"], "model")
    data = os.path.join(spec["work"], "train.parquet")
    tok = make_tokenizer(model)
    params = make_model(model, tok)
    rows = make_data(data)
    size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model))
    emit(
        events,
        "assets",
        "done",
        seconds=time.monotonic() - started,
        rows=rows,
        params=params,
        bytes=size,
        own=False,
    )
    return model, data, rows


def compose(spec: dict[str, Any], overrides: list[str]) -> Any:
    """verl's own config, composed with the overrides as its hydra.main would."""
    import importlib

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    root = os.path.dirname(os.path.abspath(importlib.import_module("verl").__file__ or ""))
    config_dir = os.path.join(root, "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name=spec["config"], overrides=overrides)


def overrides_for(spec: dict[str, Any], model: str, data: str, rows: int) -> list[str]:
    values = {
        "model": model,
        "data": data,
        "rows": min(rows, 4),
        "work": spec["work"],
        "gpus": spec["gpus"],
        "nodes": spec["nodes"],
    }
    out = [o.format(**values) for o in spec["overrides"]]
    if spec.get("ray_cpus_key"):
        out.append(f"{spec['ray_cpus_key']}={spec['cpus']}")
    return out + list(spec.get("extra", []))


def run(spec: dict[str, Any]) -> bool:
    """Every step in order; True when verl's entry returned (a whole step, on a GPU host)."""
    events = spec["events"]
    step = "assets"
    at_boundary = False
    try:
        model, data, rows = assets(spec, events)
        step = "config"
        emit(events, step, "start")
        cfg = compose(spec, overrides_for(spec, model, data, rows))
        emit(events, step, "done", groups=len(cfg))
        step = "entry"
        import ray

        ray.init = _retried(ray, marked(events, "ray", ray.init), int(spec.get("ray_attempts", 3)))
        from verl.trainer import main_ppo

        emit(events, step, "start", entry=spec["entry"])
        if spec["entry"] == "main.__wrapped__":
            main_ppo.main.__wrapped__(cfg)
        else:
            main_ppo.run_ppo(cfg)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        fields = error_fields(exc)
        # verl's own GPU refusal, known by the tag its site's hook put on it (carried by Ray
        # as the task's own exception): never by its words.
        at_boundary = step == "entry" and boundary_of(exc) is not None
        emit(events, step, "error", **fields, **({"boundary": True} if at_boundary else {}))
        if not at_boundary:
            _shutdown_ray()
            emit(events, "run", "end", ok=False)
            return False
    if at_boundary:  # outside the handler: the model's own error is not chained to verl's
        if model_step(spec, model, events):  # a model verl cannot build: its workers neither
            # Ray stays up: verl 0.9's rollout adapter asks for Ray's runtime context.
            run_workers(spec, events)
        _shutdown_ray()
        emit(events, "run", "end", ok=False)
        return False
    _shutdown_ray()
    emit(events, step, "done")
    emit(events, "run", "end", ok=True)
    return True


def model_step(spec: dict[str, Any], model: str, events: str) -> bool:
    """The model built as verl's workers build it (transformers' from_config with verl's
    attention), on the meta device: its architecture and the attention's package are checked,
    no weights are read. With flash-attn installed and no GPU, transformers refuses the CPU;
    then the model is built with eager attention (the architecture still proven) and the event
    says the attention needs a GPU. False when it failed."""
    attn = str(spec.get("attn") or "eager")
    emit(events, "model", "start", attn=attn)
    started = time.monotonic()
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model)
        gpu_only = False
        with torch.device("meta"):
            try:
                AutoModelForCausalLM.from_config(config, attn_implementation=attn)  # type: ignore[no-untyped-call]
            except (ImportError, ValueError) as exc:
                if NOT_ON_CPU not in str(exc):
                    raise
                gpu_only = True
                AutoModelForCausalLM.from_config(config, attn_implementation="eager")  # type: ignore[no-untyped-call]
    except Exception as exc:
        emit(events, "model", "error", **error_fields(exc))
        return False
    seconds = time.monotonic() - started
    emit(events, "model", "done", seconds=seconds, attn=attn, gpu_only=gpu_only)
    return True


# Ray's raylet waits a fixed ~30 s for its agent process at start-up; a loaded host can miss it,
# and a second try (its daemons warm in the page cache) usually does not.
RAY_START_TIMEOUT = "timed out during startup"


def _retried(ray: Any, init: Any, attempts: int) -> Any:
    """ray.init, tried again (after a shutdown) when Ray's own start-up timed out; every try
    is its own marked call, so a failed one stays in the events."""

    def init_again(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, attempts + 1):
            try:
                return init(*args, **kwargs)
            except Exception as exc:
                if RAY_START_TIMEOUT not in str(exc) or attempt == attempts:
                    raise
                with contextlib.suppress(Exception):
                    ray.shutdown()
        return None

    return init_again


def _shutdown_ray() -> None:
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        with contextlib.suppress(Exception):  # the parent kills the group anyway
            ray.shutdown()


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    return 0 if run(spec) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
