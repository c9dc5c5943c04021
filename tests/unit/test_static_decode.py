"""The decode loop over a static KV cache (grpoflow.rollout.static_decode), run eagerly on CPU: the
same tokens and log-probs as the loop over the growing cache, greedy and sampled, ragged prompts
included; on CUDA the same step is a CUDA graph's replay (tests/gpu/test_decode_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from grpoflow.rollout import Sampling
from grpoflow.rollout.hf import HFRolloutEngine
from tests.unit import fake_cuda_graph
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


def test_the_static_step_is_chosen_on_an_accelerator_unpartitioned_and_a_graph_on_cuda_only(tiny, monkeypatch):  # noqa: F811
    from grpoflow.rollout import hf

    model, tok = tiny
    assert HFRolloutEngine(model, tok)._static() == (False, False)  # CPU: nothing changes
    assert HFRolloutEngine(model, tok, static=True)._static() == (True, False)  # eager on CPU, never a graph
    monkeypatch.setattr(hf, "model_device", lambda m: torch.device("lazy", 0))  # the device audit's stand-in
    assert HFRolloutEngine(model, tok)._static() == (True, False)  # the static cache, eagerly: audited
    monkeypatch.setattr(hf, "model_device", lambda m: torch.device("cuda", 0))
    assert HFRolloutEngine(model, tok)._static() == (True, True)
    assert HFRolloutEngine(model, tok, static=False)._static() == (False, False)  # rl.decode: dynamic
    monkeypatch.setattr(hf, "is_zero3", lambda m: True)
    assert HFRolloutEngine(model, tok)._static() == (False, False)  # ZeRO-3 gathers weights by hooks


@pytest.mark.parametrize("where", ["capture", "replay", "cache"])
def test_a_static_step_that_fails_hands_the_run_to_the_growing_cache_with_one_warning(
    tiny,  # noqa: F811
    monkeypatch,
    caplog,
    where,
):
    """#49: a CUDA graph that cannot be captured or replayed (or a static cache that cannot be made)
    no longer crashes step 1: the batch is decoded again over the growing cache, and so is the rest of
    the run, with one warning line naming the cause."""
    from grpoflow.rollout import hf, static_decode

    model, tok = tiny
    sampling = Sampling(temperature=0.0, max_new_tokens=6)
    calls = {"n": 0}

    def fail(*args, **kwargs):
        calls["n"] += 1
        raise RuntimeError(f"injected {where} failure\nsecond line")

    if where == "capture":
        monkeypatch.setattr(static_decode.StaticStep, "_capture", fail)
        monkeypatch.setattr(
            HFRolloutEngine, "_static", lambda self: (self.static is not False, self.static is not False)
        )
    elif where == "replay":
        monkeypatch.setattr(static_decode.StaticStep, "_forward", fail)
    else:
        monkeypatch.setattr(static_decode.StaticCache, "__init__", fail)
    engine = HFRolloutEngine(model, tok, static=True, batch_size=2)
    with caplog.at_level("WARNING", logger=hf.__name__):
        out = engine.generate(_prompts([3, 4]), 2, sampling, seed=0)  # two batches: the second never tries
    expected = HFRolloutEngine(model, tok, static=False).generate(_prompts([3, 4]), 2, sampling, seed=0)
    assert torch.equal(out.completion_ids, expected.completion_ids)
    assert engine.static is False and calls["n"] == 1
    (line,) = [r.getMessage() for r in caplog.records if "static decode failed" in r.getMessage()]
    assert f"injected {where} failure" in line and "second line" not in line and "RuntimeError" in line


def test_out_of_memory_in_the_static_step_is_not_taken_for_a_capture_failure(tiny, monkeypatch):  # noqa: F811
    from grpoflow.rollout import static_decode

    model, tok = tiny

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("injected")

    monkeypatch.setattr(static_decode.StaticStep, "_forward", oom)
    engine = HFRolloutEngine(model, tok, static=True)
    with pytest.raises(torch.OutOfMemoryError):
        engine.generate(_prompts([3]), 2, Sampling(temperature=0.0, max_new_tokens=4), seed=0)
    assert engine.static is True  # the OOM backoff answers it; the decode path stays


@pytest.mark.parametrize("setting, static", [("auto", None), ("static", True), ("dynamic", False)])
def test_rl_decode_chooses_the_engines_loop(tiny, setting, static):  # noqa: F811
    from grpoflow.rollout import build_rollout

    model, tok = tiny
    engine = build_rollout("hf", model, tok, "unused", seed=0, max_model_len=64, decode=setting)
    assert engine.static is static


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


@pytest.mark.parametrize(
    "sampling",
    [Sampling(temperature=0.0, max_new_tokens=12, logprobs=True), Sampling(temperature=1.0, max_new_tokens=12)],
    ids=["greedy", "sampled"],
)
def test_the_graph_path_replays_the_growing_caches_tokens_under_a_graphs_rules(tiny, monkeypatch, sampling):  # noqa: F811
    """#49: the capture and replay path, never run on a GPU, runs here under a CUDA graph's rules
    (tests/unit/fake_cuda_graph.py: a capture runs nothing, a replay reruns the recorded kernels on the
    tensors they were recorded with, a device read while capturing is refused): one capture per batch,
    one replay per token, and the growing cache's tokens and log-probs."""
    model, tok = tiny
    prompts = _prompts([2, 9, 5])
    grown = HFRolloutEngine(model, tok, static=False).generate(prompts, 2, sampling, seed=3)
    graphs = fake_cuda_graph.install(monkeypatch)
    # a CUDA device's choice, the fallback's (static False) kept: a wrong capture falls back, and fails here
    monkeypatch.setattr(HFRolloutEngine, "_static", lambda self: (self.static is not False,) * 2)
    engine = HFRolloutEngine(model, tok, static=True)
    replayed = engine.generate(prompts, 2, sampling, seed=3)
    assert engine.static is True and len(graphs) == 1 and graphs[0].calls
    assert graphs[0].replays == int(replayed.completion_mask.sum(1).max()) - 1  # the first token: the prefill's
    assert torch.equal(replayed.completion_ids, grown.completion_ids)
    if sampling.logprobs:
        mask = grown.completion_mask.bool()
        assert torch.allclose(replayed.sampler_logprobs[mask], grown.sampler_logprobs[mask], atol=1e-5, rtol=0)


def test_the_fake_graph_keeps_a_graphs_rules(monkeypatch):
    """The fake's own rules, each of which a wrong capture breaks: nothing runs in the capture, a replay
    sees in-place writes to the recorded tensors but not a rebound name, and a read is refused."""
    fake_cuda_graph.install(monkeypatch)
    state, x = torch.zeros(3), torch.ones(3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        state.add_(y)
    assert torch.equal(state, torch.zeros(3)) and torch.isnan(y).all()  # a capture runs nothing
    graph.replay()
    assert torch.equal(state, torch.full((3,), 2.0)) and torch.equal(y, torch.full((3,), 2.0))
    x.fill_(5.0)  # written in place: seen
    graph.replay()
    assert torch.equal(state, torch.full((3,), 12.0))
    x = torch.zeros(3)  # rebound: not seen
    graph.replay()
    assert torch.equal(state, torch.full((3,), 22.0))
    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            state.sum().item()
