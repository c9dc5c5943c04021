#!/bin/bash
# The tiny set's few training steps and evaluation under each instruction-set choice the libraries
# can be told (torch's ATen, MKL, oneDNN), each in a fresh process: a hash of the SFT and GRPO weights
# and the scores per choice, one JSON line each in $OUT/results.txt (#51; about 2 min a choice here).
# `bash benchmarks/kernel_hashes.sh`: the pinned run and runs that mimic narrower CPUs must agree; the
# runs that unpin ATen or MKL must not (the test of the pin can fail).
set -u
K=${OUT:-$(mktemp -d)}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$ROOT/.venv/bin/python
rm -rf $K/repo && git clone -q "$ROOT" $K/repo && cd $K/repo
$PY - <<'PY'
import yaml
raw = yaml.safe_load(open("params/default.yaml"))
raw["data"]["synthetic"]["num_examples"] = 400
raw["sft"].update({"epochs": 0.5, "eval_examples": 16})
raw["rl"].update({"steps": 3, "eval_every": 3})
raw["rl"]["preflight"] = {"prompts": 0}
raw.setdefault("ppo", {})["critic_warmup_steps"] = 0
raw["evaluate"].update({"max_examples": 48, "n_samples": 2, "k": 2})
open("params/kern.yaml", "w").write(yaml.safe_dump(raw, sort_keys=False))
PY
combo() {
  local tag="$1"; shift
  local out=$K/out-$tag; rm -rf $out; mkdir -p $out
  local start=$(date +%s)
  (
    export MLFLOW_TRACKING_URI=sqlite:///$out/mlflow.db OMP_NUM_THREADS=1 "$@"
    set -e
    $PY -m tasks.prepare --params params/kern.yaml --out $out/data --metrics $out/prepare.json
    $PY -m tasks.base_model --params params/kern.yaml --out $out/base --metrics $out/base.json
    $PY -m tasks.sft --params params/kern.yaml --data $out/data --base $out/base --out $out/sft --metrics $out/sft.json
    $PY -m tasks.grpo --params params/kern.yaml --data $out/data --reference $out/sft --out $out/grpo --checkpoints $out/ckpt --metrics $out/grpo.json --history $out/grpo.csv
    $PY -m tasks.evaluate --params params/kern.yaml --data $out/data --models sft=$out/sft grpo=$out/grpo --out $out/eval --metrics $out/evaluate.json
  ) > $out/log 2>&1
  local rc=$?
  $PY - "$tag" "$out" "$rc" "$(( $(date +%s) - start ))" <<'PY' >> $K/results.txt
import hashlib, json, sys, pathlib
tag, out, rc, secs = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4]
def h(d):
    files = sorted((out / d).glob("*.safetensors"))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12] if files else "-"
try:
    ev = json.loads((out / "evaluate.json").read_text())["models"]
    scores = {m: (round(v["test"]["pass@1"], 6), v["test"].get("greedy")) for m, v in ev.items()}
    cap = json.loads((out / "sft.json").read_text()).get("numerics", {})
except Exception as exc:
    scores, cap = f"missing ({exc})", {}
print(json.dumps({"tag": tag, "rc": rc, "s": secs, "sft": h("sft"), "grpo": h("grpo"), "scores": scores}))
PY
}
: > $K/results.txt
combo pinned
combo pinned-2threads OMP_NUM_THREADS=2
combo pinned-mkl-avx2-only MKL_ENABLE_INSTRUCTIONS=AVX2
combo pinned-onednn-sse41 ONEDNN_MAX_CPU_ISA=SSE41
combo mkl-auto MKL_CBWR=AUTO
combo mkl-avx2-strict MKL_CBWR=AVX2,STRICT
combo aten-default ATEN_CPU_CAPABILITY=default
combo native ATEN_CPU_CAPABILITY=avx512 MKL_CBWR=AUTO ONEDNN_MAX_CPU_ISA=ALL
cat $K/results.txt
