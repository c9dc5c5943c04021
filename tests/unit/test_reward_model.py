"""The Bradley-Terry reward model: loss, pairs, split, normaliser, and a tiny model trained on a
trivially separable preference (chosen completions end in "good", rejected ones in "bad")."""

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.config import EngineConfig, ModelConfig, PromptConfig
from grpoflow.data.pairs import Pair, encode_pair, encode_pairs, pairs_from_samples, split_pairs
from grpoflow.evaluation.pairwise import pairwise_eval
from grpoflow.models.reward_model import RewardModelScorer, load_reward_model, reward_model_from_policy
from grpoflow.rl.rewards import RunningNorm
from grpoflow.trainers.reward_model import bradley_terry_loss, train_reward_model

WORDS = "apple river stone cloud green paper metal light sound water field north quiet sharp".split()


def _loss(c, r):
    return float(bradley_terry_loss(torch.tensor(c, dtype=torch.float64), torch.tensor(r, dtype=torch.float64)))


# ------------------------------------------------------------------------------------------- loss


def test_bradley_terry_loss_by_hand():
    assert _loss([0.0], [0.0]) == pytest.approx(math.log(2))
    assert _loss([3.0], [1.0]) == pytest.approx(math.log(1 + math.exp(-2)))
    assert _loss([0.0, 3.0], [0.0, 1.0]) == pytest.approx((math.log(2) + math.log(1 + math.exp(-2))) / 2)
    # Stable at extreme margins: about -m for a large negative one, not inf.
    assert _loss([-1000.0], [0.0]) == pytest.approx(1000.0)
    assert _loss([1000.0], [0.0]) == 0.0


@given(
    st.floats(-50, 50, allow_nan=False),
    st.floats(-50, 50, allow_nan=False),
    st.floats(0.01, 20, allow_nan=False),
)
def test_bradley_terry_loss_falls_as_the_margin_grows_and_is_symmetric(base, margin, more):
    assert _loss([base + margin + more], [base]) < _loss([base + margin], [base])
    # Depends on the margin only; and P(c > r) + P(r > c) = 1, i.e. exp(-l(c, r)) + exp(-l(r, c)) = 1.
    assert _loss([base + margin], [base]) == pytest.approx(_loss([margin], [0.0]), abs=1e-9)
    assert math.exp(-_loss([margin], [0.0])) + math.exp(-_loss([0.0], [margin])) == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------- norm


batches = st.lists(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=20), min_size=1, max_size=6)


@given(batches)
def test_running_norm_matches_numpy_over_the_concatenation(groups):
    norm = RunningNorm()
    seen: list[float] = []
    for group in groups:
        out = norm.update_and_normalize(torch.tensor(group, dtype=torch.float64))
        seen += group
        mean, std = np.mean(seen), np.std(seen)
        assert norm.count == len(seen)
        assert norm.mean == pytest.approx(mean, abs=1e-9 * (1 + abs(mean)))
        assert norm.std == pytest.approx(std, rel=1e-6, abs=1e-6)
        expect = (np.array(group) - mean) / (std + norm.eps)
        np.testing.assert_allclose(out.numpy(), expect, rtol=1e-6, atol=1e-6)


def test_running_norm_resumes_from_its_state():
    first, second = RunningNorm(), RunningNorm()
    x, y = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([8.0, -3.0])
    first.update_and_normalize(x)
    second.load_state_dict(first.state_dict())
    assert torch.equal(first.update_and_normalize(y), second.update_and_normalize(y))
    assert first.state_dict() == second.state_dict()
    assert RunningNorm().update_and_normalize(torch.tensor([5.0])).tolist() == [0.0]


# ---------------------------------------------------------------------------------------- pairs


def _row(i, solution="2+2=4\n#### 4"):
    return {"id": f"r{i}", "prompt": f"question {i}", "solution": solution}


