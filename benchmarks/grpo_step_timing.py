"""Seconds per GRPO step for one implementation, printed as JSON (run by bench_trl in a
subprocess per implementation, so neither inherits the other's process group or threads).

    python -m benchmarks.grpo_step_timing --impl ours|trl --steps 10 --warmup 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch

from grpoflow.config import ModelConfig
from grpoflow.data.synthetic import generate
from grpoflow.config import SyntheticConfig
from grpoflow.modeling import build_tiny_model, count_parameters, save_pretrained, train_tokenizer
from grpoflow.prompting import format_prompt
from verifiers.math import score

PROMPTS, G, COMPLETION, BETA = 8, 8, 16, 0.04


def _setup(path: str):
    problems = list(generate(0, SyntheticConfig(num_examples=256)))
    rows = [{"id": str(p.index), "prompt": p.question, "reference_answer": str(p.final)} for p in problems]
    tok = train_tokenizer([format_prompt(p.question) + p.answer for p in problems], 384)
    model = build_tiny_model(ModelConfig(), tok, seed=0)
    save_pretrained(model, tok, path)
    return rows, count_parameters(model)


def _ours(path: str, rows, steps: int) -> list[float]:
    from grpoflow.config import GRPOConfig
    from grpoflow.engine import build_engine
    from grpoflow.grpo import GRPOTrainer
    from grpoflow.modeling import load_pretrained
    from grpoflow.rewards import RewardComponent, WeightedReward
    from grpoflow.rollout.hf import HFRolloutEngine

    policy, tok = load_pretrained(path)
    ref, _ = load_pretrained(path)
    cfg = GRPOConfig(steps=steps, prompts_per_step=PROMPTS, num_generations=G, beta=BETA, eval_every=10**6,
                     sampling={"max_completion_length": COMPLETION}, engine={"lr": 1e-5, "micro_batch_size": PROMPTS * G})
    engine = build_engine(policy, cfg.engine, PROMPTS * G)
    reward = WeightedReward([RewardComponent("math", lambda c, r: [score(x, y) for x, y in zip(c, r)], 1.0)])
    trainer = GRPOTrainer(cfg, engine, ref.eval().requires_grad_(False), HFRolloutEngine(engine.module, tok, batch_size=PROMPTS * G),
                          tok, reward, rows, seed=0)
    times: list[float] = []
    trainer.train(on_step=lambda s, m: times.append(m["step_seconds"]))
    return times


def _trl(path: str, rows, steps: int) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.start)

    tok = AutoTokenizer.from_pretrained(path)
    data = Dataset.from_list([{"prompt": format_prompt(r["prompt"]), "reference_answer": r["reference_answer"]} for r in rows])

    def math_reward(prompts, completions, reference_answer, **_):
        return [score(c, r) for c, r in zip(completions, reference_answer)]

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=PROMPTS * G, num_generations=G,
        max_completion_length=COMPLETION, beta=BETA, max_steps=steps, use_cpu=True, report_to=[], logging_steps=10**6,
        save_strategy="no", learning_rate=1e-5, temperature=1.0, disable_tqdm=True, bf16=False,
    )
    timer = Timer()
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=math_reward, args=args,
                          train_dataset=data, processing_class=tok, callbacks=[timer])
    trainer.train()
    return timer.times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["ours", "trl"], required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    path = tempfile.mkdtemp()
    rows, n_params = _setup(path)
    times = (_ours if args.impl == "ours" else _trl)(path, rows, args.steps + args.warmup)[args.warmup :]
    print("RESULT " + json.dumps({"impl": args.impl, "parameters": n_params, "steps": len(times),
                                  "seconds_per_step": sum(times) / len(times), "threads": torch.get_num_threads(),
                                  "pid": os.getpid()}))


if __name__ == "__main__":
    main()
