"""Per-token log-probabilities and entropies of completion tokens under a causal LM.

Real vocabularies make the logits the largest tensor of a step (49k entries per token for
SmolLM2, 152k for Qwen2.5): the model computes logits for the completion positions only
(``logits_to_keep``), and the log-probs of the chosen tokens are ``logit - logsumexp`` over row
chunks, so no fp32 log-softmax over the whole batch and vocabulary is ever materialised. The
entropy is a metric, computed without gradient, unless an entropy bonus needs its gradient: then
every chunk's softmax is kept for the backward pass (the whole batch's, N x T x vocabulary floats).
"""

from __future__ import annotations

import torch

_CHUNK_BYTES = 64 * 2**20  # fp32 logits handled at once when reducing over the vocabulary


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_start: int,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``(N, T_c)`` of tokens ``input_ids[:, completion_start:]`` given everything before.

    ``input_ids`` is ``[left-padded prompts | right-padded completions]``; position ids follow the
    attention mask so left padding does not shift positions. ``with_entropy`` also returns the
    per-token entropies ``(N, T_c)``, with gradient when ``entropy_grad`` (an entropy bonus).
    """
    n, t_c = input_ids.shape[0], input_ids.shape[1] - completion_start
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=t_c + 1)
    logits = out.logits[:, -(t_c + 1) : -1]  # the logit at t predicts token t + 1
    targets = input_ids[:, completion_start:]
    rows = max(1, _CHUNK_BYTES // max(1, t_c * logits.shape[-1] * 4))
    logp, entropy = [], []
    for lo in range(0, n, rows):
        chunk = logits[lo : lo + rows].float()
        lse = torch.logsumexp(chunk, dim=-1)
        logp.append(chunk.gather(-1, targets[lo : lo + rows].unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy.append(lse - (torch.softmax(chunk, dim=-1) * chunk).sum(-1))
    return torch.cat(logp), (torch.cat(entropy) if with_entropy else None)
