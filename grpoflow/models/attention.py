"""Our attention function for transformers models: ``sdpa`` with grouped-query heads handed to the
kernel whole, and packed shared-prefix groups split into prompts and completion slots, on CPU.

transformers' ``sdpa`` attention copies each key/value head ``num_heads / num_kv_heads`` times
(``repeat_kv``) whenever it is given a mask, because CUDA's fast kernels take no mask with grouped
heads. Our passes always carry a mask (left-padded rollouts, packed shared-prefix groups), so on
CPU every decode step copied the whole KV cache of every layer: SmolLM2-135M has 9 query heads on
3 key/value heads. PyTorch's CPU kernel takes the grouped heads and the mask together
(``enable_gqa``, PyTorch >= 2.5) and computes the same attention without the copies; the outputs
are bit-identical in the forward pass (``tests/unit/test_attention.py``).

A packed pass (:mod:`grpoflow.rl.shared_prefix`) attends with a mask under which a completion sees
only its prompt and itself; computed whole, most of its (P + G S)^2 entries are masked out.
Handed the pass's :class:`~grpoflow.rl.shared_prefix.Slots` (keyword ``grpoflow_slots``, which
transformers passes down to the attention function), the attention runs the prompts over
themselves and the slots over their prompt and themselves, 4-5x fewer entries at G = 8.

:func:`use_own_attention` switches a model's ``sdpa`` attention to ``grpoflow_sdpa``; everything
else (no mask and no slots, CUDA, one key/value head per query head) goes through transformers'
own ``sdpa`` function unchanged.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "grpoflow_sdpa"
SLOTS_KWARG = "grpoflow_slots"  # a packed pass's Slots, handed down through the model's forward


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``(output (B, q, heads, d), None)``."""
    slots = kwargs.pop(SLOTS_KWARG, None)
    split = slots is not None and attention_mask is not None and query.device.type == "cpu"
    if split and query.shape[2] == slots.width:
        return _split(query, key, value, attention_mask, slots, dropout, scaling), None
    plain = (
        attention_mask is None  # transformers already passes enable_gqa then
        or query.device.type != "cpu"
        or getattr(module, "num_key_value_groups", 1) == 1
        or any(kwargs.get(k) is not None for k in ("position_bias", "cache"))
        or kwargs.get("output_attentions", False)
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    return _sdpa(query, key, value, attention_mask, dropout, scaling).transpose(1, 2).contiguous(), None


def _sdpa(query, key, value, mask, dropout: float, scaling: float | None) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
    )


def _split(query, key, value, mask, slots, dropout: float, scaling: float | None) -> torch.Tensor:
    """Packed shared-prefix groups' attention in two parts (:class:`grpoflow.rl.shared_prefix.Slots`):
    the prompts over themselves, and every completion slot over its prompt's keys and its own,
    batched slot by slot. The same attention as the packed mask's (a query's softmax runs over the
    same keys); positions that are neither prompt nor a fed token get zeros, which nothing reads."""
    k, heads, width, d = query.shape
    p = slots.prompt

    def slot_rows(x: torch.Tensor) -> torch.Tensor:  # (K, h, W, d) -> (R, h, S, d)
        return x.transpose(1, 2).reshape(k * width, x.shape[1], d)[slots.index].transpose(1, 2)

    prompt_out = _sdpa(query[:, :, :p], key[:, :, :p], value[:, :, :p], mask[:, :, :p, :p], dropout, scaling)
    keys = torch.cat([key[:, :, :p][slots.group], slot_rows(key)], dim=2)
    values = torch.cat([value[:, :, :p][slots.group], slot_rows(value)], dim=2)
    slot_out = _sdpa(slot_rows(query), keys, values, slots.mask, dropout, scaling)
    written = torch.cat([prompt_out.transpose(1, 2).reshape(k * p, heads, d), slot_out.transpose(1, 2)[slots.real]])
    out = query.new_zeros(k * width, heads, d).index_copy(0, slots.out_index, written)
    return out.view(k, width, heads, d)


AttentionInterface.register(NAME, grouped_sdpa_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the same boolean masks as sdpa's


def use_own_attention(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with ``grpoflow_sdpa`` attention where it uses ``sdpa`` (returned as given
    otherwise: eager or flash attention keep their own)."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(NAME)
    return model