def test_pairs_from_samples_picks_the_first_best_and_worst():
    rows = [_row(0), _row(1), _row(2)]
    samples = [["a", "b", "c", "d"], ["e", "f"], ["g", "h"]]
    scores = [[0.0, 1.0, 1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    pairs = pairs_from_samples(rows, samples, scores, gold=False)
    assert pairs == [Pair("question 0", "b", "a", "r0:best-worst", "self")]  # ties: first occurrence
    # all-equal groups give no best-worst pair; gold pairs only where the worst sample is wrong
    gold = pairs_from_samples(rows, samples, scores, gold=True)
    assert [p.id for p in gold] == ["r0:best-worst", "r0:gold-worst", "r2:gold-worst"]
    assert gold[1] == Pair("question 0", "2+2=4\n#### 4", "a", "r0:gold-worst", "gold")


def test_the_gold_rule():
    def gold_ids(solution, texts, values):
        return [p.id for p in pairs_from_samples([_row(0, solution)], [texts], [values], gold=True)]

    assert gold_ids("sol", ["x", "y"], [1.0, 1.0]) == []  # every sample right: only style to learn
    assert gold_ids("sol", ["x", "y"], [0.5, 0.5]) == ["r0:gold-worst"]  # every sample equally wrong
    assert gold_ids("sol", ["x", "y"], [1.2, 1.0]) == ["r0:best-worst", "r0:gold-worst"]  # below the best
    assert gold_ids("sol", ["x", "y"], [1.2, 1.2]) == []
    assert gold_ids("", ["x", "y"], [0.0, 0.0]) == []  # no solution
    assert gold_ids("sol", ["sol", "sol "], [0.0, 0.0]) == []  # the same text on both sides
    with pytest.raises(ValueError, match="2 samples but 1 scores"):
        pairs_from_samples([_row(0)], [["a", "b"]], [[1.0]], gold=True)


def test_split_pairs_keeps_a_prompts_pairs_together_and_is_deterministic():
    pairs = [Pair(f"prompt {i // 2}", "c", "r", f"{i}", "self") for i in range(400)]
    train, heldout = split_pairs(pairs, 0.25, seed=0)
    assert len(train) + len(heldout) == 400 and 50 < len(heldout) < 150
    assert not {p.prompt for p in train} & {p.prompt for p in heldout}
    assert split_pairs(list(reversed(pairs)), 0.25, seed=0)[1] == list(reversed(heldout))
    assert split_pairs(pairs, 0.25, seed=1)[1] != heldout  # the seed draws another split


# ---------------------------------------------------------------------------------------- model


def _pairs(rng, n, start=0):
    def words(k):
        return " ".join(rng.choice(WORDS) for _ in range(k))

    return [
        Pair(f"rate {words(3)} {i}", f"{words(2)} good", f"{words(2)} bad", f"p{i}", "self")
        for i in range(start, start + n)
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny causal LM policy saved to a folder, its tokenizer, and a prompter."""
    from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer
    from grpoflow.models.prompting import Prompter

    rng = random.Random(0)
    texts = [f"{p.prompt}\nAnswer:\n{p.chosen} {p.rejected}" for p in _pairs(rng, 60)]
    tok = train_tokenizer(texts, vocab_size=300)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_length=64)
    policy = build_tiny_model(cfg, tok, seed=0)
    path = save_pretrained(policy, tok, tmp_path_factory.mktemp("rm") / "policy")
    return policy, tok, Prompter(tok), path


def _train(tiny, seed, out=None):
    from grpoflow.models.engine import build_engine
    from grpoflow.models.modeling import save_pretrained

    policy, tok, prompter, _ = tiny
    rng = random.Random(seed)
    train, dropped = encode_pairs(_pairs(rng, 64), prompter, 64)
    heldout, _ = encode_pairs(_pairs(rng, 48, start=1000), prompter, 64)
    assert dropped == 0
    torch.manual_seed(seed)
    model = reward_model_from_policy(policy, tok)
    engine = build_engine(model, EngineConfig(lr=1e-2, micro_batch_size=16, bf16=False), batch_size=16)
    logs = []
    losses = train_reward_model(
        engine, train, epochs=4, batch_size=16, pad_id=tok.pad_token_id, seed=seed, on_step=lambda s, m: logs.append(m)
    )
    if out is not None:
        save_pretrained(model, tok, out)
    return losses, logs, pairwise_eval(model, heldout, tok.pad_token_id, batch_size=16)


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """An RM trained on the separable preference, saved; with its losses, step logs and held-out eval."""
    out = tmp_path_factory.mktemp("rm") / "reward_model"
    return (*_train(tiny, 0, out), out)


def test_an_rm_starts_from_the_policy_with_a_zero_head(tiny):
    policy, tok, _, path = tiny
    for source in (policy, path):
        rm = reward_model_from_policy(source, tok)
        assert rm.config.num_labels == 1 and rm.config.pad_token_id == tok.pad_token_id
        assert torch.equal(rm.model.embed_tokens.weight, policy.model.embed_tokens.weight)
        assert not rm.score.weight.any()


def test_encode_pair_appends_the_end_of_turn_and_skips_long_pairs(tiny):
    _, tok, prompter, _ = tiny
    pair = Pair("rate apple", "x good", "y bad", "p", "self")
    chosen, rejected = encode_pair(pair, prompter, 64)
    prompt = prompter.prompt_ids("rate apple")
    assert chosen[: len(prompt)] == prompt == rejected[: len(prompt)]
    assert chosen[-1] == rejected[-1] == tok.eos_token_id
    assert encode_pair(pair, prompter, len(prompt) + 1) is None
    assert encode_pairs([pair, pair], prompter, len(prompt) + 1) == ([], 2)


def test_a_tiny_rm_learns_a_separable_preference(trained):
    losses, logs, result, _ = trained
    assert losses[0] == pytest.approx(math.log(2), abs=1e-6)  # zero head: every score 0 at first
    assert losses[-1] < 0.2 and len(losses) == logs[0]["steps"] == 16
    assert set(logs[0]) == {"loss", "accuracy", "lr", "steps"}
    assert result.summary["pairs"] == 48 == len(result.margins)
    assert result.summary["accuracy"] > 0.9
    assert result.summary["p10"] <= result.summary["p50"] <= result.summary["p90"]
    assert result.summary["margin_mean"] == pytest.approx(float(np.mean(result.margins)))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_separable_preference_is_learned_on_other_seeds(tiny, seed):
    _, _, result = _train(tiny, seed)
    assert result.summary["accuracy"] > 0.9


def test_load_reward_model_refuses_what_is_not_one(tiny, tmp_path):
    from transformers import AutoModelForSequenceClassification

    _, tok, _, policy_path = tiny
    with pytest.raises(ValueError, match=r"is not a reward model: its config says Qwen2ForCausalLM; .*num_labels=1"):
        load_reward_model(policy_path)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_reward_model(tmp_path)
    two = AutoModelForSequenceClassification.from_pretrained(policy_path, num_labels=2)
    two.save_pretrained(tmp_path / "two")
    with pytest.raises(ValueError, match="Qwen2ForSequenceClassification with num_labels=2"):
        load_reward_model(tmp_path / "two")


def test_the_scorer_is_frozen_and_batching_does_not_change_a_score(trained):
    out = trained[-1]
    rng = random.Random(7)
    pairs = _pairs(rng, 5, start=2000)
    rows = [{"prompt": p.prompt} for p in pairs for _ in (0, 1)]
    completions = [c for p in pairs for c in (p.chosen, p.rejected + " and more words")]
    scorer = RewardModelScorer(out, PromptConfig(), batch_size=4, device="cpu")
    batched = scorer(completions, rows)
    one_by_one = [scorer([c], [r])[0] for c, r in zip(completions, rows)]
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    assert all(c > r for c, r in zip(batched[::2], batched[1::2]))  # it learned: good over bad
    assert not any(p.requires_grad for p in scorer.model.parameters()) and not scorer.model.training
    # An input past the limit keeps its end: the completion, and the prompt's last tokens.
    short = RewardModelScorer(out, PromptConfig(), batch_size=4, device="cpu", max_length=6)
    assert short.encode("x good", rows[0]) == scorer.encode("x good", rows[0])[-6:]
    assert len(short(completions[:2], rows[:2])) == 2
