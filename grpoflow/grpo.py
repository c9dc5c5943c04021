"""GRPO's update (DeepSeekMath, Shao et al. 2024, Algorithm 1), on a DeepSpeed engine.

Group-relative advantages replace the critic; reference log-probs from the frozen SFT model are
computed once per batch; mu updates of the clipped objective follow, with old log-probs taken
once before the first (with mu = 1 they equal the current ones, so no extra forward is needed).
Rollouts, rewards, metrics and the loop are shared with PPO (:mod:`grpoflow.rl`).
"""

from __future__ import annotations

import torch

from grpoflow.advantages import group_advantages
from grpoflow.logprobs import completion_logprobs
from grpoflow.losses import grpo_loss
from grpoflow.rl import Batch, PolicyTrainer, masked_mean, micro_slices


class GRPOTrainer(PolicyTrainer):
    def update(self, step: int, b: Batch) -> dict[str, float]:
        cfg, eng = self.cfg, self.engine
        adv = group_advantages(b.rewards, b.group_size, scale=cfg.advantage_scale, ddof=cfg.advantage_ddof, eps=cfg.advantage_eps)
        ref_logp = self._frozen_logprobs(self.ref, b.ids, b.attn, b.start) if self.state.beta > 0 else None
        old_logp = self._frozen_logprobs(eng.module, b.ids, b.attn, b.start) if cfg.num_iterations > 1 else None
        micro, engines = eng.train_micro_batch_size_per_gpu(), (eng,)
        sums = {"loss": 0.0, "kl": 0.0, "clip_ratio": 0.0, "entropy": 0.0}
        n = 0
        eng.train()
        for _ in range(cfg.num_iterations):
            for sl in micro_slices(len(b.ids), micro, *engines):
                logp, ent = completion_logprobs(eng, b.ids[sl], b.attn[sl], b.start, with_entropy=True)
                old = old_logp[sl] if old_logp is not None else logp.detach()
                loss, m = grpo_loss(
                    logp, old, ref_logp[sl] if ref_logp is not None else None, adv[sl], b.mask[sl],
                    clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high, beta=self.state.beta,
                    ratio_level=cfg.ratio_level, aggregation=cfg.aggregation,
                )
                if not torch.isfinite(loss):
                    self.health.observe(step, {"loss": float(loss)})  # raises TrainingDiverged
                eng.backward(loss)
                eng.step()
                n += 1
                sums["loss"] += loss.item()
                sums["kl"] += m.get("kl", 0.0)
                sums["clip_ratio"] += m["clip_ratio"]
                sums["entropy"] += masked_mean(ent, b.mask[sl])
        return {k: v / n for k, v in sums.items()}
