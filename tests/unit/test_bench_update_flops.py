"""The update's FLOP estimate (benchmarks/bench_update_flops.py) against hand-computed values."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.bench_update_flops import computed_tokens, matmul_parameters, update_flops


def test_the_flop_estimate_is_6_n_per_token_for_body_and_head():
    # N_body 1,000 over 10 x 20 = 200 computed tokens, N_head 50 over 10 x 5 = 50 completion positions:
    # 6 * 1,000 * 200 = 1,200,000 and 6 * 50 * 50 = 15,000.
    assert update_flops(1_000, 50, 200, 50) == 1_215_000
    assert update_flops(1_000, 50, 200, 50, iterations=2) == 2_430_000


@given(st.integers(0, 10**6), st.integers(0, 10**5), st.integers(0, 10**4), st.integers(0, 10**4), st.integers(1, 4))
def test_the_estimate_is_linear_in_each_term(body, head, seq, positions, iterations):
    total = update_flops(body, head, seq, positions, iterations)
    assert total == update_flops(body, 0, seq, 0, iterations) + update_flops(0, head, 0, positions, iterations)
    assert total == iterations * update_flops(body, head, seq, positions)
    assert total % 6 == 0


@pytest.mark.parametrize("tied", [True, False])
def test_matmul_parameters_leave_the_embedding_out_and_count_the_head_once(tied):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # hidden 8, 1 layer, intermediate 16, vocab 20, 2 heads of 4, 2 KV heads. Per layer by hand:
    # q, k, v 3 x (8 x 8 + 8 bias) = 216, o 8 x 8 = 64, MLP 3 x 8 x 16 = 384, two RMSNorms 16: 680;
    # the final norm 8: N_body 688. The head: 20 x 8 = 160, tied or not.
    config = Qwen2Config(
        vocab_size=20,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=16,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    assert matmul_parameters(Qwen2ForCausalLM(config)) == (688, 160)


def test_computed_tokens_count_a_shared_prompt_once_and_padding_where_it_is_computed():
    from types import SimpleNamespace

    from tests.unit.test_shared_prefix import tiny_default

    # 2 groups x G 2, prompt 3 tokens, completions of 2 (the last one's second token is padding).
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 10, 11], [12, 13, 13, 8, 9], [12, 13, 13, 10, 1]])
    attn = torch.tensor([[1] * 5, [1] * 5, [1] * 5, [1, 1, 1, 1, 0]])
    batch, model = SimpleNamespace(ids=ids, attn=attn, start=3), tiny_default()
    # One padded row per sample: 4 x 5 tokens; the head at the 4 x 2 completion positions.
    assert computed_tokens(batch, micro=4, shared_prefix=False, model=model) == (20, 8)
    # One row per group: the prompt (3) + each completion but its last token, at its own length: group 0
    # 3 + 1 + 1 = 5, group 1 3 + 1 + 0 = 4, both rows as wide as the widest: 2 x 5; the head from the
    # prompt's last position on (3 positions): 2 x 3.
    assert computed_tokens(batch, micro=4, shared_prefix=True, model=model) == (10, 6)
    # Micro-batches of 2 hold one group each, each row as wide as its own group: 5 + 4, head 3 + 2.
    assert computed_tokens(batch, micro=2, shared_prefix=True, model=model) == (9, 5)
