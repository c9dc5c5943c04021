"""Per-token log-probabilities and entropies of completion tokens under a causal LM.

Real vocabularies make the logits the largest tensor of a step (49k entries per token for
SmolLM2, 152k for Qwen2.5): the model computes logits for the completion positions only
(``logits_to_keep``), and the log-probs of the chosen tokens are ``logit - logsumexp`` over row
chunks, so no fp32 log-softmax over the whole batch and vocabulary is ever materialised. The
entropy is a metric, computed without gradient, unless an entropy bonus needs its gradient: then
every chunk's softmax is kept for the backward pass (the whole batch's, N x T x vocabulary floats).

Without an entropy bonus the reduction is one autograd node (:class:`ChosenLogprob`): its backward
writes ``d logp / d logits = onehot(target) - softmax`` straight into one gradient tensor, chunk by
chunk. Left to autograd, every chunk's slice would allocate and zero a gradient the size of all the
logits and add it to the others, and the picking of the chosen logits another: about a tenth of a
SmolLM2 update (profiled).
"""

from __future__ import annotations

import torch

from grpoflow.rl import shared_prefix as sp

_CHUNK_BYTES = 16 * 2**20  # fp32 logits at once over the vocabulary (larger chunks were slower: page faults)


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_start: int,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    shared_prefix: bool = True,
    rows: sp.Rows | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``(N, T_c)`` of tokens ``input_ids[:, completion_start:]`` given everything before.

    ``input_ids`` is ``[left-padded prompts | right-padded completions]``; position ids follow the
    attention mask so left padding does not shift positions. ``with_entropy`` also returns the
    per-token entropies ``(N, T_c)``, with gradient when ``entropy_grad`` (an entropy bonus).
    ``shared_prefix``: consecutive rows with the same prompt encode it once
    (:mod:`grpoflow.rl.shared_prefix`); the results are the same. ``rows``: these rows' part of the
    layout, when read already for their whole batch (else the packing reads it).
    """
    targets = input_ids[:, completion_start:]
    packed = sp.packed_for(model, input_ids, attention_mask, completion_start, rows) if shared_prefix else None
    if packed is not None:
        logits = shared_logits(model, packed)
        return _reduce_packed(logits, packed.rows, targets, with_entropy, entropy_grad)
    logits, _ = row_logits(model, input_ids, attention_mask, completion_start)
    return _reduce(logits, targets, with_entropy, entropy_grad)


def row_logits(model, input_ids, attention_mask, completion_start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, T_c, V)`` logits predicting the completion tokens, one ``[prompt | completion]`` row each."""
    t_c = input_ids.shape[1] - completion_start
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=t_c + 1)
    return out.logits[:, -(t_c + 1) : -1], input_ids[:, completion_start:]  # the logit at t predicts t + 1


class ChosenLogprob(torch.autograd.Function):
    """``logits[p, target] - logsumexp(logits[p])`` for each flat position ``p`` of ``positions``, from
    ``(P, V)`` logits, over row chunks; the entropies at ``positions`` without gradient (or None)."""

    @staticmethod
    def forward(ctx, logits, positions, targets, with_entropy: bool):
        """``(log-probs, entropies or None)``; keeps the logits and each position's logsumexp for backward."""
        lse = logits.new_empty(len(logits), dtype=torch.float32)
        entropy = torch.empty_like(lse) if with_entropy else None
        for lo, chunk in _chunks(logits):
            hi = lo + len(chunk)
            lse[lo:hi] = torch.logsumexp(chunk, dim=-1)
            if entropy is not None:  # H = lse - sum(softmax * logits), the sum as a batched dot product
                probs = torch.sub(chunk, lse[lo:hi, None]).exp_()
                entropy[lo:hi] = lse[lo:hi] - torch.bmm(probs.unsqueeze(1), chunk.unsqueeze(2)).view(-1)
        flat = positions * logits.shape[-1] + targets
        ctx.save_for_backward(logits, lse, positions, flat)
        if entropy is not None:
            entropy = entropy[positions]
            ctx.mark_non_differentiable(entropy)
        return logits.reshape(-1)[flat].float() - lse[positions], entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        """The logits' gradient, ``(onehot(target) - softmax) * grad`` per position, chunk by chunk."""
        logits, lse, positions, flat = ctx.saved_tensors
        weight = torch.zeros_like(lse).index_add_(0, positions.reshape(-1), grad_logp.reshape(-1).float())
        grad = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
        for lo, chunk in _chunks(logits):
            hi = lo + len(chunk)  # -softmax times the position's summed gradient, in place
            torch.sub(chunk, lse[lo:hi, None], out=grad[lo:hi]).exp_().mul_(-weight[lo:hi, None])
        grad.view(-1).index_add_(0, flat.reshape(-1), grad_logp.reshape(-1).float())
        return grad.to(logits.dtype), None, None, None


def _chunks(logits: torch.Tensor):
    """``(first row, fp32 rows)`` of ``(P, V)`` logits, about ``_CHUNK_BYTES`` at a time."""
    rows = max(1, _CHUNK_BYTES // max(1, logits.shape[-1] * 4))
    for lo in range(0, len(logits), rows):
        yield lo, logits[lo : lo + rows].float()


def shared_logits(model, packed: sp.Packed) -> torch.Tensor:
    """``(K, W, V)`` logits of the packed groups (each prompt encoded once) from the prompt's last
    position on; ``packed.rows`` picks each row's :func:`row_logits` from them."""
    out = model(
        input_ids=packed.input_ids,
        attention_mask=sp.mask_for(model, packed.mask),
        position_ids=packed.position_ids,
        logits_to_keep=packed.input_ids.shape[1] - packed.keep_from,
        use_cache=False,
        **sp.slot_kwargs(model, packed),
    )
    return out.logits


def _reduce_packed(
    logits: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`_reduce` on packed ``(K, W, V)`` logits, where row ``r``'s token ``t`` is predicted by
    flat position ``rows[r, t]``: logsumexp and entropy once per packed position (the prompt's last
    one serves all G first tokens), then indexed; the chosen logits are picked as scalars, so no
    ``(N, T_c, V)`` copy of the logits is made."""
    k, w, v = logits.shape
    if not (with_entropy and entropy_grad and torch.is_grad_enabled()):
        return ChosenLogprob.apply(logits.reshape(k * w, v), rows, targets, with_entropy)
    per_row = max(1, _CHUNK_BYTES // max(1, w * v * 4))
    lse, entropy = [], []
    for lo in range(0, k, per_row):
        chunk = logits[lo : lo + per_row].float()
        lse.append(torch.logsumexp(chunk, dim=-1))
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy.append(lse[-1] - (torch.softmax(chunk, dim=-1) * chunk).sum(-1))
    chosen = logits.reshape(-1)[rows * v + targets].float()
    logp = chosen - torch.cat(lse).reshape(-1)[rows]
    return logp, (torch.cat(entropy).reshape(-1)[rows] if with_entropy else None)


def _reduce(
    logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``targets`` and entropies from ``(N, T_c, V)`` logits, over row chunks."""
    n, t_c = targets.shape
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
