"""The trainer dry run: verl's own entry started offline, reported step by step.

A fake verl 0.3 whose entry has verl's shape (run_ppo: ray.init when Ray is not up, a task
runner in another process that loads the tokenizer with verl.utils.hf_tokenizer, maps its roles
to worker classes, builds RLHFDataset from the parquet, and calls RayPPOTrainer.init_workers,
whose ResourcePoolManager._check_resource_available raises verl's own "Total available GPUs 0"
error), installed with uv into a real venv beside the real Hydra and pyarrow of this test
environment. Its worker classes behave as verl's at the sites the dry run meets after the
boundary: __init__ asks the CUDA device name (0.3's AMD test) and asserts the normalised
mini-batch; init_model loads the model with flash_attention_2 and wraps it in FSDP1 on the
current CUDA device (the actor) or with device_id 'cpu' (the critic, as 0.4's get_device_id()
gives here). Its `ray` runs each remote task in a real child process of the same interpreter
and carries the task's exception back pickled, as Ray's RayTaskError does (`cause`), so the
step markers and the boundary's tag are proven to work across processes as they must in Ray's
workers. FAKE_VERL_FAIL picks the step where the fake raises (or hangs).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, clean_environ
from support.assets import install as install_assets
from support.bundlefix import add_server_program
from support.readiness import GATE_V03, ROLLOUT_V02, bundle, fake_torch, make_env, packages, wheel
from support.shared import Value, once

from verl_bundle.airgap.checks import verdict
from verl_bundle.airgap.postinstall import dryrun, dryrun_report

# The keys dryrun.json's verl 0.3/0.4 overrides set (ppo_trainer.yaml's shape, abridged).
CONFIG = """\
algorithm:
  adv_estimator: gae
data:
  train_files: ~/data/train.parquet
  val_files: ~/data/test.parquet
  prompt_key: prompt
  max_prompt_length: 512
  max_response_length: 512
  train_batch_size: 1024
actor_rollout_ref:
  model:
    path: ~/models/deepseek-llm-7b-chat
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
    ppo_micro_batch_size_per_gpu: null
  rollout:
    name: vllm
    n: 1
    log_prob_micro_batch_size_per_gpu: null
    tensor_model_parallel_size: 2
    gpu_memory_utilization: 0.5
  ref:
    log_prob_micro_batch_size_per_gpu: null
critic:
  strategy: ${actor_rollout_ref.actor.strategy}
  ppo_micro_batch_size_per_gpu: null
  model:
    path: ~/models/deepseek-llm-7b-chat
trainer:
  total_epochs: 30
  total_training_steps: null
  project_name: verl_examples
  logger: [ 'console', 'wandb' ]
  nnodes: 1
  n_gpus_per_node: 8
  save_freq: -1
  test_freq: -1
  default_local_dir: checkpoints/${trainer.project_name}
"""
MAIN_PPO = """
import os
import hydra
import ray


@hydra.main(config_path='config', config_name='ppo_trainer', version_base=None)
def main(config):
    run_ppo(config)


def run_ppo(config) -> None:
    if os.environ.get('FAKE_VERL_TMP'):  # as torch.distributed leaves one when killed
        import tempfile
        tempfile.mkdtemp(prefix='verl-dryrun-leak-')
    if not ray.is_initialized():
        ray.init(runtime_env={'env_vars': {'TOKENIZERS_PARALLELISM': 'true'}})
    runner = TaskRunner.remote()
    ray.get(runner.run.remote(config))


@ray.remote
class TaskRunner:
    def run(self, config):
        from verl.utils import hf_tokenizer
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role
        from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker
        try:
            tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
        except OSError:
            if os.environ.get('FAKE_VERL_FAIL') != 'swallowed':
                raise
            tokenizer = None  # a fallback that goes on to the GPU check
        mapping = {
            Role.ActorRollout: ray.remote(ActorRolloutRefWorker),
            Role.Critic: ray.remote(CriticWorker),
            Role.RefPolicy: ray.remote(ActorRolloutRefWorker),
        }
        pool = ResourcePoolManager([config.trainer.n_gpus_per_node] * config.trainer.nnodes)
        trainer = RayPPOTrainer(config, tokenizer, mapping, pool)
        trainer.init_workers()
        trainer.fit()
"""
TOKENIZER = """
import json, os


def hf_tokenizer(path, **kwargs):
    if os.environ.get('FAKE_VERL_FAIL') in ('tokenizer', 'swallowed'):
        raise OSError(f"Can't load tokenizer for '{path}'.")
    with open(os.path.join(path, 'tokenizer_config.json')) as fh:
        doc = json.load(fh)
    if not doc.get('chat_template'):
        raise ValueError('Cannot use chat template functions because tokenizer.chat_template is '
                         'not set and no template argument was passed!')
    return doc
"""
RL_DATASET = """
import os
import pyarrow.parquet as pq


class RLHFDataset:
    def __init__(self, parquet_files, tokenizer, prompt_key='prompt'):
        if os.environ.get('FAKE_VERL_FAIL') == 'sentence':  # the boundary's words, elsewhere
            raise ValueError('Total available GPUs 0 is less than total desired GPUs 1')
        table = pq.read_table(parquet_files)
        self.rows = table.to_pylist()
        for row in self.rows:
            row[prompt_key]

    def __len__(self):
        return len(self.rows)
"""
RAY_TRAINER = """
import os, time
from enum import Enum
from verl.utils.dataset.rl_dataset import RLHFDataset


class Role(Enum):
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4


def _refuse(available, desired):
    raise ValueError(f'Total available GPUs {available} is less than total desired GPUs {desired}')


class ResourcePoolManager:
    def __init__(self, spec):
        self.spec = spec

    def create_resource_pool(self):
        self._check_resource_available()

    def _check_resource_available(self):
        import torch
        total_available_gpus = 1 if torch.cuda.is_available() else 0
        total_required_gpus = sum(self.spec)
        if total_available_gpus < total_required_gpus:
            if os.environ.get('FAKE_VERL_FAIL') == 'callee':  # the same words, from a callee
                _refuse(total_available_gpus, total_required_gpus)
            raise ValueError(f'Total available GPUs {total_available_gpus} is less than total '
                             f'desired GPUs {total_required_gpus}')


class RayPPOTrainer:
    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager):
        self.config = config
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.use_critic = config.algorithm.adv_estimator == 'gae'
        self.use_reference_policy = Role.RefPolicy in role_worker_mapping
        self.train_dataset = RLHFDataset(config.data.train_files, tokenizer, config.data.prompt_key)

    def init_workers(self):
        fail = os.environ.get('FAKE_VERL_FAIL')
        if fail == 'hang':
            with open(os.environ['FAKE_VERL_PIDS'], 'a') as fh:
                fh.write(f'{os.getpid()}\\n')
            time.sleep(3600)
        if fail == 'flash-attn':
            raise ImportError('FlashAttention2 has been toggled on, but it cannot be used due to '
                              'the following error: the package flash_attn seems to be not '
                              'installed.')
        self.resource_pool_manager.create_resource_pool()

    def fit(self):
        pass
"""
# verl 0.3's worker classes at the sites the dry run meets after the boundary (fsdp_workers.py
# at v0.3.0.post1: Worker.__init__'s AMD test, the role assert, the mini-batch normalised and
# asserted; init_model: the model with flash_attention_2, then FSDP1 on the current device).
FSDP_WORKERS = """
import os

