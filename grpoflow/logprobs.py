"""Per-token log-probabilities and entropies of completion tokens under a causal LM."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_start: int,
    *,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``(N, T_c)`` of tokens ``input_ids[:, completion_start:]`` given everything before.

    ``input_ids`` is ``[left-padded prompts | right-padded completions]``; position ids follow the
    attention mask so left padding does not shift positions.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, completion_start - 1 : -1].float()  # the logit at t predicts token t + 1
    targets = input_ids[:, completion_start:]
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy
