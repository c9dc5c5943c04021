"""The decode loop of the transformers rollout engine: each distinct prompt is prefilled once, its KV
cache expanded to one row per sample, then one token per step for every sample until all stop.

Why not ``generate``: on CPU its sampling step, ``torch.multinomial`` over SmolLM2's 49k-token
vocabulary for 32 rows, took 28 ms of a 130 ms decode step (1.8 of 8.3 s per rollout, profiled):
it draws one exponential per vocabulary entry. Sampling here inverts the cumulative distribution
with one uniform draw per row (inverse transform sampling), 7 ms; the cumulative sums are float64
so that rounding shifts no token's share by more than about 1e-12.

The distribution is ``generate``'s: logits divided by the temperature, then nucleus filtering at
``top_p`` (Holtzman et al. 2020: drop a token once the tokens more likely than it hold ``top_p``),
greedy at temperature 0. Finished rows are fed padding, as ``generate`` does; the loop ends when
every row has stopped or at ``max_new_tokens``.

The KV cache is written in place: transformers' ``DynamicLayer`` grows by ``torch.cat``, which copies
every layer's whole cache at every step (0.7 s of a 7.5 s SmolLM2 rollout, profiled). After the
prefill each layer gets room for ``max_new_tokens`` more positions (:class:`ReservedLayer`).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from grpoflow.rollout import Sampling


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` that holds its keys and values in buffers with room for ``extra`` more
    positions: an update writes into them and hands out views, instead of concatenating."""

    def __init__(self, layer: DynamicLayer, extra: int):
        super().__init__()
        self.dtype, self.device, self.is_initialized = layer.dtype, layer.device, True
        self._buffers = tuple(self._reserve(t, extra) for t in (layer.keys, layer.values))
        self._length = layer.keys.shape[-2]
        self.keys, self.values = (b[..., : self._length, :] for b in self._buffers)

    @staticmethod
    def _reserve(t: torch.Tensor, extra: int) -> torch.Tensor:
        buffer = t.new_empty(*t.shape[:-2], t.shape[-2] + extra, t.shape[-1])
        buffer[..., : t.shape[-2], :] = t
        return buffer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new positions after the cached ones; the keys and values so far (views)."""
        end = self._length + key_states.shape[-2]
        if end > self._buffers[0].shape[-2]:
            raise ValueError(f"ReservedLayer: {end} positions exceed the {self._buffers[0].shape[-2]} reserved")
        for buffer, new in zip(self._buffers, (key_states, value_states)):
            buffer[..., self._length : end, :] = new
        self._length = end
        self.keys, self.values = (b[..., :end, :] for b in self._buffers)
        return self.keys, self.values


def reserve(cache, extra: int) -> None:
    """Give each plain ``DynamicLayer`` of ``cache`` room for ``extra`` more positions (other layer
    kinds, sliding windows for one, are left as they are)."""
    layers = getattr(cache, "layers", [])
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized:
            layers[i] = ReservedLayer(layer, extra)


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` with every token zeroed whose more likely tokens already hold ``top_p`` of the mass
    (the most likely token always stays)."""
    ranked, order = probs.sort(-1, descending=True)
    before = ranked.cumsum(-1) - ranked  # mass of the tokens ranked above each one
    drop = torch.empty_like(before, dtype=torch.bool).scatter_(-1, order, before >= top_p)
    return probs.masked_fill(drop, 0.0)


def next_tokens(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``logits`` (rows, vocab): greedy at temperature 0, else sampled."""
    if sampling.temperature <= 0:
        return logits.argmax(-1)
    probs = (logits.float() / sampling.temperature).softmax(-1)
    if sampling.top_p < 1.0:
        probs = nucleus(probs, sampling.top_p)
    cdf = probs.double().cumsum(-1)
    draw = torch.rand(len(cdf), 1, dtype=torch.float64, generator=generator, device=cdf.device) * cdf[:, -1:]
    # right=True: a token of probability 0 spans an empty interval and is never drawn
    return torch.searchsorted(cdf, draw, right=True).squeeze(1).clamp(max=cdf.shape[-1] - 1)


@torch.no_grad()
def decode(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    rows: torch.Tensor,
    sampling: Sampling,
    stop_ids: list[int],
    pad_id: int,
    *,
    static: bool = False,
    graph: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(generated ids (N, T <= max_new_tokens), untempered log-probs of them or None)`` for the
    samples ``rows`` (N indices into the left-padded ``prompt_ids``, each prompt's samples adjacent).

    ``static``: the steps run over a static KV cache (:mod:`grpoflow.rollout.static_decode`), and with
    ``graph`` each step is a CUDA graph's replay; else over the growing cache (:class:`ReservedLayer`).
    Raises AttributeError, NotImplementedError or TypeError where the model's cache cannot be
    expanded along the batch (the caller then uses ``generate``)."""
    distinct, inverse = torch.unique_consecutive(rows, return_inverse=True)
    mask = prompt_mask[distinct]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=prompt_ids[distinct], attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
    )
    if out.past_key_values is None:
        raise AttributeError("the model returned no KV cache")
    if static:
        from grpoflow.rollout.static_decode import static_step

        step = static_step(model, out.past_key_values, inverse, mask, sampling.max_new_tokens, graph)
    else:
        step = _dynamic_step(model, out.past_key_values, inverse, mask, sampling.max_new_tokens)
    return _sample(out.logits[inverse, -1], positions[inverse, -1], step, sampling, stop_ids, pad_id)


def _dynamic_step(model, cache, inverse: torch.Tensor, mask: torch.Tensor, max_new_tokens: int):
    """A step over the prefill's cache expanded to the samples, growing in place."""
    cache.batch_select_indices(inverse)
    reserve(cache, max_new_tokens)
    mask = mask[inverse]

    def step(token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        nonlocal mask
        mask = torch.cat([mask, mask.new_ones(len(token), 1)], dim=1)
        out = model(
            input_ids=token.unsqueeze(1),
            attention_mask=mask,
            position_ids=position.unsqueeze(1),
            past_key_values=cache,
            use_cache=True,
        )
        return out.logits[:, -1]

    return step


# On an accelerator, whether every row has stopped is asked once per this many tokens: the answer is a
# device-to-host read, which stalls the host until the device has caught up (a GPU step then waits on
# its own launches). Rows that stopped are fed padding until then, as they are anyway. On a CPU a read
# costs nothing, and asking every token draws no random numbers past the last stop (the CPU's digits).
STOP_CHECK_EVERY = 8


def _sample(logits, position, step, sampling: Sampling, stop_ids: list[int], pad_id: int):
    """The loop: sample a token per row, feed it, until every row has stopped or the cap."""
    stops = torch.tensor(stop_ids, device=logits.device)
    done = torch.zeros(len(logits), dtype=torch.bool, device=logits.device)
    check_every = 1 if logits.device.type == "cpu" else STOP_CHECK_EVERY
    tokens, logprobs = [], []
    for i in range(sampling.max_new_tokens):
        token = next_tokens(logits, sampling).masked_fill(done, pad_id)
        tokens.append(token)
        if sampling.logprobs:
            logprobs.append(logits.float().log_softmax(-1).gather(-1, token.unsqueeze(-1)).squeeze(-1))
        done |= torch.isin(token, stops)
        if i == sampling.max_new_tokens - 1 or ((i + 1) % check_every == 0 and bool(done.all())):
            break
        position = position + 1
        logits = step(token, position)
    return torch.stack(tokens, 1), torch.stack(logprobs, 1) if sampling.logprobs else None
