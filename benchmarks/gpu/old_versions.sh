#!/usr/bin/env bash
# The device audit's tests on the lent GPU image's versions (torch 2.11, transformers 5.17: see
# ../shared/device-kit), here on CPU, in a throw-away venv: an API that moved between those and the
# versions the project pins (torch 2.13, transformers 5.19) is found before a device call is spent.
# Then the GPU check's whole dry run on that torch, with the bundle's wheels put ahead as check.sh
# puts them on the image (so transformers 5.19, DeepSpeed and TRL from the bundle, on torch 2.11):
# every part the lent machine runs, on the versions it runs them with.
# `bash benchmarks/gpu/old_versions.sh` (after `make gpu-bundle`; issue #49). PyPI's torch 2.11.0 is
# its CUDA build (4.6 GB installed); it runs on a CPU all the same. VENV=<dir> keeps the venv.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
if [ ! -d "${BUNDLE:-$ROOT/.gpu-bundle}/whl" ]; then
  echo "old_versions: no GPU bundle: run \`make gpu-bundle\` first (the dry check installs its wheels)" >&2
  exit 2
fi
VENV=${VENV:-$(mktemp -d)/venv}
PYTHON=${PYTHON:-python3.11}
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q torch==2.11.0
# The project's pins, but the image's torch and transformers.
"$VENV/bin/python" - > "$VENV/requirements.txt" <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for req in project["dependencies"] + project.get("optional-dependencies", {}).get("dev", []):
    if re.split(r"[=<>\[ ]", req, maxsplit=1)[0] not in ("torch", "transformers"):
        print(req)
print("transformers==5.17.0")
PY
"$VENV/bin/python" -m pip install -q -r "$VENV/requirements.txt"
"$VENV/bin/python" -c 'import torch, transformers; print("versions:", torch.__version__, transformers.__version__)'
TORCH_EXTENSIONS_DIR="$VENV/torch_extensions" OMP_NUM_THREADS=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit/test_device_audit.py tests/unit/test_static_decode.py tests/unit/test_decode.py tests/unit/test_rollout.py \
  tests/unit/test_learner.py tests/unit/test_shared_prefix.py
# The dry run's DeepSpeed op is the bundle's, built for this venv's torch: a folder of its own (check.sh).
GPU_CHECK_EXTENSIONS_DIR="$VENV/torch_extensions-gpu-check" PY="$VENV/bin/python" DRY=1 bash benchmarks/gpu/check.sh
