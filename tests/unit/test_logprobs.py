"""The training loop's parts, on hand-made inputs."""

from unittest import mock

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.rl import logprobs
from grpoflow.rl.logprobs import ChosenLogprob, completion_logprobs


class Bigram(torch.nn.Module):
    """A model whose log-probs are known: logits depend on the previous token only."""

    def __init__(self, vocab=5):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab))

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        logits = self.table[input_ids]
        return type("Out", (), {"logits": logits[:, -logits_to_keep:] if logits_to_keep else logits})()


def test_completion_logprobs_match_a_hand_computation():
    model = Bigram()
    ids = torch.tensor([[0, 3, 1, 2, 4]])  # prompt [0, 3], completion [1, 2, 4]
    logp, ent = completion_logprobs(model, ids, torch.ones_like(ids), 2, with_entropy=True)
    table = torch.log_softmax(model.table, -1)
    expected = [table[3, 1], table[1, 2], table[2, 4]]
    assert torch.allclose(logp[0], torch.stack(expected))
    assert torch.allclose(ent[0, 0], -(table[3].exp() * table[3]).sum())


def test_chunked_logprobs_and_entropy_equal_a_full_log_softmax(monkeypatch):
    import grpoflow.rl.logprobs as lp

    model = Bigram(vocab=7)
    ids = torch.randint(0, 7, (9, 12))
    attn = torch.ones_like(ids)
    full = torch.log_softmax(model.table[ids][:, 3:-1], -1)
    expected = full.gather(-1, ids[:, 4:].unsqueeze(-1)).squeeze(-1)
    monkeypatch.setattr(lp, "_CHUNK_BYTES", 2 * 8 * 7 * 4)  # two rows at a time: five chunks
    logp, ent = lp.completion_logprobs(model, ids, attn, 4, with_entropy=True)
    assert torch.allclose(logp, expected, atol=1e-6)
    assert torch.allclose(ent, -(full.exp() * full).sum(-1), atol=1e-6)
    logp.sum().backward()  # the gradient flows through the chunks
    assert model.table.grad is not None and torch.isfinite(model.table.grad).all()


@settings(max_examples=25, deadline=None)
@given(
    p=st.integers(1, 9),
    v=st.integers(2, 11),
    n=st.integers(1, 4),
    t=st.integers(1, 5),
    chunk_rows=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_the_chosen_logprob_node_equals_autograd_through_log_softmax(p, v, n, t, chunk_rows, seed):
    """Forward, entropies and the gradient of the fused node against log_softmax and a gather; positions
    repeat (a packed prompt's last position serves every sample of its group), chunks split the rows."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(p, v, generator=g, dtype=torch.float64).float().requires_grad_()
    positions = torch.randint(0, p, (n, t), generator=g)
    targets = torch.randint(0, v, (n, t), generator=g)
    upstream = torch.randn(n, t, generator=g)
    with mock.patch.object(logprobs, "_CHUNK_BYTES", chunk_rows * v * 4):
        logp, entropy = ChosenLogprob.apply(logits, positions, targets, True)
        (logp * upstream).sum().backward()
    ours = logits.grad.clone()
    logits.grad = None
    table = torch.log_softmax(logits, -1)
    want = table[positions, targets]
    (want * upstream).sum().backward()
    assert torch.allclose(logp, want, atol=1e-6) and torch.allclose(logits.grad, ours, atol=1e-6)
    assert torch.allclose(entropy, -(table.exp() * table).sum(-1).detach()[positions], atol=1e-5)


def test_the_chosen_logprob_gradient_by_hand():
    """One position, vocabulary 2, logits (0, ln 3): softmax (1/4, 3/4); d logp(token 0) / d logits = (3/4, -3/4)."""
    logits = torch.tensor([[0.0, float(torch.log(torch.tensor(3.0)))]], requires_grad=True)
    logp, entropy = ChosenLogprob.apply(logits, torch.tensor([[0]]), torch.tensor([[0]]), False)
    logp.sum().backward()
    assert entropy is None and torch.allclose(logp, torch.log(torch.tensor([[0.25]])))
    assert torch.allclose(logits.grad, torch.tensor([[0.75, -0.75]]))
