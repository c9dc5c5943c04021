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
