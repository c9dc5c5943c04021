"""Verifiers are reached only through the registry: by name, with their own typed options, one
batch interface, and each passes its own gate."""

import pytest

import verifiers
from verifiers.check import validate
from verifiers.sandbox import isolation_available

MATH_ROWS = [{"id": "a", "reference_answer": "1,234", "solution": "1000+234=1234\n#### 1,234"},
             {"id": "b", "reference_answer": "0.5", "solution": "1/2 = 0.5\n#### 0.5"}]


def test_names_create_and_unknown_names():
    assert {"math", "format", "code"} <= set(verifiers.names())
    assert isinstance(verifiers.create("math"), verifiers.Verifier)
    with pytest.raises(KeyError, match="unknown verifier 'maths'"):
        verifiers.create("maths")


def test_options_are_typed_and_checked():
    strict = verifiers.create("math", {"fallback_last_number": False})
    assert strict.score(["so 1234 it is", "#### 1234"], [MATH_ROWS[0]] * 2) == [0.0, 1.0]
    assert verifiers.create("math").score(["so 1234 it is"], [MATH_ROWS[0]]) == [1.0]
    with pytest.raises(ValueError, match="fallback_lastnumber"):
        verifiers.create("math", {"fallback_lastnumber": False})
    with pytest.raises(ValueError):
        verifiers.create("format", {"anything": 1})  # a verifier without options takes none


@pytest.mark.parametrize("name", ["math", "format", "code"])
def test_every_verifier_passes_its_own_gate(name):
    if name == "code" and not isolation_available():
        pytest.skip("namespaces cannot be created here")
    v = verifiers.create(name)
    result = validate(v.score, v.gate_cases(MATH_ROWS))
    assert result.precision == 1.0 and result.recall == 1.0, result.confusions


def test_rows_a_verifier_cannot_use_are_named():
    assert verifiers.create("math").check_rows([{"reference_answer": ""}, MATH_ROWS[0]]) == [(0, "reference answer '' is empty")]
    assert [i for i, _ in verifiers.create("code").check_rows([{"id": "x", "tests": ["assert 1"]}, {"id": "y"}])] == [1]
