"""How good can the PPO baseline's critic get on the tiny default? (issue #24: explained variance.)

The default pipeline up to ``ppo`` by ``dvc repro`` in a scratch copy of this checkout; then, on
rollouts of the trained PPO policy from the train split only (``grpoflow.algorithms.ppo.critic_ceiling``):

- the online critic's explained variance, the median over the run's last 10 steps (the run's
  history, lambda as the set says);
- the prompt-only oracle (each token valued at its group's mean reward), in-sample and leave-one-out;
- a converged critic: the PPO critic's architecture and start (the SFT trunk, a zero head), fitted
  offline on ``train_prompts`` x G rollouts for ``epochs`` epochs at each of ``lrs``, scored on ``held_out_prompts``
  other prompts' rollouts, with Monte Carlo returns.

The claim is the ratio of the online critic to the converged one, both measured here.

``python -m benchmarks critic_ceiling``; ``python -m benchmarks.bench_critic_ceiling --work DIR``
reuses a project directory where ``dvc repro ppo`` (or ``make demo``) has run (``--params``: its set).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpoflow.config.loader import load_params
from grpoflow.io import read_jsonl
from grpoflow.provenance import copy_checkout

ROOT = Path(__file__).resolve().parents[1]


def _repro_ppo() -> Path:
    work = copy_checkout(ROOT, Path(tempfile.mkdtemp(prefix="grpoflow-bench-")) / "project")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "ppo"], cwd=work, env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(out.stdout[-3000:] + out.stderr[-3000:])
    return work


def _scored(work: Path, params, rows: list[dict], seed: int) -> list:
    """The PPO policy's rollouts of ``rows`` (G each, at the set's sampling), scored by the set's reward."""
    from grpoflow.algorithms.ppo.critic_ceiling import RewardedBatch
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.rl.rewards import build_reward
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.hf import HFRolloutEngine

    model, tok = load_pretrained(work / "models" / "ppo")
    prompter = prompter_for(model, tok, params.prompt)
    engine = HFRolloutEngine(model.eval(), tok, batch_size=256, stop_ids=prompter.stop_ids)
    s, g = params.rl.sampling, params.rl.num_generations
    sampling = Sampling(s.temperature, s.top_p, s.max_completion_length)
    reward = build_reward(params)
    batches = []
    for lo in range(0, len(rows), 32):
        chunk = rows[lo : lo + 32]
        ro = engine.generate([prompter.prompt(r["prompt"]) for r in chunk], g, sampling, seed + lo)
        total, _ = reward(ro.texts, [r for r in chunk for _ in range(g)])
        batches.append(RewardedBatch(ro, total, g))
    return batches


def _online_ev(work: Path) -> float:
    rows = list(csv.DictReader((work / "metrics" / "ppo_history.csv").open()))
    ev = [float(r["explained_variance"]) for r in rows if r.get("explained_variance")]
    return statistics.median(ev[-10:])


def run(
    work: Path | None = None,
    train_prompts: int = 1000,
    held_out_prompts: int = 150,
    epochs: int = 3,
    lrs: tuple[float, ...] = (3e-4, 1e-3),
    params_file: str = "params/default.yaml",
) -> dict:
    from grpoflow.algorithms.ppo.critic import initial_critic
    from grpoflow.algorithms.ppo.critic_ceiling import fit_critic, prompt_oracle_ev

    torch.manual_seed(0)
    start = time.perf_counter()
    work = work or _repro_ppo()
    params = load_params(work / params_file)
    rows = read_jsonl(work / "data" / "prepared" / "train.jsonl")  # never val or test
    random.Random(0).shuffle(rows)
    train = _scored(work, params, rows[:train_prompts], seed=0)
    held = _scored(work, params, rows[train_prompts : train_prompts + held_out_prompts], seed=10**6)
    fits = {}
    for lr in lrs:  # the best held-out score of a few learning rates: a generous ceiling
        critic = initial_critic(params, work / "models" / "sft")
        history = fit_critic(critic, train, held, epochs=epochs, lr=lr, on_epoch=lambda e, m: print(e, m, flush=True))
        fits[str(lr)] = [{k: round(v, 3) for k, v in h.items()} for h in history]
    best = max(h["ev"] for fit in fits.values() for h in fit)
    online = _online_ev(work)
    return {
        "rollouts": {
            "train": train_prompts * params.rl.num_generations,
            "held_out": held_out_prompts * params.rl.num_generations,
        },
        "held_out_mean_reward": round(float(torch.cat([b.rewards for b in held]).mean()), 3),
        "prompt_oracle_ev": {k: round(v, 3) for k, v in prompt_oracle_ev(held).items()},
        "converged_critic": {"epochs": epochs, "best_ev": best, "per_epoch_by_lr": fits},
        "online_critic_ev_median_last10": round(online, 3),
        "online_over_converged": round(online / best, 2) if best > 0 else None,
        "seconds": round(time.perf_counter() - start, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_critic_ceiling")
    parser.add_argument("--work", type=Path, help="a project directory where dvc repro ppo has run")
    parser.add_argument("--params", default="params/default.yaml", help="the set the run used, relative to --work")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.work, epochs=args.epochs, params_file=args.params), indent=2))
