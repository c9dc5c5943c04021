"""Seconds per GRPO step and peak RSS for one implementation, printed as JSON (run by bench_trl in
a subprocess per implementation, so neither inherits the other's threads or memory).

    python -m benchmarks.grpo_step_timing --impl ours|trl --model tiny|smollm [--lora] [--vllm] --steps 4 --warmup 1
        [--model-dir FOLDER] [--sizes PROMPTS,G,TOKENS]

``--model-dir``: the smollm setup from another folder of that shape (the GPU check's: SmolLM2-135M's
config and tokenizer with random weights, since the weights do not travel); ``--sizes``: the setup's
prompts per step, G and completion tokens. Both sides run on the process's device
(:func:`grpoflow.models.device.compute_device`); on CUDA the RESULT line adds the peak allocated memory.

Both sides get the same prompts (rendered with the same chat template for the real model), G,
completion length, beta, learning rate, gradient checkpointing and LoRA settings, HF rollouts
(``--vllm``: ours with vLLM rollouts, as users run the SmolLM2 set). Each side also reports the
completion tokens it generated per timed step, since a side that stops its samples earlier does
less work per step; ours also reports its mean seconds per step in each phase (rollout, reference
log-probs, update, ...), from the phase timer every training step keeps.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from statistics import mean

import torch

from benchmarks.models import smollm_folder, smollm_prompt, tiny_folder
from benchmarks.timing import RESULT
from grpoflow import metric_names as M
from grpoflow.config import SyntheticConfig, set_dotted, validate_params
from grpoflow.data.synthetic import generate
from grpoflow.io import write_jsonl
from grpoflow.models.device import compute_device
from grpoflow.models.modeling import count_parameters, load_pretrained
from grpoflow.models.prompting import prompter_for
from verifiers.math import score

SETUPS = {  # prompts per step, G, completion tokens
    "tiny": (8, 8, 16),
    "smollm": (4, 8, 64),
}
BETA, LR = 0.04, 1e-5
LORA = {"rank": 16, "alpha": 32}


def _rows() -> list[dict]:
    problems = list(generate(0, SyntheticConfig(num_examples=256)))
    return [
        {"id": str(p.index), "prompt": p.question, "reference_answer": str(p.final), "solution": p.answer}
        for p in problems
    ]


def _model(name: str, rows: list[dict], folder: Path | None = None) -> tuple[Path, dict]:
    """The model folder (``folder`` where given) and the params' model/prompt sections for ``name``."""
    if name == "tiny":
        return folder or tiny_folder([(r["prompt"], r["solution"]) for r in rows]), {
            "prompt": {"style": "plain"},
            "model": {},
        }
    folder = folder or smollm_folder()
    if folder is None:
        raise SystemExit("the SmolLM2 packages are not installed (make demo PARAMS=params/smollm2-135m.yaml)")
    return folder, {"prompt": smollm_prompt().model_dump(), "model": {"gradient_checkpointing": True}}


def _parameters(path: Path) -> int:
    """The model's parameter count, from its config alone (no weights are loaded)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return count_parameters(AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)))


def _params(
    name: str,
    sections: dict,
    lora: bool,
    steps: int,
    overrides: dict | None = None,
    vllm: bool = False,
    sizes: tuple[int, int, int] | None = None,
):
    prompts, g, length = sizes or SETUPS[name]
    model = {**sections["model"], **({"lora": LORA} if lora else {})}
    raw = {
        "prompt": sections["prompt"],
        "model": model,
        "grpo": {"beta": BETA},
        "rl": {
            "steps": steps,
            "prompts_per_step": prompts,
            "num_generations": g,
            "eval_every": 10**6,
            "checkpoint_every": 10**6,
            "preflight": {"prompts": 0},
            "sampling": {"max_completion_length": length},
            "rollout_engine": "vllm" if vllm else "hf",
            "engine": {"lr": LR, "micro_batch_size": prompts * g},
        },
    }
    for key, value in (overrides or {}).items():  # an option under test (bench_grpo_options); bf16 on both
        set_dotted(raw, key, value)
    return validate_params(raw)


Timings = list[tuple[float, float, dict]]  # (seconds, completion tokens generated, phase seconds) per step


def _ours(path: Path, rows: list[dict], params) -> Timings:
    from grpoflow.algorithms.grpo.update import ALGORITHM
    from grpoflow.rl.run import build_rl_run

    data = Path(tempfile.mkdtemp())
    write_jsonl(data / "train.jsonl", rows)
    write_jsonl(data / "val.jsonl", rows[:8])
    run = build_rl_run(params, ALGORITHM, data_dir=data, reference_dir=path)
    batch = params.rl.prompts_per_step * params.rl.num_generations
    times: Timings = []
    keep = (*M.TIMED_PHASES, M.UPDATE_TOKENS_PER_S)  # the update's tokens/s: its achieved FLOP/s (gpu_check)
    run.trainer.train(
        on_step=lambda s, m: times.append(
            (m["step_seconds"], m[M.COMPLETION_LENGTH_MEAN] * batch, {k: m[k] for k in keep if k in m})
        )
    )
    return times


def _trl_lora(lo):
    """Our LoRA settings as peft's config for TRL, or None without LoRA."""
    if not lo:
        return None
    import peft

    return peft.LoraConfig(
        r=lo.rank,
        lora_alpha=lo.alpha,
        lora_dropout=lo.dropout,
        target_modules=list(lo.target_modules),
        task_type="CAUSAL_LM",
    )


