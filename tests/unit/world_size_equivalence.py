"""One RL step of every configuration the equivalence test covers, on 1 process or on each rank of a
group: the rollouts are recorded ones, replayed by :class:`ReplayRollouts` in place of sampling, so
that every world size trains on the same completions; prompt sharding and scoring stay the run's.

:func:`worker` is the target of each spawned rank (gloo, on the CPU); :func:`run_configs` is what a
rank, or the single process, runs: each configuration on a freshly built run, one step, and what
the step left: the updated trainable weights, the gradients each optimizer step applied (after
DeepSpeed averaged them over the ranks), the step's metrics and the prompts each rank asked for.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from grpoflow.config import validate_params
from grpoflow.rollout import Rollouts, Sampling, completion_mask
from tests.distributed import become_rank

G = 4
PROMPTS = 8
MAX_LEN = 12
# Correct answers in each group, by the prompt's place in the step's order (rank r of 2 gets places
# r, r + 2, ...): 10 of 16 on rank 0, 4 of 16 on rank 1, so batch-level statistics differ by rank.
CORRECT_BY_PLACE = (3, 0, 4, 1, 2, 0, 1, 3)

_BASE: dict[str, Any] = {
    "rl": {
        "steps": 1,
        "prompts_per_step": PROMPTS,
        "num_generations": G,
        "sampling": {"max_completion_length": MAX_LEN},
        "engine": {"micro_batch_size": PROMPTS * G},
        "preflight": {"prompts": 0},
    },
    "ppo": {"critic_engine": {"micro_batch_size": PROMPTS * G}},
}


def _with(rl: dict | None = None, grpo: dict | None = None, **rest: Any) -> dict[str, Any]:
    raw = {"rl": {**_BASE["rl"], **(rl or {})}, "ppo": _BASE["ppo"], **rest}
    if grpo:
        raw["grpo"] = grpo
    return raw


MICRO_8 = {"engine": {"micro_batch_size": 8}}  # 4 micro-batches on 1 process, 2 on each of 2 ranks
# name -> (algorithm, params): every rl.aggregation, every advantage estimator (and the batch scale of
# grpo's), the KL in the reward, two iterations, micro-batches with truncated completions masked, an
# entropy bonus with clip-higher, PPO (and a step of its critic's warm-up, the policy frozen).
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", _with()),
    "agg_bnpo": ("grpo", _with(rl={"aggregation": "bnpo"})),
    "agg_dr_grpo": ("grpo", _with(rl={"aggregation": "dr_grpo"})),
    "adv_dr_grpo": ("grpo", _with(grpo={"advantage_estimator": "dr_grpo"})),
    "adv_rloo": ("grpo", _with(grpo={"advantage_estimator": "rloo"})),
    "adv_reinforce_pp": ("grpo", _with(grpo={"advantage_estimator": "reinforce_pp"})),
    "adv_grpo_batch_scale": ("grpo", _with(grpo={"advantage_scale": "batch"})),
    "kl_in_reward_mu2": ("grpo", _with(rl={"num_iterations": 2}, grpo={"kl_placement": "reward"})),
    "bnpo_micro_masked": (
        "grpo",
        _with(rl={"aggregation": "bnpo", "mask_truncated_completions": True, "num_iterations": 2, **MICRO_8}),
    ),
    "entropy_clip_higher_mu2": ("grpo", _with(rl={"entropy_coef": 0.01, "clip_eps_high": 0.28, "num_iterations": 2})),
    "ppo": ("ppo", _with()),
    "ppo_critic_warmup": ("ppo", {**_with(rl={"steps": 2}), "ppo": {**_BASE["ppo"], "critic_warmup_steps": 1}}),
    "ppo_bnpo_micro": (
        "ppo",
        {**_with(rl={"aggregation": "bnpo", **MICRO_8}), "ppo": {"critic_engine": {"micro_batch_size": 8}}},
    ),
    # DeepSpeed's ZeRO reduces the gradients itself (partitioned over the ranks): the same step.
    "grpo_zero2": ("grpo", _with(rl={"engine": {"micro_batch_size": PROMPTS * G, "zero_stage": 2}})),
    "ppo_zero1_micro": (
        "ppo",
        {
            **_with(rl={"engine": {"micro_batch_size": 8, "zero_stage": 1}}),
            "ppo": {"critic_engine": {"micro_batch_size": 8, "zero_stage": 1}},
        },
    ),
}


def zero_stage(name: str) -> int:
    """The ZeRO stage of configuration ``name``'s policy engine."""
    return CONFIGS[name][1]["rl"].get("engine", {}).get("zero_stage", 0)


