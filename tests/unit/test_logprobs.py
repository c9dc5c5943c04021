"""The training loop's parts, on hand-made inputs."""


import torch

from grpoflow.logprobs import completion_logprobs


class Bigram(torch.nn.Module):
    """A model whose log-probs are known: logits depend on the previous token only."""

    def __init__(self, vocab=5):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_completion_logprobs_match_a_hand_computation():
    model = Bigram()
    ids = torch.tensor([[0, 3, 1, 2, 4]])  # prompt [0, 3], completion [1, 2, 4]
    logp, ent = completion_logprobs(model, ids, torch.ones_like(ids), 2, with_entropy=True)
    table = torch.log_softmax(model.table, -1)
    expected = [table[3, 1], table[1, 2], table[2, 4]]
    assert torch.allclose(logp[0], torch.stack(expected))
    assert torch.allclose(ent[0, 0], -(table[3].exp() * table[3]).sum())