import torch
import torch.distributed
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class ActorRolloutRefWorker:
    def __init__(self, config, role):
        if 'AMD' in torch.cuda.get_device_name():
            raise SystemExit('not on this test')
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group()
        self.config, self.role = config, role
        assert self.role in ['actor', 'rollout', 'ref', 'actor_rollout', 'actor_rollout_ref']
        if self.role in ['actor', 'actor_rollout', 'actor_rollout_ref']:
            self.config.actor.ppo_mini_batch_size *= self.config.rollout.n
            self.config.actor.ppo_mini_batch_size //= torch.distributed.get_world_size()
            assert self.config.actor.ppo_mini_batch_size > 0, (
                f'ppo_mini_batch_size {self.config.actor.ppo_mini_batch_size} should be larger '
                f'than 0 after normalization')

    def init_model(self):
        if os.environ.get('FAKE_VERL_FAIL') == 'init_model':
            raise RuntimeError('planted at the start of init_model')
        from transformers import AutoModelForCausalLM
        module = AutoModelForCausalLM.from_pretrained(self.config.model.path,
                                                      attn_implementation='flash_attention_2')
        self.fsdp = FSDP(module, device_id=torch.cuda.current_device(), sync_module_states=True)


class CriticWorker:
    def __init__(self, config):
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group()
        self.config = config
        assert self.config.ppo_micro_batch_size_per_gpu > 0

    def init_model(self):
        from transformers import AutoModelForCausalLM
        module = AutoModelForCausalLM.from_pretrained(self.config.model.path,
                                                      attn_implementation='flash_attention_2')
        self.fsdp = FSDP(module, device_id='cpu', sync_module_states=True)


if os.environ.get('FAKE_VERL_FAIL') == 'signature':  # a release whose critic takes other args
    class CriticWorker(CriticWorker):
        def __init__(self, settings):
            super().__init__(settings)
"""
# A Ray whose remote calls run in a real child process of the same interpreter (as Ray's
# workers are), the config handed over as YAML; a failure there raises in the caller a
# RayTaskError carrying the task's own exception, pickled across as Ray does (`cause`).
FAKE_RAY = """
import os, pickle, subprocess, sys, tempfile
_up = False


_tries = 0


class RayTaskError(Exception):
    def __init__(self, text, cause=None):
        super().__init__(text)
        self.cause = cause


def init(**kwargs):
    global _up, _tries
    _tries += 1
    if os.environ.get('FAKE_VERL_FAIL') == 'ray':
        raise RuntimeError('Failed to connect to GCS at address 127.0.0.1:6379 within 60 seconds')
    if os.environ.get('FAKE_VERL_FAIL') == 'ray-slow' and _tries == 1:
        raise Exception('The current node timed out during startup. This could happen because '
                        'some of the raylet failed to startup or the GCS has become overloaded.')
    _up = True


def is_initialized():
    return _up


def shutdown():
    global _up
    _up = False


class _Method:
    def __init__(self, cls, name):
        self.cls, self.name = cls, name

    def remote(self, config):
        from omegaconf import OmegaConf
        fd, path = tempfile.mkstemp(suffix='.yaml')
        os.close(fd)
        OmegaConf.save(config, path)
        caught = path + '.exc'
        code = ('import pickle, sys, traceback; from omegaconf import OmegaConf; import importlib\\n'
                f'm = importlib.import_module({self.cls.__module__!r})\\n'
                f'c = getattr(m, {self.cls.__name__!r})\\n'
                'try:\\n'
                f'    getattr(c.__ray_cls__(), {self.name!r})(OmegaConf.load({path!r}))\\n'
                'except BaseException as e:\\n'
                '    traceback.print_exc()\\n'
                f'    pickle.dump(e, open({caught!r}, "wb"))\\n'
                '    sys.exit(1)\\n')
        done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
        return done, caught


class _Actor:
    def __init__(self, cls):
        self.cls = cls

    def __getattr__(self, name):
        return _Method(self.cls, name)


def remote(cls):
    class Handle:
        __ray_cls__ = cls
        __ray_actor_class__ = cls  # as Ray's ActorClass keeps the class it wraps
        __module__ = cls.__module__
        __name__ = cls.__name__

        @staticmethod
        def remote():
            return _Actor(Handle)
    Handle.__name__ = cls.__name__
    return Handle


def get(ref):
    done, caught = ref
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ['no output'])[-1]
        try:
            with open(caught, 'rb') as fh:
                cause = pickle.load(fh)
        except Exception:
            cause = None
        raise RayTaskError(f'ray::TaskRunner.run() failed: {last}', cause)
    return None
"""


# verl's vLLM sharding manager, imported only inside init_model (its rollout), past where a
# CPU stops: FAKE_VERL_FAIL=sharding breaks one of its own imports.
SHARDING = """
import os
if os.environ.get('FAKE_VERL_FAIL') == 'sharding':
    from vllm.distributed import parallel_state
"""


def fake_verl_03() -> dict[str, str]:
    return packages(
        {
            "verl/trainer/main_ppo.py": MAIN_PPO,
            "verl/trainer/config/ppo_trainer.yaml": CONFIG,
            "verl/trainer/ppo/ray_trainer.py": RAY_TRAINER,
            "verl/utils/tokenizer.py": TOKENIZER,
            "verl/utils/dataset/rl_dataset.py": RL_DATASET,
            "verl/third_party/vllm/__init__.py": GATE_V03,
            "verl/workers/rollout/vllm_rollout/__init__.py": ROLLOUT_V02,
            "verl/workers/fsdp_workers.py": FSDP_WORKERS,
            "verl/workers/actor/dp_actor.py": "\n",
            "verl/workers/critic/dp_critic.py": "\n",
            "verl/utils/checkpoint/fsdp_checkpoint_manager.py": "\n",
            "verl/workers/sharding_manager/fsdp_vllm.py": SHARDING,
        }
    ) | {"verl/utils/__init__.py": "from .tokenizer import hf_tokenizer\n"}


# transformers as the model step and the workers meet it on a host without a GPU (4.49's and
# 5.9's checks in _check_and_enable_flash_attn_2 / _flash_attn_import_error, same words):
# flash-attn missing is an ImportError; installed but no GPU, "... is not available on CPU".
# from_pretrained is PreTrainedModel's classmethod, which the Auto classes call on the model
# class, as transformers' are.
FAKE_MODELING_UTILS = """
import importlib.util, os

PREFACE = 'FlashAttention2 has been toggled on, but it cannot be used due to the following error:'


def check_attention(attn_implementation):
    if attn_implementation == 'flash_attention_2':
        if os.environ.get('FAKE_NO_FLASH_ATTN') or importlib.util.find_spec('flash_attn') is None:
            raise ImportError(f'{PREFACE} the package flash_attn seems to be not installed.')
        raise ValueError(f'{PREFACE} Flash Attention 2 is not available on CPU. Please make '
                         f'sure torch can access a CUDA device.')


class PreTrainedModel:
    @classmethod
    def from_pretrained(cls, path, attn_implementation=None, config=None, **kwargs):
        check_attention(attn_implementation or getattr(config, '_attn_implementation', None))
        model = cls()
        model.attn_implementation = attn_implementation
        return model


class Qwen2ForCausalLM(PreTrainedModel):
    pass
"""
FAKE_TRANSFORMERS = """
import json, os
from transformers.modeling_utils import PreTrainedModel, Qwen2ForCausalLM, check_attention


class AutoConfig:
    @staticmethod
    def from_pretrained(path):
        with open(os.path.join(path, 'config.json')) as fh:
            return json.load(fh)


class AutoModelForCausalLM:
    @staticmethod
    def from_config(config, attn_implementation=None):
        if config.get('model_type') != 'qwen2':
            raise ValueError(f"The checkpoint you are trying to load has model type "
                             f"`{config.get('model_type')}` but Transformers does not recognize "
                             f"this architecture.")
        check_attention(attn_implementation)
        return object()

    @staticmethod
    def from_pretrained(path, **kwargs):
        return Qwen2ForCausalLM.from_pretrained(path, **kwargs)
