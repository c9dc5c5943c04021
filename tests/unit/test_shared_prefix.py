"""Shared-prefix groups (grpoflow.rl.shared_prefix) give today's per-row results: log-probs, entropies,
loss and every parameter's gradient, in fp32, within 1e-5 relative."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, LlamaConfig

from grpoflow.config import LoraConfig, ModelConfig
from grpoflow.models.attention import NAME, use_own_attention
from grpoflow.models.lora import AdaptersDisabled, add_adapters
from grpoflow.models.modeling import build_tiny_model
from grpoflow.rl import logprobs as lp
from grpoflow.rl import shared_prefix as sp
from grpoflow.rl.logprobs import completion_logprobs

VOCAB = 96
RTOL = 1e-5
ZERO = 1e-7  # a gradient norm below this is float noise around an exact zero


def tiny_default(attention: str = NAME) -> torch.nn.Module:
    """The tiny default's architecture and size (Qwen2), on a stand-in vocabulary, with our attention
    (as every loaded model has it) or transformers' ``sdpa``."""
    tok = type("Tok", (), {"__len__": lambda self: VOCAB, "eos_token_id": 0, "pad_token_id": 1})()
    model = build_tiny_model(ModelConfig(), tok, seed=0)
    return use_own_attention(model) if attention == NAME else model


