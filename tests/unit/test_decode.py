"""The transformers engine's decode loop (grpoflow.rollout.decode): nucleus filtering by hand, the
inverse-CDF draw giving each token its probability, and sampled log-probs the trainer agrees with."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rollout import Sampling
from grpoflow.rollout.decode import ReservedLayer, next_tokens, nucleus, reserve
from grpoflow.rollout.hf import HFRolloutEngine
from tests.unit.test_rollout import _prompts, tiny  # noqa: F401  (tiny: a module fixture)


def test_nucleus_by_hand():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    # ranked 0.5, 0.3, 0.15, 0.05; the mass above each: 0, 0.5, 0.8, 0.95; top_p 0.8 keeps the first two
    assert torch.equal(nucleus(probs, 0.8), torch.tensor([[0.0, 0.5, 0.0, 0.3]]))
    assert torch.equal(nucleus(probs, 0.81), torch.tensor([[0.15, 0.5, 0.0, 0.3]]))
    assert torch.equal(nucleus(probs, 0.1), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))  # the top token always stays


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=12), st.floats(0.05, 1.0))
def test_nucleus_keeps_the_smallest_top_set_reaching_top_p(weights, top_p):
    probs = torch.tensor([weights], dtype=torch.float64)
    probs /= probs.sum()
    kept = nucleus(probs, top_p)[0] > 0
    assert kept[probs[0].argmax()]
    if not kept.all():
        assert probs[0][kept].min() >= probs[0][~kept].max()  # nothing kept below a dropped token
    assert probs[0][kept].sum() >= top_p - 1e-9 or kept.all()
    # smallest: without its least likely token the kept set would fall short of top_p
    assert probs[0][kept].sum() - probs[0][kept].min() < top_p + 1e-9


def test_each_token_is_drawn_at_its_tempered_probability():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0]).log_softmax(-1)
    rows = 200_000
    sampling = Sampling(temperature=0.7, top_p=1.0)
    drawn = next_tokens(logits.expand(rows, -1), sampling, torch.Generator().manual_seed(0))
    expected = (logits / 0.7).softmax(-1)
    freq = torch.bincount(drawn, minlength=5).double() / rows
    sigma = (expected * (1 - expected) / rows).sqrt()
    assert ((freq - expected).abs() <= 5 * sigma + 1e-12).all(), (freq, expected)
    assert freq[4] == 0  # e^-30 / 0.7: never in 200k draws
    filtered = next_tokens(logits.expand(rows, -1), Sampling(0.7, 0.6), torch.Generator().manual_seed(1))
    assert set(filtered.unique().tolist()) == {0}  # token 0 alone holds 0.76 > 0.6 of the tempered mass


def test_greedy_is_the_argmax():
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    assert torch.equal(next_tokens(logits, Sampling(temperature=0.0)), logits.argmax(-1))


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_sampled_logprobs_are_the_ones_the_trainer_computes(tiny, top_p):  # noqa: F811
    model, tok = tiny
    sampling = Sampling(temperature=1.0, top_p=top_p, max_new_tokens=10, logprobs=True)
    out = HFRolloutEngine(model, tok).generate(_prompts([2, 7, 4]), 3, sampling, seed=3)
    ids = torch.cat([out.prompt_ids, out.completion_ids], 1)
    attn = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        trained = completion_logprobs(model.eval(), ids, attn, out.prompt_ids.shape[1])[0]
    mask = out.completion_mask.bool()
    assert mask.sum() > 9 and len(set(out.texts)) > 3  # sampled: the groups differ
    assert torch.allclose(out.sampler_logprobs[mask], trained[mask], atol=1e-4, rtol=0)


def _layer(keys: torch.Tensor, values: torch.Tensor):
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    layer.update(keys, values)
    return layer


def test_a_reserved_layer_holds_what_concatenation_would():
    g = torch.Generator().manual_seed(0)
    k0, v0, k1, v1, k2, v2 = (torch.randn(3, 2, n, 4, generator=g) for n in (5, 5, 1, 1, 2, 2))
    plain, reserved = _layer(k0, v0), ReservedLayer(_layer(k0, v0), extra=3)
    for k, v in ((k1, v1), (k2, v2)):
        want, got = plain.update(k, v), reserved.update(k, v)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert reserved.get_seq_length() == 8
    with pytest.raises(ValueError, match="exceed the 8 reserved"):
        reserved.update(k1, v1)


def test_reserve_swaps_only_plain_dynamic_layers():
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    cache.update(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4), layer_idx=0)
    cache.update(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4), layer_idx=1)
    sliding = type("Sliding", (type(cache.layers[1]),), {})()  # another layer kind stays as it is
    cache.layers[1] = sliding
    reserve(cache, 4)
    assert isinstance(cache.layers[0], ReservedLayer) and cache.layers[1] is sliding
    assert cache.layers[0].get_seq_length() == 2
