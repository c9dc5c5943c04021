"""The decode loop on CUDA: a static KV cache with each step a CUDA graph's replay
(grpoflow.rollout.static_decode), against transformers' ``generate`` and the trainer's log-probs."""

from __future__ import annotations

import pytest
import torch

from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rollout import Sampling
from grpoflow.rollout.hf import HFRolloutEngine
from tests.gpu.test_gpu_paths import _tiny

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROMPTS = ["1+1=", "12+7=", "3+3=", "40+2="]


def test_greedy_graph_decoding_is_generates_on_the_same_model(tmp_path):
    model, tok = _tiny(tmp_path)
    model = model.cuda().eval()
    sampling = Sampling(temperature=0.0, max_new_tokens=24)
    graph = HFRolloutEngine(model, tok)
    assert graph._static() == (True, True)  # CUDA: the static cache and the graph, unasked
    ours = graph.generate(PROMPTS, 2, sampling, seed=0)
    theirs = HFRolloutEngine(model, tok, share_prefill=False).generate(PROMPTS, 2, sampling, seed=0)
    assert ours.completion_ids.device.type == "cuda"
    assert torch.equal(ours.completion_ids, theirs.completion_ids)


def test_bf16_graph_logprobs_are_the_trainers_within_bf16_tolerance(tmp_path):
    model, tok = _tiny(tmp_path)
    model = model.cuda().to(torch.bfloat16).eval()
    sampling = Sampling(temperature=1.0, max_new_tokens=24, logprobs=True)
    out = HFRolloutEngine(model, tok).generate(PROMPTS, 4, sampling, seed=1)
    ids = torch.cat([out.prompt_ids, out.completion_ids], 1)
    attn = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        trained = completion_logprobs(model, ids, attn, out.prompt_ids.shape[1])[0]
    mask = out.completion_mask.bool()
    assert mask.sum() > 40
    # bf16 carries 8 bits of mantissa: a log-prob of a few nats agrees to a few hundredths
    assert (out.sampler_logprobs[mask] - trained[mask]).abs().max() < 0.1