def small_llama(lora: bool = True, head_dim: int = 32, attention: str = NAME, vocab: int = VOCAB) -> torch.nn.Module:
    """A SmolLM2-shaped Llama (grouped-query attention), random (the same for the same arguments),
    with LoRA adapters."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=4 * head_dim,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if attention == NAME:
        use_own_attention(model)
    if lora:
        model = add_adapters(
            model, LoraConfig(rank=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj"])
        )
        for name, p in model.named_parameters():  # B starts at zero: make the adapters matter
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    return model


def batch(prompt_lens, g, c_lens, seed=0, width_c=None):
    """``[left-padded prompt | right-padded completion]`` rows: G per prompt, lengths as given."""
    gen = torch.Generator().manual_seed(seed)
    p, c = max(prompt_lens), width_c or max(c_lens)
    ids, attn = [], []
    for i, pl in enumerate(prompt_lens):
        prompt = torch.randint(2, VOCAB, (pl,), generator=gen)
        for j in range(g):
            cl = c_lens[(i * g + j) % len(c_lens)]
            comp = torch.randint(2, VOCAB, (cl,), generator=gen)
            ids.append(
                torch.cat([torch.ones(p - pl, dtype=torch.long), prompt, comp, torch.ones(c - cl, dtype=torch.long)])
            )
            attn.append(torch.cat([torch.zeros(p - pl), torch.ones(pl + cl), torch.zeros(c - cl)]).long())
    return torch.stack(ids), torch.stack(attn), p


def run(model, ids, attn, start, shared: bool, slices=None):
    """Per-token log-probs, entropies, a loss using both, and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    slices = slices or [slice(0, len(ids))]
    logps, ents, total = [], [], 0.0
    weights = torch.linspace(-1, 1, ids.shape[1] - start)
    for sl in slices:
        logp, ent = completion_logprobs(
            model, ids[sl], attn[sl], start, with_entropy=True, entropy_grad=True, shared_prefix=shared
        )
        mask = attn[sl, start:].float()
        loss = ((logp * weights + 0.01 * ent) * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        logps.append(logp.detach())
        ents.append(ent.detach())
        total += float(loss.detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return torch.cat(logps), torch.cat(ents), total, grads


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative difference, by norm: ``|a - b| / max(|b|, tiny)``."""
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def assert_same(model, ids, attn, start, slices=None):
    base, shared = (run(model, ids, attn, start, s, slices) for s in (False, True))
    mask = attn[:, start:].bool()
    assert rel(shared[0][mask], base[0][mask]) < RTOL
    assert rel(shared[1][mask], base[1][mask]) < RTOL
    # padding is not fed in: its positions carry finite stand-ins that every user masks out
    assert shared[0].isfinite().all() and shared[1].isfinite().all()
    assert abs(shared[2] - base[2]) <= RTOL * max(1.0, abs(base[2]))
    assert base[3].keys() == shared[3].keys() and base[3]
    for name, grad in base[3].items():
        if grad.norm() < ZERO:  # zero in exact arithmetic (one key: the softmax is constant), noise both ways
            assert shared[3][name].norm() < ZERO, name
        else:
            assert rel(shared[3][name], grad) < RTOL, name


def test_pack_by_hand():
    # two groups: prompt [5, 6] (left-padded to 3) x 2, prompt [7, 8, 9] x 1; completions of 3
    ids = torch.tensor([[1, 5, 6, 10, 11, 12], [1, 5, 6, 13, 14, 1], [7, 8, 9, 15, 16, 17]])
    attn = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    packed = sp.pack(ids, attn, 3)
    # completion 1 has 2 tokens: its slot holds 1 (its last predicts nothing kept), no padding
    assert packed.input_ids.tolist() == [[1, 5, 6, 10, 11, 13], [7, 8, 9, 15, 16, 0]]
    assert packed.position_ids.tolist() == [[0, 0, 1, 2, 3, 2], [0, 1, 2, 3, 4, 0]]
    m = packed.mask[0, 0].int().tolist()
    assert m[3] == [0, 1, 1, 1, 0, 0]  # completion 0's first token: the prompt and itself
    assert m[5] == [0, 1, 1, 0, 0, 1]  # completion 1's first token: not completion 0
    assert m[0] == [1, 0, 0, 0, 0, 0]  # a pad that sees nothing sees itself (finite outputs)
    # row 1's tokens: first from the prompt's last column (0), then its slot's column 3; its
    # padding token reads column 0 (masked out by every user); group 1's columns start at 4
    assert packed.rows.tolist() == [[0, 1, 2], [0, 3, 0], [4, 5, 6]]
    # computed positions 12; real: prompts 2 + 3, fed completion tokens 2 + 1 + 2
    assert sp.padding_share(attn, packed) == (12, 10) and sp.padding_share(attn, None) == (18, 15)


def test_groups_are_runs_of_equal_prompts():
    ids = torch.tensor([[1, 2], [1, 2], [3, 4], [1, 2]])
    group, first = sp.groups(ids, torch.ones_like(ids))
    assert group.tolist() == [0, 0, 1, 2] and first.tolist() == [0, 2, 3]


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("attention", [NAME, "sdpa"])
def test_tiny_default_matches_rows(checkpointing, attention):
    model = tiny_default(attention).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids, attn, start = batch([7, 12, 4], g=4, c_lens=[5, 9, 1, 3])
    assert_same(model, ids, attn, start)


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("attention", [NAME, "sdpa"])
def test_small_llama_with_lora_matches_rows(checkpointing, attention):
    model = small_llama(attention=attention).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids, attn, start = batch([9, 3, 14], g=3, c_lens=[6, 2, 8])
    assert_same(model, ids, attn, start)


def test_lora_reference_and_eager_attention_match_rows():
    model = small_llama(head_dim=16)
    model.config._attn_implementation = "eager"
    ref = AdaptersDisabled(model)
    ids, attn, start = batch([5, 10], g=4, c_lens=[4, 7])
    with torch.no_grad():
        a = completion_logprobs(ref, ids, attn, start, shared_prefix=False)[0]
        b = completion_logprobs(ref, ids, attn, start, shared_prefix=True)[0]
    mask = attn[:, start:].bool()
    assert rel(b[mask], a[mask]) < RTOL
    assert_same(model, ids, attn, start)


def test_group_of_one_and_completions_of_one_token():
    model = tiny_default()
    ids, attn, start = batch([6, 9], g=1, c_lens=[4, 2])
    assert_same(model, ids, attn, start)  # nothing shared: the unshared path itself
    with torch.no_grad():  # packing groups of one, forced, is exact too
        rows, _ = lp.row_logits(model, ids, attn, start)
        packed = sp.pack(ids, attn, start)
        logits = lp.shared_logits(model, packed)
    mask = attn[:, start:].bool()
    assert rel(sp.gather_rows(logits, packed)[mask], rows[mask]) < RTOL
    ids, attn, start = batch([6, 9, 3], g=3, c_lens=[1])
    assert_same(model, ids, attn, start)


def test_micro_batches_that_split_a_group():
    model = tiny_default()
    ids, attn, start = batch([8, 5, 11], g=4, c_lens=[3, 6, 2, 5])
    base = run(model, ids, attn, start, False)
    split = run(model, ids, attn, start, True, [slice(0, 5), slice(5, 7), slice(7, 12)])
    mask = attn[:, start:].bool()
    assert rel(split[0][mask], base[0][mask]) < RTOL and rel(split[1][mask], base[1][mask]) < RTOL
    # each micro-batch's loss is its own mean: compare micro-batch by micro-batch
    assert_same(model, ids, attn, start, [slice(0, 5), slice(5, 7), slice(7, 12)])


def test_an_unverified_model_falls_back_with_one_log_line(caplog):
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = tiny_default()
            self.config = SimpleNamespace(model_type="gpt2")

        def forward(self, **kw):
            assert kw["attention_mask"].dim() == 2  # never the packed 4-D mask
            return self.inner(**kw)

    sp.LOGGED_FALLBACKS.clear()
    ids, attn, start = batch([4, 6], g=3, c_lens=[3])
    with caplog.at_level(logging.WARNING, logger="grpoflow.rl.shared_prefix"):
        for _ in range(3):
            completion_logprobs(Plain(), ids, attn, start)
    lines = [r for r in caplog.records if "falling back" in r.message]
    assert len(lines) == 1 and "gpt2" in lines[0].message


def test_sliding_window_and_flash_attention_fall_back():
    model = tiny_default()
    assert sp.unsupported(model) is None
    model.config.use_sliding_window = True
    assert "sliding" in sp.unsupported(model)
    model.config.use_sliding_window = False
    model.config._attn_implementation = "flash_attention_2"
    assert "flash_attention_2" in sp.unsupported(model)


@settings(max_examples=6, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 10), min_size=1, max_size=3),
    g=st.integers(1, 4),
    c_lens=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    cut=st.integers(1, 12),
    seed=st.integers(0, 100),
)
def test_property_random_shapes(prompts, g, c_lens, cut, seed):
    ids, attn, start = batch(prompts, g, c_lens, seed=seed)
    cut = min(cut, len(ids))
    slices = [slice(0, cut), slice(cut, len(ids))] if cut < len(ids) else None
    assert_same(_PROPERTY_MODEL, ids, attn, start, slices)


_PROPERTY_MODEL = small_llama(lora=False, head_dim=16)


def test_packed_reduction_over_many_chunks(monkeypatch):
    model = tiny_default()
    ids, attn, start = batch([5, 8, 3], g=3, c_lens=[4, 2, 6])
    monkeypatch.setattr(lp, "_CHUNK_BYTES", 1)  # one packed group (and one row) per chunk
    assert_same(model, ids, attn, start)


def _same_layout(a: sp.Layout, b: sp.Layout) -> bool:
    tensors = all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("group", "first", "fed"))
    hosts = all(getattr(a, f) == getattr(b, f) for f in ("fed_per_row", "group_of_row", "prompt_tokens"))
    return tensors and hosts and a.right_padded == b.right_padded


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    g=st.integers(1, 4),
    c_lens=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    lo=st.integers(0, 15),
    size=st.integers(1, 16),
    left_padded_completion=st.booleans(),
    seed=st.integers(0, 100),
)
def test_a_slice_of_the_batchs_rows_is_the_layout_its_own_read_gives(
    prompts, g, c_lens, lo, size, left_padded_completion, seed
):
    """Rows read once for the batch, sliced for a micro-batch (a group split across two included),
    give the layout a read of the micro-batch alone gives: the passes need no read of their own."""
    ids, attn, start = batch(prompts, g, c_lens, seed=seed)
    if left_padded_completion:  # a row whose completion is not right-padded: pack must refuse the batch
        attn[0, start:] = attn[0, start:].flip(0)
    rows, n = sp.read_rows(ids, attn, start), len(ids)
    sl = slice(min(lo, n - 1), min(lo, n - 1) + size)
    assert _same_layout(sp.layout(ids[sl], attn[sl], start, rows[sl]), sp.layout(ids[sl], attn[sl], start))
    assert _same_layout(sp.layout(ids, attn, start, rows), sp.layout(ids, attn, start))


def test_rows_of_another_batch_are_refused():
    ids, attn, start = batch([3, 2], 2, [2, 3])
    with pytest.raises(ValueError, match="rows of 2 sequences for a batch of 4"):
        sp.layout(ids, attn, start, sp.read_rows(ids[:2], attn[:2], start))
    with pytest.raises(ValueError, match="a run of consecutive rows"):
        sp.read_rows(ids, attn, start)[::2]
