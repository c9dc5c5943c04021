from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.evaluation.accuracy import majority_answer, pass_at_k


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
