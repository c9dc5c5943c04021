"""The GRPO math next to the model it trains: loss + advantages (forward and backward) as a
fraction of one policy forward + backward on the same batch of the tiny default model.

A ratio well below 1 means the objective is never the bottleneck of an update step.
"""

from __future__ import annotations

import torch

from benchmarks.timing import best_of
from grpoflow.config import ModelConfig
from grpoflow.models.modeling import build_tiny_model, train_tokenizer
from grpoflow.rl.advantages import group_advantages
from grpoflow.rl.losses import clipped_surrogate_loss


def run(prompts: int = 8, group: int = 8, length: int = 64) -> dict:
    torch.manual_seed(0)
    cfg = ModelConfig()
    tok = train_tokenizer([f"{i}+{i}={2 * i}" for i in range(500)], cfg.vocab_size)
    model = build_tiny_model(cfg, tok, seed=0)
    n = prompts * group
    ids = torch.randint(0, len(tok), (n, length))
    mask = torch.ones(n, length - 1)
    rewards = torch.randint(0, 2, (n,)).float()

    def policy_step():
        model.zero_grad()
        logits = model(ids).logits[:, :-1]
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        logp.sum().backward()

    logp_leaf = torch.randn(n, length - 1, requires_grad=True)
    old, ref = logp_leaf.detach() + 0.01, logp_leaf.detach() - 0.01

    def objective():
        adv = group_advantages(rewards, group)
        loss, _ = clipped_surrogate_loss(logp_leaf, old, adv, mask, ref_logp=ref)
        loss.backward()

    t_model, t_loss = best_of(policy_step), best_of(objective, repeats=20)
    return {
        "batch": {"sequences": n, "tokens": n * length},
        "policy_fwd_bwd_s": round(t_model, 5),
        "objective_fwd_bwd_s": round(t_loss, 6),
        "objective_over_policy": round(t_loss / t_model, 4),
    }