"""


def fake_torch_meta() -> dict[str, str]:
    """The fake torch, with `torch.device(...)` as a context manager (the meta device), CUDA
    that raises torch's own error wherever it would initialise (no driver here: every such
    call goes through torch.cuda._lazy_init, as torch's do), torch.distributed's process group
    (its default backend, for a CUDA build, needs GPUs) and FSDP1's constructor, which refuses
    CPU parameters with sync_module_states as torch's does."""
    files = fake_torch("2.5.1", device_mesh=True)
    files["torch/__init__.py"] += (
        "import contextlib\ndef device(name):\n    return contextlib.nullcontext()\n"
    )
    files["torch/cuda/__init__.py"] = (
        "def is_available():\n    return False\n"
        "def _lazy_init():\n"
        "    raise RuntimeError('Found no NVIDIA driver on your system. Please check that you "
        "have an NVIDIA GPU and installed a driver')\n"
        "def current_device():\n    _lazy_init()\n    return 0\n"
        "def get_device_name(device=None):\n    _lazy_init()\n"
    )
    files["torch/distributed/__init__.py"] = (
        "import os\n_group = []\n"
        "def is_initialized():\n    return bool(_group)\n"
        "def init_process_group(backend=None, rank=None, world_size=None, **kwargs):\n"
        "    if backend is None:\n"
        "        raise RuntimeError('ProcessGroupNCCL is only supported with GPUs, no GPUs found!')\n"
        "    for var in ('MASTER_ADDR', 'MASTER_PORT'):\n"
        "        if not os.environ.get(var):\n"
        "            raise ValueError(f'environment variable {var} expected, but not set')\n"
        "    _group.append((backend, rank, world_size))\n"
        "def get_world_size():\n    return _group[-1][2]\n"
    )
    files["torch/distributed/fsdp/__init__.py"] = (
        "from .fully_sharded_data_parallel import FullyShardedDataParallel\n"
    )
    files["torch/distributed/fsdp/fully_sharded_data_parallel.py"] = (
        "class FullyShardedDataParallel:\n"
        "    def __init__(self, module, device_id=None, sync_module_states=False, **kwargs):\n"
        "        if sync_module_states and device_id in (None, 'cpu'):\n"
        "            raise ValueError('The module has CPU parameters or buffers when "
        "`sync_module_states=True`, which requires them to be on GPU.')\n"
        "        self.module = module\n"
    )
    return files


def link_pyarrow(py: Path) -> None:
    """This test environment's real pyarrow, linked into the venv (the fake RLHFDataset and
    the wrapper's row count read the parquet with it)."""
    import pyarrow

    site = next((py.parent.parent / "lib").glob("python*/site-packages"))
    (site / "pyarrow").symlink_to(Path(pyarrow.__file__).parent)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """(python, bundle, model dir, data file): the fake verl 0.3 venv and a user's model and
    data (a tokenizer with a chat template, a parquet of 8 rows in verl's RL format). Made once
    per run (read-only)."""

    def make(root: Path) -> Value:
        import pyarrow as pa
        import pyarrow.parquet as pq

        w = root / "wheels"
        py = make_env(
            root,
            [
                wheel(w, "torch", "2.5.1", fake_torch_meta()),
                wheel(w, "vllm", "0.7.3", {"vllm/__init__.py": "LLM = object\n"}),
                wheel(w, "ray", "2.40.0", {"ray/__init__.py": FAKE_RAY}),
                wheel(
                    w,
                    "transformers",
                    "4.49.0",
                    {
                        "transformers/__init__.py": FAKE_TRANSFORMERS,
                        "transformers/modeling_utils.py": FAKE_MODELING_UTILS,
                    },
                ),
                wheel(
                    w, "flash-attn", "2.7.3", {"flash_attn/__init__.py": "__version__ = '2.7.3'\n"}
                ),
                wheel(w, "verl", "0.3.0.post1", fake_verl_03()),
            ],
        )
        link_pyarrow(py)
        model = root / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
        (model / "tokenizer_config.json").write_text(
            json.dumps({"chat_template": "{{ messages }}"})
        )
        rows = [
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
                "extra_info": {"split": "train", "index": i},
            }
            for i in range(8)
        ]
        data = root / "train.parquet"
        pq.write_table(pa.Table.from_pylist(rows), data)
        where = bundle(root, {"torch": "2.5.1", "vllm": "0.7.3", "verl": "0.3.0.post1"})
        return [str(p) for p in (py, add_server_program(where), model, data)]

    made = once(tmp_path_factory, "dryrun.stack", make)
    assert isinstance(made, list)
    py, where, model, data = (Path(str(p)) for p in made)
    return py, where, model, data


