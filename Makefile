# The one entry point: `make test`, `make lint`, `make bundle CUDA=12.4`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CUDA ?= 12.4
PY ?= 3.10
OUT ?= bundles
STAMP := $(VENV)/.installed

.PHONY: all venv test test-fast lint typecheck bundle e2e-real cold-real bench-real proof-real assets-real compile-real python-real bench bench-nodes bench-netnodes gpu-proof gpu-proof-prepare clean

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

# Two workers per core (pytest-xdist): about half of the suite's time is spent waiting on real
# engines and subprocesses (Slurm jobs, Ray's start, Ansible, installs), which a second worker
# per core fills. Tests that share a resource (the Slurm daemons) are kept on one worker by
# their xdist_group; the 25 slowest steps are listed at the end. CI (.ci/run) runs exactly
# this, with REQUIRE_ALL=1: a test that would skip for a missing tool fails instead.
WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
PYTEST_ARGS ?= -n $(WORKERS) --dist loadgroup --durations=25
test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check verl_bundle tests bench
	$(BIN)/ruff format --check verl_bundle tests bench
	$(BIN)/mypy
	$(BIN)/python -c 'import sys; sys.path.insert(0, "tests"); from test_install_shim import CONTEXT; from verl_bundle.bundle.plan import render_install; print(render_install(CONTEXT), end="")' | shellcheck -s sh -
	shellcheck -s sh templates/install-assets.sh

typecheck: $(STAMP)
	$(BIN)/mypy

# Build a bundle from the real indexes (needs the internet): make bundle CUDA=12.4 PY=3.10
# Through intranet mirrors: make bundle MIRRORS="pypi=https://nexus/simple pytorch-cu118=https://..."
# (one --mirror NAME=URL each; the command is not echoed, so credentials in a URL stay unseen;
# `verl-bundle profiles show NAME --mirrors` prints the MIRRORS= line with every location NAME needs).
# A profile by name instead of --cuda: make bundle PROFILE=cu118-legacy
MIRRORS ?=
PROFILE ?=
STACK = $(if $(PROFILE),--profile $(PROFILE),--cuda $(CUDA))
# The last line printed is the tarball's path (build's own last line).
bundle: $(STAMP)
	@echo "the CLI is $(BIN)/verl-bundle (or: source $(BIN)/activate)"
	@echo "$(BIN)/verl-bundle build $(STACK) --python $(PY) --output $(OUT)$(if $(MIRRORS), [$(words $(MIRRORS)) --mirror])"
	@$(BIN)/verl-bundle build $(STACK) --python $(PY) --output $(OUT) $(foreach m,$(MIRRORS),--mirror '$(m)')

# The real stacks from the real index (several GB each; needs the internet): build cu121, cu124
# and cu130 for cp310, rehearse each with Python 3.10 and no network, import torch, vllm, verl and
# transformers, and run readiness in each rehearsed venv.
# flash-attn is left to the server and not rehearsed: its build takes hours on this host's 2 cores
# (its host compile is `make compile-real`); readiness then reports what its absence means.
E2E_FLAGS ?= --compile never --skip-phase flash-attn
e2e-real: $(STAMP)
	$(BIN)/python bench/e2e_real.py --compare-pip $(E2E_FLAGS)

# The cold build of a real stack (cu130: the default index alone) side by side with 8 parallel
# curls of the same URLs and `pip download` of the same wheels, from empty caches, 3 runs each
# (needs the internet and about 15 GB of free disk under /tmp; several minutes). Not in `make test`.
COLD_FLAGS ?= --profile cu130 --runs 3
cold-real: $(STAMP)
	$(BIN)/python bench/cold_real.py $(COLD_FLAGS)

# Issue 27's four real-stack rows in one run (cu130; needs the internet, about 20 GB of free disk
# under /tmp and root to drop the page cache; about 25 minutes): warm rebuild vs tar cf, verify
# vs openssl, install.sh vs uv plus its checks' import floor, cold build vs 8 curls and pip
# download. Not in `make test`.
REAL_FLAGS ?= --profile cu130 --runs 3
bench-real: $(STAMP)
	$(BIN)/python bench/real_rows.py $(REAL_FLAGS)

