"""``grpoflow_sdpa`` (grpoflow.models.attention) computes transformers' ``sdpa`` attention without copying
the grouped key/value heads: the same logits, gradients and greedy rollouts. Its split of packed
shared-prefix groups is checked against unpacked rows in test_shared_prefix and test_ppo."""

from __future__ import annotations

import pytest
import torch

from grpoflow.models.attention import NAME, use_own_attention
from grpoflow.models.modeling import load_pretrained, save_pretrained, train_tokenizer
from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rl.shared_prefix import takes_slots
from grpoflow.rollout import Sampling
from grpoflow.rollout.hf import HFRolloutEngine
from tests.unit.test_rollout import WORDS
from tests.unit.test_shared_prefix import VOCAB, batch, rel, small_llama, tiny_default


def pair(vocab: int = VOCAB) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Two copies of one random grouped-query Llama, each with its own config: transformers' sdpa and ours."""
    return small_llama(lora=False, attention="sdpa", vocab=vocab), small_llama(lora=False, vocab=vocab)


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_only_sdpa_switches():
    theirs, ours = pair()
    assert theirs.config._attn_implementation == "sdpa" and ours.config._attn_implementation == NAME
    assert ours.model.layers[0].self_attn.config._attn_implementation == NAME  # what the layers read
    assert takes_slots(ours) and not takes_slots(theirs)
    eager = pair()[0]
    eager.set_attn_implementation("eager")
    assert use_own_attention(eager).config._attn_implementation == "eager"


def test_loaded_models_use_it(tmp_path):
    save_pretrained(tiny_default("sdpa"), train_tokenizer([" ".join(WORDS)] * 20, VOCAB), tmp_path)
    model, _ = load_pretrained(tmp_path)
    assert model.config._attn_implementation == NAME
    assert "grpoflow" not in (tmp_path / "config.json").read_text()  # saved models stay plain transformers


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_logprobs_entropies_and_gradients_equal_sdpa(shared_prefix):
    theirs, ours = pair()
    ids, attn, start = batch([9, 3, 14], g=3, c_lens=[6, 2, 8])
    results = []
    for model in (theirs, ours):
        model.train().zero_grad(set_to_none=True)
        logp, ent = completion_logprobs(
            model, ids, attn, start, with_entropy=True, entropy_grad=True, shared_prefix=shared_prefix
        )
        mask = attn[:, start:].float()
        ((logp + 0.01 * ent) * mask).sum().backward()
        results.append((logp.detach(), ent.detach(), grads(model)))
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    mask = attn[:, start:].bool()
    if shared_prefix:  # ours splits the packed groups: the same sums in another order
        assert rel(lp_b[mask], lp_a[mask]) < 1e-5 and rel(ent_b[mask], ent_a[mask]) < 1e-5
    else:  # one row per sample: the kernel's own arithmetic, bit for bit
        assert torch.equal(lp_a[mask], lp_b[mask]) and torch.equal(ent_a[mask], ent_b[mask])
    assert g_a.keys() == g_b.keys() and g_a
    for name, grad in g_a.items():
        assert rel(g_b[name], grad) < 1e-5, name


def test_greedy_rollouts_with_shared_prefill_are_the_same_tokens():
    tok = train_tokenizer([" ".join(WORDS)] * 20, VOCAB)
    theirs, ours = pair(vocab=len(tok))
    prompts = [" ".join(WORDS[i : i + k]) for i, k in enumerate([3, 9, 5])]
    greedy = Sampling(temperature=0.0, max_new_tokens=8, logprobs=True)
    a, b = (HFRolloutEngine(m, tok).generate(prompts, 3, greedy, seed=0) for m in (theirs, ours))
    assert torch.equal(a.completion_ids, b.completion_ids) and a.completion_mask.sum() > 9
    assert torch.allclose(a.sampler_logprobs, b.sampler_logprobs, atol=1e-6, rtol=0)