def deep(
    stack: tuple[Path, Path, Path, Path], *args: str, fail: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """`readiness --deep --json` on the user's model and data, by the environment's python."""
    py, where, model, data = stack
    environ = clean_environ(where.parent)
    environ.update(PYTHONPATH=str(ROOT), FAKE_VERL_FAIL=fail, **env)
    cmd = [str(py), "-m", "verl_bundle.airgap", "readiness", "--bundle", str(where), "--deep"]
    cmd += ["--model", str(model), "--data", str(data), "--json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=600)


def statuses(out: subprocess.CompletedProcess[str]) -> tuple[dict[str, Any], dict[str, str]]:
    doc = json.loads(out.stdout)
    checks = {c["id"]: c for c in doc["result"]["checks"] if c["id"].startswith("dryrun")}
    return doc, {k: c["status"] for k, c in checks.items()}


@pytest.mark.slow
def test_a_trainer_that_reaches_the_gpu_boundary_is_ready_on_the_cpu_side(
    stack: tuple[Path, Path, Path, Path],
) -> None:
    out = deep(stack)
    assert out.returncode == 0, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status == {
        "dryrun:assets": "ok",
        "dryrun:config": "ok",
        "dryrun:tokenizer": "ok",
        "dryrun:dataset": "ok",
        "dryrun:ray": "ok",
        "dryrun:workers": "ok",
        "dryrun:model": "ok",
        "dryrun:flash-attn": "untested",
        "dryrun:worker-init": "ok",
        "dryrun:worker-model": "untested",
        "dryrun:worker-imports": "ok",
        "dryrun:unproven:vllm-engine": "untested",
        "dryrun:step": "untested",
    }
    checks = {c["id"]: c for c in doc["result"]["checks"]}
    assert checks["dryrun:dataset"]["summary"].startswith("verl's RLHFDataset loaded (8 rows)")
    workers = checks["dryrun:workers"]["summary"]
    assert "reached the GPU boundary" in workers
    assert "Total available GPUs 0 is less than total desired GPUs 1" in workers
    # Where verl was, by structure: its check, the raising line, the verl frames above it.
    site = "verl.trainer.ppo.ray_trainer:ResourcePoolManager._check_resource_available"
    assert f"{site} refused 1 GPU(s) with 0 available" in workers
    assert "verl/trainer/ppo/ray_trainer.py:" in workers and "create_resource_pool" in workers
    # Progress on stderr as it goes (install.sh shows post-install's output): each step.
    said = [ln.strip() for ln in out.stderr.splitlines() if ln.strip().startswith("dry run:")]
    assert any(ln.startswith("dry run: ray done (") for ln in said), out.stderr
    assert f"dry run: workers reached the GPU boundary ({site})" in said, out.stderr
    assert "dry run: worker-model critic: stopped at a GPU-only call" in said, out.stderr
    # flash-attn is installed, so transformers refused only the CPU: the model was built.
    assert "attn_implementation=flash_attention_2" in checks["dryrun:model"]["summary"]
    assert "need a GPU" in checks["dryrun:model"]["summary"]
    # verl's own worker classes, built with verl's config: critic first, as verl inits them.
    assert checks["dryrun:worker-init"]["summary"].startswith(
        "critic (CriticWorker), ref (ActorRolloutRefWorker), actor_rollout (ActorRolloutRefWorker)"
    )
    model = checks["dryrun:worker-model"]
    assert model["subject"] == "worker model init from FSDP wrapping / CUDA initialisation"
    assert "critic at FSDP wrapping, verl/workers/fsdp_workers.py:" in model["summary"]
    assert "actor_rollout at CUDA initialisation, verl/workers/fsdp_workers.py:" in model["summary"]
    assert "`self.fsdp = FSDP(module, device_id=torch.cuda.current_device()" in model["summary"]
    assert "answered here: cuda-device-name, eager-attention" in model["summary"]
    # What init_model imports past that point (its rollout's modules), each imported; the one
    # this release does not have said as such.
    imports = checks["dryrun:worker-imports"]["summary"]
    assert imports.startswith("5 imported: verl.workers.actor.dp_actor, ")
    assert "verl.workers.sharding_manager.fsdp_vllm" in imports
    assert imports.endswith("; not in verl 0.3.0.post1: verl.utils.vllm_utils")
    # Never a bare "ready": each step a GPU would prove is named.
    assert doc["verdict"]["state"] == "ready-cpu"
    assert doc["verdict"]["line"] == (
        "ready to train on the CPU side (PPO with FSDP and vLLM rollout); not proven here: "
        "flash-attn kernels, worker model init from FSDP wrapping / CUDA initialisation, "
        "the vLLM engine start, one PPO step (needs a GPU: --require-gpu on a GPU server)"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fail", "args", "step", "words", "where"),
    [
        (
            "init_model",
            (),
            "worker-model",
            "RuntimeError: planted at the start of init_model",
            "verl/workers/fsdp_workers.py:",
        ),
        (
            "sharding",
            (),
            "worker-imports",
            "ModuleNotFoundError: No module named 'vllm.distributed'",
            "verl/workers/sharding_manager/fsdp_vllm.py:",
        ),
        (
            "",
            ("--override", "actor_rollout_ref.actor.ppo_mini_batch_size=-1"),
            "worker-init",
            "AssertionError: ppo_mini_batch_size -1 should be larger than 0 after normalization",
            "verl/workers/fsdp_workers.py:",
        ),
    ],
)
def test_an_error_verls_workers_raise_after_the_boundary_is_not_ready(
    stack: tuple[Path, Path, Path, Path],
    fail: str,
    args: tuple[str, ...],
    step: str,
    words: str,
    where: str,
) -> None:
    """A RuntimeError at the start of init_model, or a mini-batch verl's worker __init__
    asserts against, is raised in verl's own workers after the GPU boundary: not ready (exit
    5) naming it and where verl raised it, never "ready-cpu"."""
    out = deep(stack, *args, fail=fail)
    assert out.returncode == 5, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status["dryrun:workers"] == "ok"  # the boundary came first
    assert [k for k, v in status.items() if v == "fail"] == [f"dryrun:{step}"]
    check = next(c for c in doc["result"]["checks"] if c["id"] == f"dryrun:{step}")
    assert words in check["summary"] and f"(raised at {where}" in check["summary"]
    assert status["dryrun:step"] == "skip"
    assert "dryrun:unproven:vllm-engine" not in status
    assert doc["verdict"]["line"].startswith(
        f"not ready to train: trainer dry run: {check['summary'][:30]}"
    )


@pytest.mark.slow
def test_an_error_of_the_dry_runs_own_harness_is_never_a_finding(
    stack: tuple[Path, Path, Path, Path],
) -> None:
    """A worker class that takes other arguments than the recipe gives (a TypeError raised at
    the harness's own call): not proven, said as the harness's failure, never "not ready"."""
    out = deep(stack, fail="signature")
    assert out.returncode == 0, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status["dryrun:worker-init"] == "untested"
    assert status["dryrun:worker-model"] == "skip"
    check = next(c for c in doc["result"]["checks"] if c["id"] == "dryrun:worker-init")
    assert check["detail"].startswith("the dry run's own harness failed here, not verl")
    assert "TypeError" in check["summary"] and "dryrun_workers.py:" in check["summary"]
    assert doc["verdict"]["state"] == "ready-cpu"
    assert "verl's worker classes (the dry run's own harness failed here" in doc["verdict"]["line"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fail", "step", "words"),
    [
        # The boundary's very words, raised by verl's dataset: an ordinary failure.
        ("sentence", "dataset", "ValueError: Total available GPUs 0 is less than total desired"),
        # The same words from a function verl's check calls, not from the check itself.
        ("callee", "workers", "ValueError: Total available GPUs 0 is less than total desired"),
        # An error verl got past without retrying the step, before the boundary: never cleared.
        ("swallowed", "tokenizer", "OSError: Can't load tokenizer"),
    ],
)
def test_the_boundary_is_verls_own_check_refusing_not_its_words(
    stack: tuple[Path, Path, Path, Path], fail: str, step: str, words: str
) -> None:
    out = deep(stack, fail=fail)
    assert out.returncode == 5, out.stdout + out.stderr
    doc, status = statuses(out)
    assert [k for k, v in status.items() if v == "fail"] == [f"dryrun:{step}"]
    check = next(c for c in doc["result"]["checks"] if c["id"] == f"dryrun:{step}")
    assert words in check["summary"]
    if fail != "swallowed":  # (there verl did reach its GPU check, after the failure)
        assert "reached the GPU boundary" not in json.dumps(doc["result"]["checks"])
    assert status["dryrun:worker-init"] == "skip"
    assert doc["verdict"]["line"].startswith(
        f"not ready to train: trainer dry run: {check['summary'][:30]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fail", "step", "words"),
    [
        ("tokenizer", "tokenizer", "OSError: Can't load tokenizer"),
        ("ray", "ray", "RuntimeError: Failed to connect to GCS"),
        ("flash-attn", "workers", "ImportError: FlashAttention2 has been toggled on"),
    ],
)
def test_each_step_that_raises_is_not_ready_with_its_step_and_fix(
    stack: tuple[Path, Path, Path, Path], fail: str, step: str, words: str
) -> None:
    out = deep(stack, fail=fail)
    assert out.returncode == 5, out.stdout + out.stderr
    doc, status = statuses(out)
    failed = [k for k, v in status.items() if v == "fail"]
    assert failed == [f"dryrun:{step}"]
    check = next(c for c in doc["result"]["checks"] if c["id"] == f"dryrun:{step}")
    assert words in check["summary"]
    assert check["fix"]
    assert doc["verdict"]["line"].startswith(
        f"not ready to train: trainer dry run: {check['summary'][:20]}"
    )
    assert status["dryrun:step"] == "skip"  # nothing after a failure is claimed
    if fail == "flash-attn":
        assert "flash-attn phase" in check["fix"]
    if fail == "ray":
        assert "ip link set lo up" in check["fix"]
        assert status["dryrun:tokenizer"] == "skip"


@pytest.mark.slow
def test_a_ray_start_up_that_timed_out_is_tried_again(
    stack: tuple[Path, Path, Path, Path],
) -> None:
    """Ray's own start-up timeout (a loaded host) is tried again; the first try stays in the
    events, but the step that got past it is ok and the run reaches the GPU boundary."""
    out = deep(stack, fail="ray-slow")
    assert out.returncode == 0, out.stdout + out.stderr
    _, status = statuses(out)
    assert status["dryrun:ray"] == "ok" and status["dryrun:workers"] == "ok"


@pytest.mark.slow
def test_a_dataset_in_the_wrong_shape_fails_at_the_dataset(
    stack: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "1 + 1?", "answer": "2"}] * 4), wrong)
    py, where, model, _ = stack
    out = deep((py, where, model, wrong))
    assert out.returncode == 5, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status["dryrun:dataset"] == "fail"
    assert status["dryrun:tokenizer"] == "ok"
    check = next(c for c in doc["result"]["checks"] if c["id"] == "dryrun:dataset")
    assert "KeyError: 'prompt'" in check["summary"]
    assert "verl's RL format" in check["detail"]


