"""PPO's critic (:mod:`grpoflow.algorithms.ppo.update`): the value model, its values of each completion token, the
token-level rewards and clipped value loss it is trained on, how well it explains the returns, and
how it starts: from the SFT policy's trunk with a zero value head, or from the reward model
(``ppo.critic_init``), with LoRA adapters where the policy has them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModel

from grpoflow import metric_names as M
from grpoflow.config import RM_REWARD, LoraConfig, Params
from grpoflow.models.attention import use_own_attention
from grpoflow.models.lora import LoraTargetError, add_adapters, linear_names
from grpoflow.rl import shared_prefix as sp


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


def completion_values(
    critic, ids, attn, start: int, shared_prefix: bool = True, rows: sp.Rows | None = None
) -> torch.Tensor:
    """``V(s_t)`` for each completion token t: the value at the position that predicts it.
    ``shared_prefix``: each group's prompt encoded once (:mod:`grpoflow.rl.shared_prefix`), same values;
    ``rows``: these rows' part of the layout, when read already (:meth:`~grpoflow.rl.learner.Learner.rows`)."""
    packed = sp.packed_for(critic, ids, attn, start, rows) if shared_prefix else None
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
        check_same_vocabulary(path, reference_dir)
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


def check_same_vocabulary(rm_dir: str | Path, reference_dir: str | Path) -> None:
    """Raise unless the reward model's tokenizer is the policy's: the critic reads the policy's token ids."""
    from transformers import AutoTokenizer

    ours, theirs = (AutoTokenizer.from_pretrained(str(d), local_files_only=True) for d in (reference_dir, rm_dir))
    if ours.get_vocab() != theirs.get_vocab():
        raise ValueError(
            f"ppo.critic_init: reward_model: the reward model {rm_dir} has another vocabulary than the policy "
            f"({reference_dir}), and the critic reads the policy's tokens; use ppo.critic_init: policy"
        )
