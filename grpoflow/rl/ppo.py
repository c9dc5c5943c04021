"""The PPO baseline (Schulman et al. 2017; RLHF form of Ouyang et al. 2022): a critic the size of
the policy, token-level rewards (the verifier's reward on the last token, a per-token KL penalty
toward the reference), GAE advantages, the clipped policy loss and a clipped value loss, the
critic on its own DeepSpeed engine and optimizer. Everything else is shared with GRPO.

The critic starts from the SFT policy's trunk with a zero value head, or from the reward model
(``ppo.critic_init``). Its first ``ppo.critic_warmup_steps`` steps fit it alone on the frozen
policy's rollouts (VAPO's value pretraining, Yue et al. 2025), and GAE may give its targets a
lambda of their own (``ppo.lam_critic``; 1.0 in VAPO and Open-Reasoner-Zero, Hu et al. 2025).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModel

from grpoflow import metric_names as M
from grpoflow.config import RM_REWARD, LoraConfig, Params, PPOConfig
from grpoflow.models.attention import use_own_attention
from grpoflow.models.engine import build_engine, optimizer_step
from grpoflow.models.lora import LoraTargetError, add_adapters, linear_names
from grpoflow.rl import micro_batches
from grpoflow.rl import shared_prefix as sp
from grpoflow.rl.advantages import CRITIC_ESTIMATOR_FNS, masked_whiten
from grpoflow.rl.algorithm import Algorithm, BuiltTrainer, register
from grpoflow.rl.batch import Batch, MicroBatch
from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rl.losses import clipped_surrogate_loss, kl_k3
from grpoflow.rl.trainer import PolicyTrainer, TrainerInputs


class ValueModel(torch.nn.Module):
    """A transformer trunk (by default the SFT model's) with a scalar head on every position."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.trunk = trunk
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained(cls, path: str) -> ValueModel:
        """A critic whose trunk is the pretrained model at ``path`` and whose head starts at zero."""
        trunk = use_own_attention(AutoModel.from_pretrained(path))
        return cls(trunk, trunk.config.hidden_size)

    @classmethod
    def from_reward_model(cls, path: str) -> ValueModel:
        """A critic that starts as the reward model at ``path`` (a sequence classifier with one score,
        :mod:`grpoflow.models.reward_model`): its backbone as the trunk, its score head as the value
        head, which then reads a score at every position instead of at the last one only."""
        from grpoflow.models.reward_model import load_reward_model

        rm, _ = load_reward_model(path)
        critic = cls(getattr(rm, rm.base_model_prefix), rm.config.hidden_size)
        with torch.no_grad():
            critic.head.weight.copy_(rm.score.weight)
            if getattr(rm.score, "bias", None) is not None:
                critic.head.bias.copy_(rm.score.bias)
        return critic

    def forward(self, input_ids, attention_mask, position_ids=None, **kwargs) -> torch.Tensor:
        """``V(s_t)`` at every position: ``(N, T)`` (``kwargs``: for the trunk's attention)."""
        hidden = self.trunk(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        ).last_hidden_state
        return self.head(hidden).squeeze(-1)


def completion_values(critic, ids, attn, start: int, shared_prefix: bool = True) -> torch.Tensor:
    """``V(s_t)`` for each completion token t: the value at the position that predicts it.
    ``shared_prefix``: each group's prompt encoded once (:mod:`grpoflow.rl.shared_prefix`), same values."""
    packed = sp.packed_for(critic, ids, attn, start) if shared_prefix else None
    if packed is not None:
        values = critic(
            packed.input_ids, sp.mask_for(critic, packed.mask), packed.position_ids, **sp.slot_kwargs(critic, packed)
        )
        return sp.gather_rows(values[:, packed.keep_from :], packed).float()
    position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    return critic(ids, attn, position_ids)[:, start - 1 : -1].float()


def token_rewards(rewards: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor | None, kl_coef: float) -> torch.Tensor:
    """The sequence reward on each completion's last counted token, minus ``kl_coef * kl`` per token."""
    r = torch.zeros_like(mask)
    last = (mask.cumsum(1) * mask).argmax(1)
    has_tokens = mask.sum(1) > 0
    r[has_tokens, last[has_tokens]] = rewards[has_tokens].to(r.dtype)
    if kl is not None and kl_coef:
        r = r - kl_coef * kl * mask
    return r


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the counted tokens (0 when returns are constant)."""
    m = mask.bool()
    var = returns[m].var(correction=0)
    return float(1 - (returns[m] - values[m]).var(correction=0) / var) if var > 0 else 0.0


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float
) -> torch.Tensor:
    """PPO's clipped value loss (the PPO2 form): ``0.5 * max((V - R)^2, (V_clip - R)^2)`` averaged over
    the counted tokens, with ``V_clip = V_old + clamp(V - V_old, -clip, clip)``: a token whose value has
    moved more than ``clip`` from its old one gives no gradient, unless the move took it further from
    the return than the clipped value (the larger, pessimistic loss is the one that counts)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    vf = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return (vf * mask).sum() / mask.sum().clamp(min=1)


def _moments(x: torch.Tensor, mask: torch.Tensor, total: Callable[[torch.Tensor], torch.Tensor]) -> tuple[float, float]:
    """Mean and population variance of ``x`` over the tokens ``mask`` keeps; ``total`` sums each part
    over the processes that hold the rest of the batch."""
    m = mask.to(x.dtype)
    n = total(m.sum()).clamp(min=1)
    mean = total((x * m).sum()) / n
    return float(mean), float(total((((x - mean) * m) ** 2).sum()) / n)


def critic_metrics(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    total: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """How well the values (before the step's update) explain the returns, and the returns' scale;
    with ``total`` (sums over the processes), over every process's tokens."""
    if total is not None:  # a variance is no mean of the ranks' variances
        mean, var = _moments(returns, mask, total)
        unexplained = _moments(returns - values, mask, total)[1]
        return {
            M.EXPLAINED_VARIANCE: 1 - unexplained / var if var > 0 else 0.0,
            M.RETURNS_MEAN: mean,
            M.RETURNS_STD: math.sqrt(var),
        }
    counted = returns[mask.bool()]
    return {
        M.EXPLAINED_VARIANCE: explained_variance(values, returns, mask),
        M.RETURNS_MEAN: float(counted.mean()) if counted.numel() else 0.0,
        M.RETURNS_STD: float(counted.std(correction=0)) if counted.numel() else 0.0,
    }


class PPOTrainer(PolicyTrainer):
    """The PPO baseline: the shared loop with a critic, GAE and the KL penalty in the reward."""

    def __init__(self, inputs: TrainerInputs, *, ppo: PPOConfig, critic_engine):
        super().__init__(inputs, kl_coef=ppo.kl_coef)
        self.ppo, self.critic = ppo, critic_engine

    def updates_policy(self, step: int) -> bool:
        """Every step after the critic's warm-up (``ppo.critic_warmup_steps``, counted in ``rl.steps``)."""
        return step >= self.ppo.critic_warmup_steps

    @torch.no_grad()
    def _old_values(self, b: Batch) -> torch.Tensor:
        shared = self.cfg.engine.shared_prefix
        return torch.cat(
            [completion_values(self.critic, b.ids[sl], b.attn[sl], b.start, shared) for sl in self._plan(b)]
        )

    @torch.no_grad()
    def _frozen_with_entropy(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's log-probs and entropies without gradients (a warm-up step's only policy pass)."""
        with self.timer.phase(M.PHASE_OLD_LOGPROBS):
            parts = [
                completion_logprobs(
                    self.engine.module,
                    b.ids[sl],
                    b.attn[sl],
                    b.start,
                    with_entropy=True,
                    shared_prefix=self.cfg.engine.shared_prefix,
                )
                for sl in self._plan(b)
            ]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts if p[1] is not None])

    def _targets(
        self, b: Batch, old_logp: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(kl or None, old values, advantages, returns)`` of the batch: the KL to the reference,
        the critic's values before the update, GAE's advantages (whitened as ``ppo.whiten_advantages``
        says) under ``ppo.lam_actor`` and its returns, the critic's targets, under ``ppo.lam_critic``."""
        ref_logp = self._frozen_logprobs(self.ref, b) if self.ref is not None else None
        kl = kl_k3(old_logp, ref_logp) if ref_logp is not None else None
        old_values = self._old_values(b) * b.mask
        rewards = token_rewards(b.rewards, b.mask, kl, self.state.beta)
        adv, returns = CRITIC_ESTIMATOR_FNS["gae"](rewards, old_values, b.mask, self.ppo)
        if self.ppo.whiten_advantages:
            adv = masked_whiten(adv, b.mask, total=self.ranks.summed)  # the step's statistics, on every process
        return kl, old_values, adv, returns

    def _value_step(self, b: Batch, sl: slice, scale: float, old_values: torch.Tensor, returns: torch.Tensor) -> float:
        """The clipped value loss on micro-batch ``sl`` (``ppo.cliprange_value`` around the old values),
        a mean over its tokens, its backward (times ``scale``, its share of the step's tokens) and the
        critic's optimizer step; the loss."""
        critic = self.critic
        values = completion_values(critic, b.ids[sl], b.attn[sl], b.start, self.cfg.engine.shared_prefix)
        value_loss = clipped_value_loss(values, old_values[sl], returns[sl], b.mask[sl], self.ppo.cliprange_value)
        critic.backward(value_loss * scale)
        optimizer_step(critic)
        return value_loss.item()

    def update(self, step: int, b: Batch) -> dict[str, float]:
        """mu clipped updates of the policy and the critic on one batch (of the critic alone in its warm-up)."""
        cfg, eng, critic = self.cfg, self.engine, self.critic
        critic.set_train_micro_batch_size(eng.train_micro_batch_size_per_gpu())
        critic.set_train_batch_size(len(b.ids) * self.world)
        if not self.updates_policy(step):
            return self._warm_up(b)
        old_logp = self._frozen_logprobs(eng.module, b)
        kl, old_values, adv, returns = self._targets(b, old_logp)

        def policy_loss(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
            loss, m = clipped_surrogate_loss(
                mb.logp,
                mb.old,
                adv[mb.sl],
                mb.mask,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                aggregation=cfg.aggregation,
                entropy=mb.entropy,
                entropy_coef=cfg.entropy_coef,
                token_weights=mb.weights,
            )
            return loss, {M.CLIP_RATIO: m[M.CLIP_RATIO]}

        def critic_step(mb: MicroBatch) -> dict[str, float]:
            """The critic's step on the micro-batch, after the policy's step on it."""
            return {M.VALUE_LOSS: self._value_step(b, mb.sl, mb.token_scale, old_values, returns)}

        out = self._micro_batch_loop(
            step, b, old_logp, policy_loss, tallies=(M.VALUE_LOSS,), critic=critic, critic_step=critic_step
        )
        self._critic_passes(b, old_values, returns, (self.ppo.critic_epochs - 1) * cfg.num_iterations)
        out[M.KL] = self.ranks.masked_mean(kl, b.mask) if kl is not None else 0.0  # adaptive KL control reads it
        return out | self._critic_metrics(old_values, returns, b.mask) | {M.CRITIC_WARMUP: 0.0}

    def _critic_passes(self, b: Batch, old_values: torch.Tensor, returns: torch.Tensor, passes: int) -> float:
        """``passes`` passes of the critic's updates over the batch on its own (the policy untouched),
        micro-batch for micro-batch as the shared loop takes them; the mean value loss of a pass."""
        critic = self.critic
        critic.train()
        slices = self._plan(b)
        scales = self.ranks.token_scales(b.mask, slices, critic.gradient_accumulation_steps())
        value_loss = 0.0
        for _ in range(passes):
            for sl, scale in zip(micro_batches.accumulation(slices, critic), scales):
                share = scale / critic.gradient_accumulation_steps()  # as the shared loop weighs micro-batches
                value_loss += self._value_step(b, sl, scale, old_values, returns) * share
        return value_loss / max(passes, 1)

    def _warm_up(self, b: Batch) -> dict[str, float]:
        """A warm-up step: ``num_iterations`` x ``ppo.critic_epochs`` passes of the critic's updates
        on the frozen policy's rollouts, with the targets a later step would give it; the policy's
        weights, optimizer and learning-rate schedule are not touched."""
        old_logp, entropy = self._frozen_with_entropy(b)
        kl, old_values, _, returns = self._targets(b, old_logp)
        value_loss = self._critic_passes(b, old_values, returns, self.cfg.num_iterations * self.ppo.critic_epochs)
        return {
            M.VALUE_LOSS: value_loss,
            M.KL: self.ranks.masked_mean(kl, b.mask) if kl is not None else 0.0,
            M.ENTROPY: self.ranks.masked_mean(entropy, b.mask),
            M.CRITIC_WARMUP: 1.0,
        } | self._critic_metrics(old_values, returns, b.mask)

    def _critic_metrics(self, values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        """:func:`critic_metrics` over the step's tokens on every process."""
        return critic_metrics(values, returns, mask, self.ranks.summed if self.world > 1 else None)


def initial_critic(params: Params, reference_dir: Path) -> ValueModel:
    """The critic as ``ppo.critic_init`` says: the SFT policy's trunk with a zero head (``policy``),
    or the reward model that ``rewards`` names (``reward_model``; the schema's rules make sure there
    is one), which must read the policy's tokens. Where the policy trains LoRA adapters
    (``model.lora``), so does the critic's trunk, with the same rank and targets, and its value head
    trains in full (as OpenRLHF and verl set up a LoRA critic): the trunk's own weights stay frozen."""
    if params.ppo.critic_init == "policy":
        critic = ValueModel.from_pretrained(str(reference_dir))
    else:
        path = next(r.model_path for r in params.rewards if r.name == RM_REWARD)
        _check_same_vocabulary(path, reference_dir)
        critic = ValueModel.from_reward_model(path)
    if params.model.lora:
        critic.trunk = add_adapters(critic.trunk, trunk_lora(params.model.lora, critic.trunk), "FEATURE_EXTRACTION")
    return critic


def trunk_lora(lora: LoraConfig, trunk: torch.nn.Module) -> LoraConfig:
    """The policy's LoRA settings for the critic's trunk: only the targets the trunk has (a policy that
    adapts its ``lm_head`` gives a critic whose trunk has none: its value head trains in full)."""
    available = set(linear_names(trunk))
    targets = [t for t in lora.target_modules if t in available]
    if not targets:
        raise LoraTargetError(
            f"model.lora.target_modules: none of {lora.target_modules} is a linear layer of the critic's trunk "
            f"(it has {sorted(available)}); name at least one of them"
        )
    return lora.model_copy(update={"target_modules": targets})


def _check_same_vocabulary(rm_dir: str | Path, reference_dir: str | Path) -> None:
    """Raise unless the reward model's tokenizer is the policy's: the critic reads the policy's token ids."""
    from transformers import AutoTokenizer

    ours, theirs = (AutoTokenizer.from_pretrained(str(d), local_files_only=True) for d in (reference_dir, rm_dir))
    if ours.get_vocab() != theirs.get_vocab():
        raise ValueError(
            f"ppo.critic_init: reward_model: the reward model {rm_dir} has another vocabulary than the policy "
            f"({reference_dir}), and the critic reads the policy's tokens; use ppo.critic_init: policy"
        )


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> BuiltTrainer:
    model = initial_critic(params, reference_dir)
    # The critic steps with the policy, micro-batch for micro-batch (see PPOTrainer.update).
    critic_cfg = params.ppo.critic_engine.model_copy(update={"micro_batch_size": params.rl.engine.micro_batch_size})
    critic = build_engine(model, critic_cfg, inputs.engine.train_batch_size())
    return BuiltTrainer(PPOTrainer(inputs, ppo=params.ppo, critic_engine=critic), {"critic": critic})


def actor_lr(params: Params) -> float:
    """The policy's learning rate under PPO: ``ppo.actor_lr``, else the shared ``rl.engine.lr``."""
    return params.rl.engine.lr if params.ppo.actor_lr is None else params.ppo.actor_lr


ALGORITHM = register(Algorithm("ppo", _build, actor_lr))
