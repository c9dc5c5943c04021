from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.evaluation.accuracy import majority_answer, pass_at_k, standard_error


@settings(max_examples=200)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_the_combinatorial_formula(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_hand_values_and_errors():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_majority_vote():
    assert majority_answer(["3", "4", "3", None]) == "3"
    assert majority_answer(["4", "3"]) == "4"  # tie: first seen
    assert majority_answer([None, ""]) is None


def test_standard_error_hand_values():
    # [1, 0, 0, 1]: mean 0.5, sample variance (4 * 0.25) / 3 = 1/3, se = sqrt(1/3 / 4) = 0.288675
    assert standard_error([1.0, 0.0, 0.0, 1.0]) == pytest.approx(0.2886751346)
    # 240 prompts, 45 right: the binomial sqrt(p (1 - p) / n) up to the n / (n - 1) correction
    p = 45 / 240
    assert standard_error([1.0] * 45 + [0.0] * 195) == pytest.approx((p * (1 - p) / 239) ** 0.5)
    assert standard_error([0.7]) == 0.0 and standard_error([]) == 0.0


@settings(max_examples=200)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=60), st.floats(0, 1))
def test_standard_error_is_shift_invariant_and_shrinks_with_copies(values, shift):
    se = standard_error(values)
    assert standard_error([v + shift for v in values]) == pytest.approx(se, abs=1e-9)
    # the same per-prompt scores seen four times over: the spread is the same, the error smaller
    assert standard_error(values * 4) <= se + 1e-12
    assert 0.0 <= se <= 0.5 / (len(values) - 1) ** 0.5 + 1e-9  # scores in [0, 1]: std <= 0.5 * sqrt(n / (n - 1))


def test_an_examples_greedy_flag_and_its_sampled_count_both_survive_the_merge():
    from tasks.evaluate import example_outputs

    greedy = [{"id": "a", "completion": "#### 3", "reference": "3", "correct": True}]
    sampled = [{"id": "a", "reference": "3", "samples": ["#### 3", "#### 4"], "samples_correct": 1, "pass@2": 1.0}]
    (row,) = example_outputs(greedy, sampled)
    assert (row["correct"], row["samples_correct"], row["samples"]) == (True, 1, ["#### 3", "#### 4"])
    # True == 1 in Python: the old overwrite would pass a plain equality check
    with pytest.raises(ValueError, match=r"differ on \['correct'\]"):
        example_outputs(greedy, [{"id": "a", "correct": 1}])
    with pytest.raises(ValueError, match=r"differ on \['id'\]"):
        example_outputs(greedy, [{"id": "b"}])


class _Canned:
    """A rollout engine that answers each prompt with its canned samples, in order (a fake around
    sampled_metrics: the engine itself is tested in test_rollout)."""

    def __init__(self, samples: dict[str, list[str]]):
        self.samples = samples

    def generate(self, prompts, n, sampling, seed):
        from types import SimpleNamespace

        return SimpleNamespace(texts=[t for p in prompts for t in self.samples[p][:n]])


class _Plain:
    def prompt(self, question: str) -> str:
        return question


def _exact(texts, rows):
    return [float(t == f"#### {r['reference_answer']}") for t, r in zip(texts, rows)]


def test_sampled_pass_at_1_is_the_mean_share_of_right_samples_and_pass_at_k_and_the_vote_agree():
    from grpoflow.evaluation.accuracy import sampled_metrics
    from grpoflow.rollout import Sampling
    from tasks.evaluate import canonical

    rows = [{"id": "a", "prompt": "a", "reference_answer": "3"}, {"id": "b", "prompt": "b", "reference_answer": "5"}]
    engine = _Canned({"a": ["#### 3", "#### 4", "#### 3", "#### 3"], "b": ["#### 1", "#### 5", "#### 2", "#### 2"]})
    r = sampled_metrics(engine, rows, _exact, canonical, _Plain(), n=4, k=2, sampling=Sampling(1.0, 1.0, 8))
    # a: 3 of 4 right, b: 1 of 4. pass@1 = (0.75 + 0.25) / 2; se = sqrt(((.25)^2 * 2) / 1 / 2) = 0.25
    assert (r.pass_at_1, r.pass_at_1_stderr) == (pytest.approx(0.5), pytest.approx(0.25))
    # pass@2: a 1 - C(1,2)/C(4,2) = 1; b 1 - C(3,2)/C(4,2) = 0.5
    assert (r.pass_at_k, r.pass_at_k_stderr) == (pytest.approx(0.75), pytest.approx(0.25))
    # the vote over the first 2 samples: a ["3", "4"] -> "3" (tie, first seen) right; b ["1", "5"] -> "1" wrong
    assert r.maj_at_k == 0.5
    assert [o["samples_correct"] for o in r.outputs] == [3, 1]


def test_a_sets_scores_hold_pass_at_k_and_the_vote_only_where_k_asks_and_greedy_only_where_run():
    from grpoflow.evaluation.accuracy import EvalResult, SampledResult
    from tasks.evaluate import set_scores

    sampled = SampledResult(0.5, 0.75, 0.5, [], 0.25, 0.2)
    assert set_scores(sampled, None, 1) == {"pass@1": 0.5, "pass@1_se": 0.25}
    both = set_scores(sampled, EvalResult(0.4, [], 0.1), 2)
    assert both == {
        **{"pass@1": 0.5, "pass@1_se": 0.25, "pass@2": 0.75, "pass@2_se": 0.2, "maj@2": 0.5},
        **{"greedy": 0.4, "greedy_se": 0.1},
    }
    assert "maj@2" not in set_scores(SampledResult(0.5, 0.75, None, []), None, 2)  # code: nothing to vote on