def _step_timer(batch: int):
    """A TRL callback that records each step's seconds and the completion tokens it generated
    (TRL logs their mean length per step)."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds, self.tokens, self.start = [], [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.tokens.append(logs["completions/mean_length"] * batch)

    return StepTimer()


def _trl(path: Path, rows: list[dict], params) -> Timings:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load_pretrained(path, device="cpu")  # only to render prompts: no device memory of TRL's side
    prompter = prompter_for(model, tok, params.prompt)
    # The prompts as text, rendered by our prompter: TRL then sees exactly the tokens we do.
    data = Dataset.from_list(
        [{"prompt": prompter.prompt(r["prompt"]), "reference_answer": r["reference_answer"]} for r in rows]
    )

    def math_reward(prompts, completions, reference_answer, **_):
        return [score(c, r) for c, r in zip(completions, reference_answer)]

    rl = params.rl
    peft_config = _trl_lora(params.model.lora)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=rl.prompts_per_step * rl.num_generations,
        num_generations=rl.num_generations,
        max_completion_length=rl.sampling.max_completion_length,
        beta=params.grpo.beta,
        max_steps=rl.steps,
        use_cpu=compute_device().type == "cpu",  # the process's device, as ours
        report_to=[],
        logging_steps=1,  # each step's completion length, for the tokens it generated
        save_strategy="no",
        learning_rate=LR,
        temperature=1.0,
        disable_tqdm=True,
        bf16=params.rl.engine.bf16 is True,  # on CPU: autocast to bfloat16 (accelerate's mixed precision)
        gradient_checkpointing=params.model.gradient_checkpointing,
    )
    timer = _step_timer(rl.prompts_per_step * rl.num_generations)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(path),
        reward_funcs=math_reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        callbacks=[timer],
        peft_config=peft_config,
    )
    trainer.train()
    return [(t, n, {}) for t, n in zip(timer.seconds, timer.tokens, strict=True)]  # TRL does not split its step


def _cuda_peak_mb() -> float | None:
    """Peak memory allocated on the GPU by this process (None on CPU)."""
    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None


def main() -> None:
    """Time ``--steps`` GRPO steps after ``--warmup`` and print one RESULT line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["ours", "trl"], required=True)
    parser.add_argument("--model", choices=list(SETUPS), default="tiny")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--vllm", action="store_true", help="ours with vLLM rollouts (TRL keeps HF generate)")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 on both sides (ours: rl.engine.bf16)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--overrides", default="{}", help="JSON {dotted key: value} for our run (an option's cost)")
    parser.add_argument("--model-dir", type=Path, default=None, help="the setup's model from this folder")
    parser.add_argument("--sizes", default=None, help="PROMPTS,G,TOKENS instead of the setup's")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = _rows()
    path, sections = _model(args.model, rows, args.model_dir)
    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else None
    if sizes is not None and len(sizes) != 3:
        parser.error("--sizes takes PROMPTS,G,TOKENS")
    if args.vllm and args.impl != "ours":
        parser.error("--vllm is for --impl ours (TRL's vLLM needs CUDA)")
    steps = args.steps + args.warmup
    overrides = {**({"rl.engine.bf16": True} if args.bf16 else {}), **json.loads(args.overrides)}
    params = _params(args.model, sections, args.lora, steps, overrides, args.vllm, sizes)  # type: ignore[arg-type]
    timed = (_ours if args.impl == "ours" else _trl)(path, rows, params)[args.warmup :]
    times, tokens = [t for t, _, _ in timed], [n for _, n, _ in timed]
    phases = {
        k.removeprefix(M.PHASE_PREFIX): mean(p.get(k, 0.0) for _, _, p in timed)
        for k in timed[0][2]
        if k != M.UPDATE_TOKENS_PER_S
    }
    update_rate = [p[M.UPDATE_TOKENS_PER_S] for _, _, p in timed if M.UPDATE_TOKENS_PER_S in p]
    print(
        RESULT
        + json.dumps(
            {
                "impl": args.impl,
                "model": args.model,
                "lora": args.lora,
                "rollout": "vllm" if args.vllm else "hf",
                "bf16": params.rl.engine.bf16 is True,
                "parameters": _parameters(path),
                "steps": len(times),
                "seconds_per_step": sum(times) / len(times),
                "completion_tokens_per_step": sum(tokens) / len(tokens),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "phase_seconds_per_step": phases,
                "sizes": dict(zip(("prompts", "g", "completion_tokens"), sizes or SETUPS[args.model])),
                "device": str(compute_device()),
                "seconds_each": times,
                "completion_tokens_each": tokens,
                "update_tokens_per_s": mean(update_rate) if update_rate else None,
                "cuda_peak_allocated_mb": torch.cuda.max_memory_allocated() / 2**20
                if torch.cuda.is_available()
                else None,
            }
        )
    )


if __name__ == "__main__":
    main()