@pytest.mark.slow
def test_an_override_verl_does_not_know_fails_at_the_config(
    stack: tuple[Path, Path, Path, Path],
) -> None:
    out = deep(stack, "--override", "trainer.no_such_key=1")
    assert out.returncode == 5, out.stdout + out.stderr
    _, status = statuses(out)
    assert status["dryrun:config"] == "fail"
    assert status["dryrun:ray"] == "skip"


@pytest.mark.slow
def test_the_deadline_turns_a_hang_into_not_ready_and_leaves_nothing_running(
    stack: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    out = deep(stack, "--deadline", "25", fail="hang", FAKE_VERL_PIDS=str(pids))
    assert out.returncode == 5, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status["dryrun:workers"] == "fail"
    assert status["dryrun:dataset"] == "ok"
    check = next(c for c in doc["result"]["checks"] if c["id"] == "dryrun:workers")
    assert "no progress before the deadline" in check["summary"]
    hung = [int(p) for p in pids.read_text().split()]
    assert hung
    for pid in hung:  # the task runner's child process: killed with the run
        assert not alive(pid), pid


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it is not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_usage_errors_are_one_line(
    stack_free_bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from verl_bundle.airgap.cli import main

    code = main(["readiness", "--bundle", str(stack_free_bundle), "--deep", "--model", "/nowhere"])
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--model and --data go together" in err
    code = main(["readiness", "--bundle", str(stack_free_bundle), "--model", "/m", "--data", "/d"])
    assert code == 2
    assert "go with --deep" in capsys.readouterr().err


@pytest.fixture
def stack_free_bundle(tmp_path: Path) -> Path:
    return bundle(tmp_path, {"verl": "0.3.0.post1"})


# -- the report, from events (the GPU path is proven here on its events) ------------------------


def events(*items: tuple[str, str, dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {"step": step, "event": ev, "t": float(i), "pid": 1, **extra}
        for i, (step, ev, extra) in enumerate(items)
    )


def test_one_ppo_step_on_a_gpu_reports_its_time_and_memory() -> None:
    table = dryrun.load_table()
    done = [
        (s, "done", {"seconds": 1.0})
        for s in ("assets", "config", "ray", "tokenizer", "dataset", "workers")
    ]
    ran = dryrun.DryRun(
        "0.9.1",
        events(*done, ("step", "done", {"seconds": 12.5}), ("run", "end", {"ok": True})),
        False,
        0,
        40.0,
        gpus=1,
        cpus=16,
        memory_mib=5120,
    )
    checks = dryrun_report.checks(ran, table)
    step = next(c for c in checks if c.id == "dryrun:step")
    assert (step.status, step.summary) == (
        "ok",
        "one PPO step in 12.5 s, at most 5120 MiB of GPU memory in use",
    )
    v = verdict(installed=(), readiness=checks, purpose="PPO with FSDP and vLLM rollout")
    assert v.state == "ready"


def test_a_hang_in_verl_09_workers_names_the_cpu_override() -> None:
    table = dryrun.load_table()
    ran = dryrun.DryRun(
        "0.9.1",
        events(
            *[(s, "done", {}) for s in ("assets", "config", "ray", "tokenizer", "dataset")],
            ("workers", "start", {}),
        ),
        True,
        None,
        900.0,
        gpus=0,
        cpus=2,
    )
    failed = [c for c in dryrun_report.checks(ran, table) if c.status == "fail"]
    assert [c.id for c in failed] == ["dryrun:workers"]
    assert "ray_kwargs.ray_init.num_cpus=16" in failed[0].fix
    # Given enough CPUs, the deadline is not blamed on them.
    enough = dataclasses.replace(ran, cpus=16)
    failed = [c for c in dryrun_report.checks(enough, table) if c.status == "fail"]
    assert "num_cpus" not in failed[0].fix and "--deadline" in failed[0].fix


def test_every_known_failure_matches_its_sample() -> None:
    table = dryrun.load_table()
    generic = dryrun_report.explain("nothing known", "config", "0.3.0.post1", False, table)
    for entry in table["causes"]:
        if entry.get("on") == "deadline":
            got = dryrun_report.explain("", entry["step"], "0.9.1", True, table)
        else:
            got = dryrun_report.explain(entry["sample"], "workers", "0.9.1", False, table)
        assert got == (entry["cause"], entry["fix"]) or "{" in entry["cause"], entry["id"]
        assert got != generic, entry["id"]
        assert "{" not in got[0] + got[1], entry["id"]


@pytest.mark.parametrize(
    ("verl", "entry"),
    [
        ("0.3.0.post1", "run_ppo"),
        ("0.4.1", "run_ppo"),
        ("0.9.1", "main.__wrapped__"),
        ("0.2.0.post2", None),
    ],
)
def test_each_verl_release_has_its_entry(verl: str, entry: str | None) -> None:
    row = dryrun.row_for(verl, dryrun.load_table())
    assert (row["entry"] if row else None) == entry
    if row:
        steps = {s["id"] for s in dryrun.load_table()["steps"]}
        assert set(row["sites"]) <= steps
        assert any(o.startswith("trainer.n_gpus_per_node=") for o in row["overrides"])


def test_the_hooks_mark_a_call_in_a_child_process(tmp_path: Path) -> None:
    """The markers work in any process that starts with them on its path (as Ray's workers
    do): a module loaded after start-up has its site wrapped before anyone imports it."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    src = Path(dryrun.INSIDE)
    (hooks / "dryrun_hooks.py").write_text((src / "dryrun_hooks.py").read_text())
    (hooks / "sitecustomize.py").write_text("import dryrun_hooks\n")
    (tmp_path / "pkg").mkdir()
    # A package that reads its own data file through importlib.resources, as transfer_queue
    # (verl 0.9's first Ray actor) reads its config.yaml: a marked module must still read it.
    (tmp_path / "pkg" / "__init__.py").write_text(
        "from importlib import resources\n"
        "SIZE = len((resources.files('pkg') / 'size.txt').read_text().strip())\n"
        "class Data:\n    def __init__(self, n):\n        self.n = n * SIZE\n"
        "    def __len__(self):\n        return self.n\n"
    )
    (tmp_path / "pkg" / "size.txt").write_text("x\n")
    (tmp_path / "pkg" / "use.py").write_text("from pkg import Data\nDATA = Data(5)\n")
    log = tmp_path / "events.jsonl"
    env = clean_environ(tmp_path)
    env.update(
        PYTHONPATH=f"{hooks}{os.pathsep}{tmp_path}",
        VERL_BUNDLE_DRYRUN_EVENTS=str(log),
        VERL_BUNDLE_DRYRUN_SITES=json.dumps({"dataset": ["pkg:Data.__init__"]}),
    )
    subprocess.run([sys.executable, "-c", "import pkg.use"], check=True, env=env, cwd=tmp_path)
    got = dryrun.read_events(str(log))
    assert [(e["step"], e["event"], e.get("rows")) for e in got] == [
        ("dataset", "start", None),
        ("dataset", "done", 5),
    ]


def test_the_tiny_tokenizer_and_dataset_are_what_verl_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper's own assets, made offline with the real transformers, tokenizers and
    pyarrow of this test environment: a tokenizer whose chat template renders a prompt the way
    verl applies it, saved and loaded back with transformers, and a parquet in verl's RL format
    (the model itself needs torch: the real-stack rehearsal makes it)."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    for name in (dryrun.HOOKS, dryrun.WORKERS, dryrun.ENTRY):  # as the run has them
        copy = tmp_path / name.split(".")[0]
        copy.mkdir()
        (copy / name).write_text((Path(dryrun.INSIDE) / name).read_text())
        monkeypatch.syspath_prepend(str(copy))
    import dryrun_entry  # type: ignore[import-not-found]

    made = dryrun_entry.make_tokenizer(str(tmp_path / "model"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    assert len(tok) == len(made) and tok.eos_token == "<|im_end|>"  # noqa: S105 - a token
    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
    assert 0 < len(ids) < 128  # within the dry run's max_prompt_length
    rows = dryrun_entry.make_data(str(tmp_path / "train.parquet"))
    table = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert len(table) == rows == dryrun_entry.count_rows(str(tmp_path / "train.parquet"))
    assert set(table[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert table[0]["prompt"][0]["role"] == "user"
    assert table[0]["reward_model"]["style"] == "rule"


def test_the_asset_bundles_model_and_data_are_the_default(
    carried: Path,
    tmp_path: Path,
) -> None:
    """Without --model/--data, the dry run trains on what `assets install --prefix` placed for
    the venv (its index and records), found from the venv's python."""
    prefix = tmp_path / "prefix"
    proc = install_assets(carried, prefix)
    assert proc.returncode == 0, proc.stderr
    found = dryrun.installed_assets(str(prefix / "bin" / "python"))
    assert found is not None
    model, data = found
    assert Path(model, "config.json").is_file()
    assert data.endswith(".parquet") and Path(data).is_file()
    assert dryrun.installed_assets(str(tmp_path / "elsewhere" / "bin" / "python")) is None


def test_no_dry_run_when_verls_entry_cannot_start() -> None:
    """A config that does not compose (or main_ppo that does not import) stops verl's entry
    before its first step: the dry run is not started, and says why."""
    from verl_bundle.airgap.checks import Check
    from verl_bundle.airgap.postinstall import probing, readiness

    plan = readiness.Plan("PPO", ("verl.trainer.main_ppo",), "ppo_trainer", False, "0.9.1")
    before = [Check("import:flash_attn", "fail", "missing"), Check("config", "fail", "broken")]
    got = probing.dry_run_checks("/nowhere/python", plan, {}, before, dryrun.DryRunRequest())
    assert [(c.id, c.status) for c in got] == [("dryrun", "skip")]
    assert "config failed above" in got[0].summary


def test_an_error_a_ray_task_wraps_is_reported_as_its_own() -> None:
    """Ray's RayTaskError carries the task's own exception as `cause`: the event holds that
    one's line (so the GPU boundary raised inside a Ray actor is recognised as such)."""
    from verl_bundle.airgap.inside import dryrun_hooks

    class RayTaskError(Exception):
        def __init__(self, cause: BaseException) -> None:
            super().__init__("ray::TaskRunner.run() (pid=1, ip=127.0.0.1)")
            self.cause = cause

    inner = ValueError("Total available GPUs 0 is less than total desired GPUs 1")
    got = dryrun_hooks.error_fields(RayTaskError(inner))
    assert (got["type"], got["error"], got["via"]) == ("ValueError", str(inner), "RayTaskError")


@pytest.mark.parametrize(
    ("verl", "quick", "deep"),
    [("0.3.0.post1", False, True), ("0.3.0.post1", True, False), ("0.2.0.post2", False, False)],
)
def test_install_sh_starts_the_trainer_unless_quick(
    tmp_path: Path, verl: str, quick: bool, deep: bool
) -> None:
    """install.sh's post-install runs the dry run (postinstall --deep) for every verl release
    with a recipe; --quick leaves it out; a release without one (0.2) never asks for it."""
    from verl_bundle.airgap.contract.events import EventLog
    from verl_bundle.airgap.contract.manifest import load
    from verl_bundle.airgap.install.options import Options
    from verl_bundle.airgap.install.output import Output
    from verl_bundle.airgap.install.steps import Installer

    where = bundle(tmp_path, {"torch": "2.5.1", "verl": verl})
    opts = Options(bundle=str(where), prefix=str(tmp_path / "venv"), quick=quick)
    inst = Installer(opts, load(str(where)), Output(), EventLog())
    argv = inst.postinstall_command([], str(tmp_path / "checks.json")).argv
    assert ("--deep" in argv) is deep
    assert argv[argv.index("postinstall") :][:3] == ("postinstall", "--bundle", str(where))


def test_quick_says_the_trainers_start_is_not_proven(tmp_path: Path) -> None:
    """--quick: post-install's findings gain an untested check, so the verdict is never a bare
    "ready": it names the trainer's start, why it is not proven and how to prove it."""
    from verl_bundle.airgap.checks import Check
    from verl_bundle.airgap.contract.events import EventLog
    from verl_bundle.airgap.contract.manifest import load
    from verl_bundle.airgap.install.options import Options
    from verl_bundle.airgap.install.output import Output
    from verl_bundle.airgap.install.steps import Installer
    from verl_bundle.airgap.postinstall.run import Findings

    where = bundle(tmp_path, {"verl": "0.4.1"})
    opts = Options(bundle=str(where), prefix=str(tmp_path / "venv"), quick=True)
    inst = Installer(opts, load(str(where)), Output(), EventLog())
    ready = Findings((Check("v", "ok", "ok"),), (Check("import:main_ppo", "ok", "ok"),), "PPO")
    assert ready.verdict.state == "ready"
    found = inst.left_out(ready)
    assert found.verdict.state == "ready-cpu"
    assert found.verdict.code == 0
    assert found.verdict.line == (
        "ready to train on the CPU side (PPO); not proven here: the trainer's start "
        "(left out by --quick)"
    )
    left = found.readiness[-1]
    assert "readiness --bundle" in left.fix and left.fix.endswith("--deep")


def test_the_verdict_says_why_each_untested_check_is_not_proven() -> None:
    """Untested checks are grouped by their reason (their detail), in order; one without a
    reason needs a GPU."""
    from verl_bundle.airgap.checks import Check

    v = verdict(
        installed=[Check("v", "ok", "ok")],
        readiness=[
            Check("import:r", "untested", "GPU only", subject="r"),
            Check("dryrun", "untested", "left out", detail="left out by --quick", subject="s"),
            Check("dryrun:step", "untested", "GPU only", subject="one PPO step"),
        ],
        purpose="PPO",
    )
    assert v.line == (
        "ready to train on the CPU side (PPO); not proven here: r, one PPO step (needs a GPU: "
        "--require-gpu on a GPU server); s (left out by --quick)"
    )


@pytest.mark.slow
def test_postinstall_deep_runs_the_dry_run_install_sh_asks_for(
    stack: tuple[Path, Path, Path, Path],
) -> None:
    """The command install.sh runs after the phases (postinstall --deep) starts verl's
    trainer: the dry run's checks are among post-install's findings, and the verdict names
    the step a GPU would prove."""
    py, where, model, data = stack
    environ = clean_environ(where.parent)
    environ.update(PYTHONPATH=str(ROOT))
    cmd = [str(py), "-m", "verl_bundle.airgap", "postinstall", "--bundle", str(where)]
    cmd += ["--deep", "--model", str(model), "--data", str(data), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=600)
    doc = json.loads(out.stdout)
    found = {c["id"]: c["status"] for c in doc["result"]["readiness"]}
    assert found["dryrun:workers"] == "ok", out.stdout
    assert found["dryrun:step"] == "untested"
    assert (out.returncode, doc["verdict"]["state"]) == (0, "ready-cpu"), doc["verdict"]
    assert "one PPO step" in doc["verdict"]["line"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "words", "fix"),
    [
        (
            {"FAKE_NO_FLASH_ATTN": "1"},
            "ImportError: FlashAttention2 has been toggled on",
            "flash-attn phase",
        ),
        ({"FAKE_MODEL_TYPE": "qwen9"}, "does not recognize this architecture", "main_ppo"),
    ],
)
def test_a_model_verls_workers_cannot_build_fails_at_the_model_step(
    stack: tuple[Path, Path, Path, Path], env: dict[str, str], words: str, fix: str
) -> None:
    """On a host without a GPU, after the boundary, the model is built as verl's workers build
    it: flash-attn missing for verl's default attention, or an architecture transformers does
    not know, is "not ready" at the model step (not at the GPU node)."""
    py, where, model, data = stack
    own = model.parent / f"model-{len(env)}-{sorted(env)[0]}"
    shutil.copytree(model, own, dirs_exist_ok=True)
    config = json.loads((own / "config.json").read_text())
    config["model_type"] = env.get("FAKE_MODEL_TYPE", "qwen2")
    (own / "config.json").write_text(json.dumps(config))
    out = deep((py, where, own, data), **{k: v for k, v in env.items() if k != "FAKE_MODEL_TYPE"})
    assert out.returncode == 5, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status["dryrun:workers"] == "ok"  # the GPU boundary was reached first
    assert [k for k, v in status.items() if v == "fail"] == ["dryrun:model"]
    check = next(c for c in doc["result"]["checks"] if c["id"] == "dryrun:model")
    assert words in check["summary"]
    assert "(from" not in check["summary"]  # its own error, not chained to verl's boundary
    assert fix in check["fix"]
    assert doc["verdict"]["line"].startswith("not ready to train: trainer dry run: model built")


def test_the_attention_is_verls_unless_an_override_sets_it() -> None:
    """verl 0.9 reads override_config.attn_implementation; 0.3/0.4 fix flash_attention_2."""
    table = dryrun.load_table()
    v09, v03 = dryrun.row_for("0.9.1", table), dryrun.row_for("0.3.0.post1", table)
    assert v09 is not None and v03 is not None
    key = "actor_rollout_ref.model.override_config.attn_implementation"
    assert dryrun._attention(v09, ()) == "flash_attention_2"
    assert dryrun._attention(v09, (f"+{key}=sdpa",)) == "sdpa"
    assert dryrun._attention(v03, (f"+{key}=sdpa",)) == "flash_attention_2"


@pytest.mark.slow
def test_the_host_command_runs_the_dry_run_in_the_installed_environment(
    stack: tuple[Path, Path, Path, Path],
) -> None:
    """`verl-bundle readiness --bundle DIR --python VENV_PY --deep` runs the server program's
    readiness by that environment's python: the dry run's checks and the same verdict."""
    py, where, model, data = stack
    environ = clean_environ(where.parent)
    cmd = [sys.executable, "-m", "verl_bundle", "readiness", "--bundle", str(where)]
    cmd += ["--python", str(py), "--deep", "--model", str(model), "--data", str(data), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    doc, status = statuses(out)
    assert status["dryrun:workers"] == "ok" and status["dryrun:step"] == "untested"
    assert doc["verdict"]["state"] == "ready-cpu"
    # Text: the verdict is the last line.
    text = subprocess.run(cmd[:-1], capture_output=True, text=True, env=environ, timeout=600)
    assert text.stdout.strip().splitlines()[-1] == doc["verdict"]["line"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--bundle", "{tmp}"], "no manifest.json there"),
        (["--bundle", "{where}", "--model", "{tmp}"], "go with --deep"),
        (["--bundle", "{where}", "--python", "/nowhere/python"], "no such file"),
        # Not a Python: exits 0 saying nothing, prints megabytes, or cannot be run at all.
        (
            ["--bundle", "{where}", "--python", "/bin/true"],
            "not a Python 3.8+ interpreter (exit 0, it printed nothing)",
        ),
        (
            ["--bundle", "{where}", "--python", "{loud}"],
            "not a Python 3.8+ interpreter (it printed more than 4096 bytes, starting 'xxxx",
        ),
        (["--bundle", "{where}", "--python", "{text}"], "cannot run it (Permission denied)"),
        (["--bundle", "{bare}", "--python", "{py}"], "no lib/verl_bundle/airgap there"),
    ],
)
def test_the_host_command_says_bad_input_in_one_line(
    tmp_path: Path, args: list[str], words: str
) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "bare").mkdir()
    where = add_server_program(bundle(tmp_path / "b", {"verl": "0.3.0.post1"}))
    bare = bundle(tmp_path / "bare", {"verl": "0.3.0.post1"})
    loud, text = tmp_path / "loud", tmp_path / "notes.txt"
    loud.write_text("#!/bin/sh\nhead -c 10000000 /dev/zero | tr '\\0' x\n")
    loud.chmod(0o755)
    text.write_text("not a program\n")
    values = {"tmp": tmp_path, "where": where, "bare": bare, "loud": loud, "text": text}
    given = [a.format(py=sys.executable, **values) for a in args]
    if "--python" not in given:
        given += ["--python", sys.executable]
    cmd = [sys.executable, "-m", "verl_bundle", "readiness", *given]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout[:2000] + out.stderr[:2000]
    assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr, out.stderr[:2000]
    assert len(out.stdout) + len(out.stderr) < 1000  # never the interpreter's output echoed
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_the_runs_temporary_files_go_with_its_own_directory(
    stack: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    """What the trainer's processes leave in the temporary directory (torch.distributed makes
    one at import, left when the run's workers are killed) is removed with the run's own
    directory, never left in the caller's TMPDIR."""
    mine = tmp_path / "tmp"
    mine.mkdir()
    out = deep(stack, FAKE_VERL_TMP="1", TMPDIR=str(mine))
    assert out.returncode == 0, out.stdout + out.stderr
    assert not [p.name for p in mine.iterdir() if p.name.startswith("verl-dryrun-leak-")]


# -- the boundary by structure: the hook and the report, on their own -------------------------


class _Pool:
    """verl's ResourcePoolManager, at the boundary's site: the check raises itself, or has a
    callee raise the same words, or raises with enough GPUs (not the refusal)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def _check_resource_available(self) -> None:
        total_available_gpus, total_required_gpus = 0, 1
        if self.how == "callee":
            _same_words(total_available_gpus, total_required_gpus)
        if self.how == "enough":
            total_available_gpus = 2
        raise ValueError(
            f"Total available GPUs {total_available_gpus} is less than total desired GPUs "
            f"{total_required_gpus}"
        )


def _same_words(available: int, required: int) -> None:
    raise ValueError(f"Total available GPUs {available} is less than total desired GPUs {required}")


class _Trainer:
    """What the hook reads on the call chain at the boundary (verl's RayPPOTrainer)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.role_worker_mapping = {"ActorRollout": _Pool, "Critic": _Pool}
        self.use_critic = True

    def init_workers(self, pool: _Pool) -> None:
        pool._check_resource_available()


@pytest.mark.parametrize(("how", "tagged"), [("own", True), ("callee", False), ("enough", False)])
def test_the_hook_knows_verls_refusal_by_where_it_was_raised(
    tmp_path: Path, how: str, tagged: bool
) -> None:
    """The GPU boundary is the recorded function raising it itself with too few GPUs (its own
    counts): then one event with where, and a tag on the exception; the same words from a
    callee, or with enough GPUs, pass untouched. What the trainer had decided is captured."""
    from omegaconf import OmegaConf

    from verl_bundle.airgap.inside import dryrun_hooks

    log, capture = tmp_path / "events.jsonl", tmp_path / "boundary.json"
    spec = {
        "site": "tests:_Pool._check_resource_available",
        "exception": "ValueError",
        "locals": {"available": "total_available_gpus", "required": "total_required_gpus"},
        "flags": ["use_critic", "use_reference_policy"],
        "capture": str(capture),
    }
    wrapped = dryrun_hooks.at_boundary(str(log), spec, _Pool._check_resource_available)
    hooked = type("Hooked", (_Pool,), {"_check_resource_available": wrapped})
    trainer = _Trainer(OmegaConf.create({"trainer": {"nnodes": 1}}))
    with pytest.raises(ValueError, match="Total available GPUs") as raised:
        trainer.init_workers(hooked(how))
    tag = dryrun_hooks.boundary_of(raised.value)
    got = dryrun.read_events(str(log))
    if not tagged:
        assert tag is None and got == () and not capture.exists()
        return
    assert tag is not None and tag["site"] == spec["site"]
    assert tag["at"].endswith(f"test_dryrun.py:{raised.traceback[-1].lineno + 1}")
    (event,) = got
    assert (event["event"], event["available"], event["required"]) == ("boundary", 0, 1)
    assert event["callers"][0].startswith("test_dryrun.py:init_workers:")
    # Captured from the trainer on the call chain: its roles, flags and config.
    doc = json.loads(capture.read_text())
    assert doc["roles"] == {"ActorRollout": "test_dryrun:_Pool", "Critic": "test_dryrun:_Pool"}
    assert doc["flags"] == {"use_critic": True}
    assert OmegaConf.load(doc["config"]).trainer.nnodes == 1


def test_the_boundary_tag_survives_pickling_as_ray_carries_it() -> None:
    """Ray sends a task's exception to the driver pickled (RayTaskError.cause): the tag, a
    plain attribute, comes with it."""
    import pickle

    from verl_bundle.airgap.inside import dryrun_hooks

    exc = ValueError("Total available GPUs 0 is less than total desired GPUs 1")
    setattr(exc, dryrun_hooks.TAG, {"site": "s", "at": "a"})
    back = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own object

    class RayTaskError(Exception):
        cause = back

    assert dryrun_hooks.boundary_of(RayTaskError()) == {"site": "s", "at": "a"}
    assert dryrun_hooks.boundary_of(RuntimeError("x")) is None


def _ran(*items: tuple[str, str, dict[str, Any]]) -> dryrun.DryRun:
    return dryrun.DryRun("0.4.1", events(*items), False, 1, 30.0, gpus=0, cpus=4)


BOUNDARY_EVENT = (
    "workers",
    "boundary",
    {"site": "s", "at": "/x/verl/t.py:1", "available": 0, "required": 1},
)
SAMPLE = dryrun.load_table()["boundary"]["sample"].split(": ", 1)


def test_an_error_before_the_boundary_is_never_cleared_by_it() -> None:
    steps: list[tuple[str, str, dict[str, Any]]] = [
        (s, "done", {}) for s in ("assets", "config", "ray")
    ]
    ran = _ran(
        *steps,
        ("tokenizer", "error", {"type": "OSError", "error": "Can't load tokenizer"}),
        ("dataset", "done", {}),
        BOUNDARY_EVENT,
        ("entry", "error", {"type": SAMPLE[0], "error": SAMPLE[1], "boundary": True}),
    )
    failed = [c for c in dryrun_report.checks(ran, dryrun.load_table()) if c.status == "fail"]
    assert [c.id for c in failed] == ["dryrun:tokenizer"]


@pytest.mark.parametrize("flagged", [True, False])
def test_the_boundarys_words_without_its_site_are_an_ordinary_failure(flagged: bool) -> None:
    """The sample's words in the entry's error are the boundary only with the site's event
    and the tag; the words alone (or an event with an untagged end) fail the workers step."""
    steps: list[tuple[str, str, dict[str, Any]]] = [
        (s, "done", {}) for s in ("assets", "config", "ray", "tokenizer", "dataset")
    ]
    end = ("entry", "error", {"type": SAMPLE[0], "error": SAMPLE[1], "boundary": flagged})
    ran = _ran(*steps, *([BOUNDARY_EVENT] if flagged else []), end)
    found = {c.id: c for c in dryrun_report.checks(ran, dryrun.load_table())}
    if flagged:
        assert found["dryrun:workers"].status == "ok"
        return
    assert found["dryrun:workers"].status == "fail"
    assert SAMPLE[1] in found["dryrun:workers"].summary
    # Even a boundary event, when the error that ended verl's entry is another one.
    ran = _ran(*steps, BOUNDARY_EVENT, end)
    found = {c.id: c for c in dryrun_report.checks(ran, dryrun.load_table())}
    assert found["dryrun:workers"].status == "fail"


def test_a_release_without_the_boundary_site_is_neither_ready_nor_a_finding(tmp_path: Path) -> None:
    """A verl whose module has no function where dryrun.json's boundary site says: the hook
    says the site is missing as the module loads, and the run's end at the GPU check is then
    `untested` (where the trainer stopped cannot be told), never a pass and never a finding."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "dryrun_hooks.py").write_text((Path(dryrun.INSIDE) / "dryrun_hooks.py").read_text())
    (hooks / "sitecustomize.py").write_text("import dryrun_hooks\n")
    (tmp_path / "moved.py").write_text("class ResourcePoolManager:\n    pass\n")
    log = tmp_path / "events.jsonl"
    env = clean_environ(tmp_path)
    site = "moved:ResourcePoolManager._check_resource_available"
    env.update(
        PYTHONPATH=f"{hooks}{os.pathsep}{tmp_path}",
        VERL_BUNDLE_DRYRUN_EVENTS=str(log),
        VERL_BUNDLE_DRYRUN_SITES=json.dumps({}),
        VERL_BUNDLE_DRYRUN_BOUNDARY=json.dumps({"site": site, "locals": {}}),
    )
    subprocess.run([sys.executable, "-c", "import moved"], check=True, env=env, cwd=tmp_path)
    (said,) = dryrun.read_events(str(log))
    assert (said["step"], said["event"], said["site"]) == ("workers", "unwatched", site)
    steps: list[tuple[str, str, dict[str, Any]]] = [
        (s, "done", {}) for s in ("assets", "config", "ray", "tokenizer", "dataset")
    ]
    end = ("entry", "error", {"type": SAMPLE[0], "error": SAMPLE[1]})
    ran = _ran(*steps, ("workers", "unwatched", {"site": site}), end)
    found = {c.id: c for c in dryrun_report.checks(ran, dryrun.load_table())}
    assert found["dryrun:workers"].status == "untested"
    assert f"({site}) is not in verl 0.4.1" in found["dryrun:workers"].detail
    assert found["dryrun:worker-init"].status == "skip"
    v = verdict(installed=(), readiness=list(found.values()), purpose="PPO")
    assert v.state == "ready-cpu" and "where verl's trainer stopped" in v.line


@pytest.mark.parametrize(
    ("verl", "roles"),
    [
        ("0.3.0.post1", ["Critic", "RefPolicy", "ActorRollout"]),
        ("0.4.1", ["Critic", "RefPolicy", "ActorRollout"]),
        ("0.5.0", []),  # built alike, but not measured: no recipe
        ("0.7.0", []),  # the critic takes a dataclass from v0.6
        ("0.9.0", []),
        ("0.9.1", ["Critic", "ActorRolloutRef", "ActorRollout"]),
    ],
)
def test_the_worker_recipe_covers_the_releases_it_was_measured_on(
    verl: str, roles: list[str]
) -> None:
    table = dryrun.load_table()
    row = dryrun.row_for(verl, table)
    assert row is not None and row["boundary"]["site"].endswith(
        ":ResourcePoolManager._check_resource_available"
    )
    recipe = dryrun._workers(row, verl)
    assert [r["role"] for r in recipe.get("roles", ())] == roles
    assert not any(k.endswith("evidence") for k in recipe)


def test_a_release_without_a_worker_recipe_names_its_workers_as_not_proven() -> None:
    steps: list[tuple[str, str, dict[str, Any]]] = [
        (s, "done", {}) for s in ("assets", "config", "ray", "tokenizer", "dataset", "model")
    ]
    end = ("entry", "error", {"type": SAMPLE[0], "error": SAMPLE[1], "boundary": True})
    ran = _ran(*steps, BOUNDARY_EVENT, end, ("worker-init", "norecipe", {}))
    found = {c.id: c for c in dryrun_report.checks(ran, dryrun.load_table())}
    assert found["dryrun:workers"].status == "ok"
    assert found["dryrun:worker-init"].status == "untested"
    assert found["dryrun:worker-init"].detail == "no worker recipe for verl 0.4.1"
    assert found["dryrun:worker-model"].status == "skip"
    assert found["dryrun:step"].status == "untested"
