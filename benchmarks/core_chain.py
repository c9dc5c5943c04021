"""The tiny default's chain of stage cores, sft -> grpo -> ppo -> evaluate, a few steps each, through
the core library alone: no Prefect, MLflow or DVC (a bare GPU image has none of them), on the
process's device (:func:`grpoflow.models.device.compute_device`). Part of ``make gpu-check``; it
proves each stage's compute end to end on the device and prints one ``CHAIN {json}`` line: each
stage's seconds and the models' test pass@1.

    python -m benchmarks.core_chain [--examples 4000] [--rl-steps 4] [--eval-prompts 100] [--work DIR]

The data is the default set's synthetic arithmetic split by index (no leakage gate: the prepare
stage's own tests cover it); the SFT reference is the tiny model trained from scratch, as the sft
stage trains it; GRPO and PPO start from it with the set's settings and ``--rl-steps`` steps.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

CHAIN = "CHAIN "
PARAMS = Path(__file__).resolve().parents[1] / "params" / "default.yaml"


def _params(examples: int, rl_steps: int):
    from grpoflow.config import load_params

    overrides = {
        "data.synthetic.num_examples": examples,
        "rl.steps": rl_steps,
        "rl.eval_every": rl_steps,
        "rl.checkpoint_every": rl_steps,
        "ppo.critic_warmup_steps": min(1, rl_steps - 1),  # one step fits the critic alone, the rest train both
    }
    return load_params(PARAMS, overrides)


def _split(params) -> dict[str, list[dict]]:
    from grpoflow.data.synthetic import generate

    rows = [
        {"id": str(p.index), "prompt": p.question, "reference_answer": str(p.final), "solution": p.answer}
        for p in generate(params.experiment.seed, params.data.synthetic)
    ]
    n = len(rows)
    return {"train": rows[: n * 8 // 10], "val": rows[n * 8 // 10 : n * 9 // 10], "test": rows[n * 9 // 10 :]}


def _sft(params, train: list[dict], out: Path) -> float:
    """The sft stage's core: a tokenizer and the tiny model from scratch, trained on the solutions."""
    from grpoflow.models.modeling import save_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.trainers.sft import fine_tune, tiny_from_scratch

    start = time.perf_counter()
    model, tokenizer = tiny_from_scratch(params, train)
    prompter = prompter_for(model, tokenizer, params.prompt)
    save_pretrained(fine_tune(params, model, tokenizer, prompter, train), tokenizer, out)
    return time.perf_counter() - start


def _rl(params, algorithm, data: Path, reference: Path, out: Path) -> tuple[float, dict]:
    """An RL stage's core: the run built from the params, trained, exported; its last step's metrics."""
    from grpoflow.rl.run import build_rl_run

    start = time.perf_counter()
    run = build_rl_run(params, algorithm, data_dir=data, reference_dir=reference)
    steps: list[dict] = []
    run.trainer.train(on_step=lambda step, m: steps.append(m))
    run.export(out)
    run.close_rollouts()
    keep = ("loss", "reward_mean", "kl", "step_seconds", "peak_memory_mb")
    return time.perf_counter() - start, {k: steps[-1][k] for k in keep if k in steps[-1]}


def _evaluate(params, models: dict[str, Path], test: list[dict]) -> tuple[float, dict]:
    """The evaluate stage's core: each model's sampled pass@1 on the test prompts."""
    from grpoflow.evaluation.accuracy import sampled_metrics
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.rl.rewards import correctness_scorer
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.hf import HFRolloutEngine
    from verifiers.math import canonical_answer

    start, scores = time.perf_counter(), {}
    sampling = Sampling(1.0, 1.0, params.rl.sampling.max_completion_length)
    for name, path in models.items():
        model, tok = load_pretrained(path)
        prompter = prompter_for(model, tok, params.prompt)
        engine = HFRolloutEngine(model, tok, stop_ids=prompter.stop_ids)
        result = sampled_metrics(
            engine, test, correctness_scorer(params), canonical_answer, prompter, n=4, k=4, sampling=sampling
        )
        scores[name] = round(result.pass_at_1, 4)
    return time.perf_counter() - start, scores


def run_chain(work: Path, examples: int, rl_steps: int, eval_prompts: int) -> dict:
    """The chain in ``work``; its record (the ``CHAIN`` line's JSON)."""
    import torch

    from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
    from grpoflow.algorithms.ppo.update import ALGORITHM as PPO
    from grpoflow.io import write_jsonl
    from grpoflow.models.device import compute_device

    params = _params(examples, rl_steps)
    torch.manual_seed(params.experiment.seed)
    split = _split(params)
    data = work / "data"
    for name, rows in split.items():
        write_jsonl(data / f"{name}.jsonl", rows)
    seconds = {"sft": _sft(params, split["train"], work / "sft")}
    last = {}
    for algorithm in (GRPO, PPO):
        seconds[algorithm.name], last[algorithm.name] = _rl(
            params, algorithm, data, work / "sft", work / algorithm.name
        )
    models = {name: work / name for name in ("sft", "grpo", "ppo")}
    seconds["evaluate"], pass_at_1 = _evaluate(params, models, split["test"][:eval_prompts])
    return {
        "device": str(compute_device()),
        "examples": examples,
        "rl_steps": rl_steps,
        "stage_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "last_step": last,
        "test_pass_at_1": pass_at_1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core_chain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=4000, help="synthetic problems (the set's: 4000)")
    parser.add_argument("--rl-steps", type=int, default=4, help="steps of GRPO and of PPO each")
    parser.add_argument("--eval-prompts", type=int, default=100, help="test prompts each model answers (4 samples)")
    parser.add_argument("--work", type=Path, default=None, help="where the chain writes (default: a temporary folder)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="grpoflow-chain-"))
    record = run_chain(work, args.examples, args.rl_steps, args.eval_prompts)
    print(CHAIN + json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
