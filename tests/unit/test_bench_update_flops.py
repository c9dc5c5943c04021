"""The update's FLOP estimate (benchmarks/bench_update_flops.py) against hand-computed values."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.bench_update_flops import matmul_parameters, update_flops


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
