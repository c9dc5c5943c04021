"""The training loop's parts, on hand-made inputs."""

import torch

from grpoflow.rl.logprobs import completion_logprobs


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