class ReplayRollouts:
    """A rollout engine that serves recorded completions: ``table[prompt]`` holds the token ids of
    its G completions (EOS included unless truncated). Tensors are laid out as the real engines lay
    them out: prompts left-padded, completions right-padded to ``max_new_tokens``."""

    def __init__(self, tokenizer, table: dict[str, list[list[int]]], stop_ids: list[int]):
        self.tok, self.table, self.stop_ids = tokenizer, table, stop_ids
        self.asked: list[str] = []

    def generate(self, prompts: list[str], n: int, sampling: Sampling, seed: int) -> Rollouts:
        """The recorded ``n`` completions of each prompt, group by group."""
        self.asked += prompts
        enc = self.tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        rows = torch.arange(len(prompts)).repeat_interleave(n)
        ids = torch.full((len(rows), sampling.max_new_tokens), self.tok.pad_token_id)
        for i, prompt in enumerate(prompts):
            for j, c in enumerate(self.table[prompt][:n]):
                ids[i * n + j, : len(c)] = torch.tensor(c)
        mask, truncated = completion_mask(ids, self.stop_ids)
        ids = torch.where(mask.bool(), ids, torch.full_like(ids, self.tok.pad_token_id))
        texts = self.tok.batch_decode(ids, skip_special_tokens=True)
        return Rollouts(enc["input_ids"][rows], enc["attention_mask"][rows], ids, mask, texts, truncated)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Nothing to sync: the completions are recorded."""

    def close(self) -> None:
        """Nothing to release."""


def recorded_table(rows: list[dict], order: list[int], prompt_of, tokenizer, eos: int) -> dict[str, list[list[int]]]:
    """G completions per row, of unequal lengths: right or wrong answers (``CORRECT_BY_PLACE`` by
    the row's place in ``order``), some without the answer's format, one in each group cut at the
    length cap without EOS (truncated)."""
    table = {}
    for place, r in enumerate(order):
        row, answer = rows[r], int(rows[r]["reference_answer"])
        completions = []
        for j in range(G):
            filler = " ".join(["Tom has apples."] * ((place + j) % 3))
            said = answer if j < CORRECT_BY_PLACE[place] else answer + 1
            text = f"{filler} #### {said}" if (place + j) % 4 else f"{filler} {said} apples"
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if j == (place % G):  # cut at the cap: no EOS
                completions.append((ids + ids + ids)[:MAX_LEN])
            else:
                completions.append(ids[: MAX_LEN - 1] + [eos])
        table[prompt_of(row["prompt"])] = completions
    return table


def _perturb(run, seed: int = 1) -> None:
    """Move the reference away from the policy (else the KL term has no gradient) and give the
    critic a non-zero head (else its trunk has none): the same noise on every rank."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in run.reference.parameters() if run.reference is not None else []:
            w.add_(0.05 * torch.randn(w.shape, generator=gen))
        if "critic" in run.engines:
            run.engines["critic"].module.head.weight.copy_(
                torch.randn(run.engines["critic"].module.head.weight.shape, generator=gen)
            )


def _capture_gradients(engine, into: list[dict[str, torch.Tensor]]) -> None:
    """Record the gradients each optimizer step of ``engine`` applies (averaged over the ranks by then)."""
    step = engine.step

    def recorded(*args, **kwargs):
        if engine.is_gradient_accumulation_boundary():
            into.append({n: p.grad.detach().clone() for n, p in engine.module.named_parameters() if p.grad is not None})
        return step(*args, **kwargs)

    engine.step = recorded


def one_step(name: str, workspace: Path) -> dict[str, Any]:
    """Configuration ``name``'s run, built afresh with replayed rollouts, after one step."""
    from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
    from grpoflow.algorithms.ppo.update import ALGORITHM as PPO
    from grpoflow.io import read_jsonl
    from grpoflow.rl.run import build_rl_run
    from grpoflow.rl.step_batch import prompt_indices

    algorithm, raw = CONFIGS[name]
    params = validate_params(raw)
    replay = ReplayRollouts(None, {}, [])
    run = build_rl_run(
        params,
        {"grpo": GRPO, "ppo": PPO}[algorithm],
        data_dir=workspace / "data",
        reference_dir=workspace / "ref",
        rollout=replay,
    )
    rows = read_jsonl(workspace / "data" / "train.jsonl")
    order = prompt_indices(len(rows), PROMPTS, 0, params.experiment.seed)
    stop = run.prompter.stop_ids
    replay.tok, replay.stop_ids = run.tokenizer, stop
    replay.table = recorded_table(rows, order, run.prompter.prompt, run.tokenizer, stop[0])
    _perturb(run)
    engines = {"policy": run.engine, **run.engines}
    grads: dict[str, list] = {k: [] for k in engines}
    for key, engine in engines.items():
        _capture_gradients(engine, grads[key])
    before = _trainable(engines)
    metrics = run.trainer.step(0)
    return {
        "before": before,
        "weights": _trainable(engines),
        "grads": grads,
        "metrics": metrics,
        "asked": replay.asked,
        "lr": {"policy": params.rl.engine.lr, "critic": params.ppo.critic_engine.lr},
    }


def _trainable(engines: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every trainable weight of the engines, as ``engine.parameter`` names."""
    return {
        f"{key}.{n}": p.detach().clone()
        for key, engine in engines.items()
        for n, p in engine.module.named_parameters()
        if p.requires_grad
    }


def run_configs(names: list[str], workspace: Path) -> dict[str, Any]:
    """:func:`one_step` of each configuration, in turn, and the seconds they took together."""
    t0 = time.perf_counter()
    out = {name: one_step(name, workspace) for name in names}
    return {"results": out, "seconds": time.perf_counter() - t0}


def worker(rank: int, world: int, port: int, workspace: str, out_dir: str, names: list[str]) -> None:
    """Rank ``rank`` of a ``world``-process gloo group on 127.0.0.1:``port``: every configuration, one
    step each; its results saved to ``out_dir/rank{rank}.pt``."""
    become_rank(rank, world, port)
    out = run_configs(names, Path(workspace))
    torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    from grpoflow.models.engine import leave_distributed

    leave_distributed()
