"""The decode loop over a static KV cache (grpoflow.rollout.static_decode), run eagerly on CPU: the
same tokens and log-probs as the loop over the growing cache, greedy and sampled, ragged prompts
included; on CUDA the same step is a CUDA graph's replay (tests/gpu/test_decode_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from grpoflow.rollout import Sampling
from grpoflow.rollout.hf import HFRolloutEngine
from tests.unit.test_rollout import _prompts, tiny  # noqa: F401  (tiny: a module fixture)


@pytest.mark.parametrize(
    "sampling",
    [
        Sampling(temperature=0.0, max_new_tokens=12, logprobs=True),
        Sampling(temperature=1.0, top_p=0.9, max_new_tokens=12, logprobs=True),
    ],
    ids=["greedy", "sampled"],
)
def test_the_static_cache_gives_the_growing_caches_tokens_and_logprobs(tiny, sampling):  # noqa: F811
    model, tok = tiny
    prompts = _prompts([2, 9, 5, 1])  # ragged: left padding of 0 to 8 tokens
    grown = HFRolloutEngine(model, tok, static=False).generate(prompts, 3, sampling, seed=7)
    static = HFRolloutEngine(model, tok, static=True).generate(prompts, 3, sampling, seed=7)
    assert torch.equal(static.completion_ids, grown.completion_ids)
    assert torch.equal(static.completion_mask, grown.completion_mask)
    mask = grown.completion_mask.bool()
    assert mask.sum() > 30
    assert torch.allclose(static.sampler_logprobs[mask], grown.sampler_logprobs[mask], atol=1e-5, rtol=0)


def test_greedy_static_decoding_is_generates(tiny):  # noqa: F811
    model, tok = tiny
    sampling = Sampling(temperature=0.0, max_new_tokens=10)
    prompts = _prompts([3, 7, 4])
    static = HFRolloutEngine(model, tok, static=True).generate(prompts, 2, sampling, seed=0)
    plain = HFRolloutEngine(model, tok, share_prefill=False).generate(prompts, 2, sampling, seed=0)
    assert torch.equal(static.completion_ids, plain.completion_ids)


def test_the_static_step_is_chosen_on_cuda_only_and_unpartitioned(tiny, monkeypatch):  # noqa: F811
    from grpoflow.rollout import hf

    model, tok = tiny
    assert HFRolloutEngine(model, tok)._static() == (False, False)  # CPU: nothing changes
    assert HFRolloutEngine(model, tok, static=True)._static() == (True, False)  # eager on CPU, never a graph
    monkeypatch.setattr(hf, "model_device", lambda m: torch.device("cuda", 0))
    assert HFRolloutEngine(model, tok)._static() == (True, True)
    monkeypatch.setattr(hf, "is_zero3", lambda m: True)
    assert HFRolloutEngine(model, tok)._static() == (False, False)  # ZeRO-3 gathers weights by hooks


def test_a_model_without_static_layers_falls_back_to_the_growing_cache(tiny, monkeypatch):  # noqa: F811
    from grpoflow.rollout import static_decode

    model, tok = tiny
    sampling = Sampling(temperature=0.0, max_new_tokens=6)

    def refuse(*args, **kwargs):
        raise NotImplementedError("SlidingWindowLayer: only full-attention layers have a static step")

    monkeypatch.setattr(static_decode, "static_cache", refuse)
    engine = HFRolloutEngine(model, tok, static=True)
    out = engine.generate(_prompts([3, 4]), 2, sampling, seed=0)
    expected = HFRolloutEngine(model, tok, static=False).generate(_prompts([3, 4]), 2, sampling, seed=0)
    assert engine.static is False and engine.share_prefill is True
    assert torch.equal(out.completion_ids, expected.completion_ids)
