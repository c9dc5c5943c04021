"""LoRA: the reference is the policy with its adapters off, vLLM and the export get the merged
weights, and a checkpoint holds the adapters and their optimizer state."""

from __future__ import annotations

import copy

import pytest
import torch

from grpoflow.config import LoraConfig
from grpoflow.models.lora import (
    AdaptersDisabled,
    LoraTargetError,
    add_adapters,
    merged_for_sampling,
    merged_state_dict,
)
from grpoflow.models.modeling import load_pretrained
from grpoflow.rl.logprobs import completion_logprobs
from tests.chat_model import build_chat_model


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("lora") / "model")


def _perturbed(model):
    with torch.no_grad():  # B starts at zero (adapters are a no-op): make them matter
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model


def test_adapters_off_is_the_base_model_exactly(chat_dir):
    base, _ = load_pretrained(chat_dir)
    policy = _perturbed(add_adapters(copy.deepcopy(base), LoraConfig(rank=4, alpha=8)))
    ids = torch.randint(0, 100, (3, 12))
    attn = torch.ones_like(ids)
    want, _ = completion_logprobs(base, ids, attn, 6)
    got, _ = completion_logprobs(AdaptersDisabled(policy), ids, attn, 6)
    assert torch.equal(got, want)
    on, _ = completion_logprobs(policy, ids, attn, 6)
    assert (on - want).abs().max() > 1e-3  # the adapters are on again outside the context


def test_merged_weights_equal_peft_merge_and_keep_the_adapters(chat_dir):
    base, _ = load_pretrained(chat_dir)
    policy = _perturbed(add_adapters(base, LoraConfig(rank=4, alpha=8)))
    merged = merged_state_dict(policy)
    reference = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert merged.keys() == reference.keys()
    assert max((merged[k] - reference[k]).abs().max().item() for k in merged) < 1e-6
    assert any("lora_A" in n for n, _ in policy.named_parameters())  # adapters untouched
    plain, _ = load_pretrained(chat_dir)
    plain.load_state_dict(merged)
    ids = torch.randint(0, 100, (2, 10))
    a, _ = completion_logprobs(plain, ids, torch.ones_like(ids), 5)
    b, _ = completion_logprobs(policy, ids, torch.ones_like(ids), 5)
    assert torch.allclose(a, b, atol=1e-5)


def test_sampling_with_merged_weights_computes_the_adapters_and_restores_the_very_weights(chat_dir):
    base, _ = load_pretrained(chat_dir)
    policy = _perturbed(add_adapters(base, LoraConfig(rank=4, alpha=8))).eval()
    ids = torch.randint(0, 100, (3, 12), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    with torch.no_grad():
        want, _ = completion_logprobs(policy, ids, attn, 6)
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in policy.named_parameters()}
    with torch.no_grad(), merged_for_sampling(policy) as inside:
        got, _ = completion_logprobs(inside, ids, attn, 6)
        changed = [n for n, p in policy.named_parameters() if p.data_ptr() != before[n][0]]
    assert changed and all("base_layer" in n for n in changed)  # merged into the base weights, adapters off
    assert torch.allclose(got, want, atol=1e-5) and not torch.equal(got, want)  # merged: rounding differs
    for name, param in policy.named_parameters():  # the same tensors back, bit for bit
        assert param.data_ptr() == before[name][0] and torch.equal(param, before[name][1]), name
    with torch.no_grad():
        assert torch.equal(completion_logprobs(policy, ids, attn, 6)[0], want)  # adapters on again


def test_unknown_target_modules_are_named_with_the_ones_the_model_has(chat_dir):
    base, _ = load_pretrained(chat_dir)
    with pytest.raises(
        LoraTargetError, match=r"\['qkv_proj'\] are not linear layers of this model; it has \[.*'q_proj'"
    ):
        add_adapters(base, LoraConfig(target_modules=["q_proj", "qkv_proj"]))
