#!/usr/bin/env bash
# `make gpu-check`: the one prepared check for a GPU machine with a bare CUDA image and no network
# (Python 3.12, CUDA torch, transformers, accelerate, peft; see docs/operations.md). It installs the
# bundle's wheels (`make gpu-bundle`, carried as .gpu-bundle/) into a scratch site ahead of the
# image's packages and runs benchmarks/gpu_check.py, whose parts each have their own timeout. It
# writes metrics/gpu_check.json after each part (and, where $OUT is set, as a device call sets it, a
# copy there, so that a call cut off at its limit brings back the parts it finished).
#
#   bash benchmarks/gpu/check.sh          # on the GPU machine (what `make gpu-check` runs)
#   DRY=1 bash benchmarks/gpu/check.sh    # here, on CPU at tiny sizes: every part's code path, with
#                                         # the packages neither the image nor the bundle has blocked
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUNDLE=${BUNDLE:-$ROOT/.gpu-bundle}
SITE=${SITE:-/tmp/grpoflow-gpu-site}
DRY=${DRY:-0}
# DeepSpeed's ops, compiled from the bundle's DeepSpeed, in a folder of their own (whatever make or the
# caller set): in the checkout's .cache/torch_extensions the venv's DeepSpeed (other source paths) and
# the bundle's rebuilt each other's CPU op in turn, 35-45 s of both cores each time (2026-12-07: every
# dry run, then the next test). GPU_CHECK_EXTENSIONS_DIR=<dir> picks the folder.
export TORCH_EXTENSIONS_DIR=${GPU_CHECK_EXTENSIONS_DIR:-$ROOT/.cache/torch_extensions-gpu-check}
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false DO_NOT_TRACK=1 DS_BUILD_OPS=0 MLFLOW_DISABLE_TELEMETRY=true

if [ "$DRY" != 1 ] && [ ! -e /dev/nvidiactl ] && ! command -v nvidia-smi > /dev/null; then
  echo "gpu-check: no NVIDIA GPU on this machine (no /dev/nvidiactl, no nvidia-smi): nothing to check here;" \
    "run \`make gpu-check\` on a machine with a GPU (DRY=1 runs its parts here on CPU)" >&2
  exit 2
fi
if [ ! -d "$BUNDLE/whl" ]; then
  echo "gpu-check: no bundle at $BUNDLE: run \`make gpu-bundle\` on the CPU machine and carry .gpu-bundle" >&2
  exit 2
fi
rm -rf "$SITE" && mkdir -p "$SITE"
if [ "$DRY" = 1 ]; then
  # This machine's Python is not the image's 3.12: every wheel is installed for 3.12 into a scratch
  # target (proving that it installs); the pure-Python ones are then installed for this Python too
  # and put ahead of the venv's packages, as the image's site is; the rest come from the venv.
  PY=${PY:-$ROOT/.venv/bin/python}
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE/py312" --python-version 3.12 \
    --only-binary=:all: "$BUNDLE"/whl/*.whl || exit 1
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE/pure" "$BUNDLE"/whl/*-py3-none-any.whl \
    || exit 1
  export PYTHONPATH="$SITE/pure${PYTHONPATH:+:$PYTHONPATH}"
  echo "gpu-check (dry): $(ls "$BUNDLE/whl" | wc -l) wheels install for Python 3.12"
  export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
  exec "$PY" -m benchmarks.gpu_check --bundle "$BUNDLE" --dry "$@"
fi
PY=${PY:-python3}
if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$BUNDLE"/whl/*.whl; then
  echo "gpu-check: pip could not install the wheels: unpacking them instead (a wheel is a zip)"
  "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
    "$SITE" "$BUNDLE"/whl/*.whl || exit 1
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m benchmarks.gpu_check --bundle "$BUNDLE" "$@"  # it copies its JSON and logs to $OUT after each part