# How deep the proof goes on the real stacks without a GPU (bench/proof_real.py; no network,
# minutes per stack): on kept rehearsals (rehearse BUNDLE --skip-phase flash-attn --keep DIR),
# with a stand-in flash_attn, plain and --deep readiness, an invalid ppo_mini_batch_size and a
# RuntimeError planted in init_model, each against its expected verdict. Not part of `make test`.
# make proof-real PROOF_FLAGS="--kept DIR [--kept DIR ...]"
PROOF_FLAGS ?=
proof-real: $(STAMP)
	$(BIN)/python bench/proof_real.py $(PROOF_FLAGS)

# Models and datasets from the real Hub (needs the internet; not part of `make test` or CI, since
# the Hub is not reachable from the test machines): fetch, convert, bundle, then install the asset
# bundle into a scratch prefix and load the model's config and tokenizer with this venv's python.
MODEL ?= Qwen/Qwen2.5-0.5B-Instruct
DATASET ?= openai/gsm8k
assets-real: $(STAMP)
	$(BIN)/verl-bundle assets --model $(MODEL) --dataset $(DATASET) --allow '$(DATASET):main/*' -o $(OUT)
	rm -rf $(OUT)/assets-real && mkdir -p $(OUT)/assets-real
	tar xf "$$(ls -t $(OUT)/verl-assets-*.tar | head -1)" -C $(OUT)/assets-real
	$(OUT)/assets-real/verl-assets-*/install-assets.sh --prefix $(OUT)/assets-real/prefix --python $(BIN)/python

# flash-attn 2.8.3 for cu130 compiled here with this host's nvcc 13.0 for one arch (sm90), then the
# bundle rehearsed with no network (readiness included). Needs the internet; hours on 2 cores; the
# compile log is under the cache's compiled/logs/. Not part of `make test`.
CU130_TAR = $(OUT)/verl-bundle-cu130-cp310-manylinux_2_31_x86_64.tar
compile-real: $(STAMP)
	$(BIN)/verl-bundle build --profile cu130 --python 3.10 --compile always --cuda-archs 9.0 --output $(OUT)
	$(BIN)/verl-bundle rehearse $(CU130_TAR) --python 3.10

# The bundled interpreter (build --with-python) from the real python-build-standalone release
# host (GitHub; needs the internet, which the test machines do not have): fetched with its
# published hash, checked as a build checks it, unpacked and run. Not part of `make test`.
python-real: $(STAMP)
	$(BIN)/python bench/python_real.py --python $(PY)

# Benchmarks against the strongest and the familiar baselines (parallel curl, tar, uv, openssl;
# pip, cat, sha256sum) on a synthetic 1 GB stack served on 127.0.0.1: 10-30 minutes,
# no network; wheels are kept in /tmp/verl-bundle-bench. Not part of `make test`.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

# N simulated nodes (1, 2, 4) installing at once from one served copy vs one node's own copy.
bench-nodes: $(STAMP)
	$(BIN)/python bench/nodes.py $(BENCH_ARGS)

# N nodes as network namespaces behind tc-shaped veth links (needs root: ip netns, tc).
bench-netnodes: $(STAMP)
	$(BIN)/python bench/netnodes.py $(BENCH_ARGS)

# Issue 25's proof on a real GPU (bench/gpu_proof.py, under 5 minutes): the server doctor against
# the real driver, placement, real CUDA failures fed to explain, readiness's GPU smoke test and a
# kernel compiled here run there. Runs with the machine's python3 (with torch) from a copy of the
# repository plus bench/gpu_proof_carry (a few KB, made here by `make gpu-proof-prepare` with
# nvcc); writes gpu-proof/ (or $$OUT). No GPU: one line, a "no GPU" report, exit 0.
GPU_PYTHON ?= python3
gpu-proof:
	@$(GPU_PYTHON) bench/gpu_proof.py --python $(GPU_PYTHON)

gpu-proof-prepare:
	@$(GPU_PYTHON) bench/gpu_proof.py --prepare

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
