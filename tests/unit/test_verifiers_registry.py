"""Verifiers are reached only through the registry: by name, with their own typed options, the tasks
they judge, their own rule for a right answer, one batch interface, and each passes its own gate."""

import pytest

import verifiers
from verifiers.check import validate
from verifiers.sandbox import isolation_available

MATH_ROWS = [
    {"id": "a", "reference_answer": "1,234", "solution": "1000+234=1234\n#### 1,234"},
    {"id": "b", "reference_answer": "0.5", "solution": "1/2 = 0.5\n#### 0.5"},
]


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
    result = validate(v.score, v.gate_cases(MATH_ROWS), accepts=v.accepts)
    assert result.precision == 1.0 and result.recall == 1.0, result.confusions


def test_rows_a_verifier_cannot_use_are_named():
    assert verifiers.create("math").check_rows([{"reference_answer": ""}, MATH_ROWS[0]]) == [
        (0, "reference answer '' is empty")
    ]
    assert [i for i, _ in verifiers.create("code").check_rows([{"id": "x", "tests": ["assert 1"]}, {"id": "y"}])] == [1]


def test_each_verifier_names_its_tasks_and_its_acceptance():
    assert {n: verifiers.create(n).tasks for n in ("math", "format", "code")} == {
        "math": frozenset({"math"}),
        "format": frozenset({"math"}),
        "code": frozenset({"code"}),
    }
    math, code = verifiers.create("math"), verifiers.create("code")
    assert math.accepts(0.5) and not math.accepts(0.49)  # the default
    assert code.accepts(1.0) and not code.accepts(0.99)  # every test must pass


def test_a_built_in_verifiers_tasks_are_stated_once_in_the_catalog():
    from verifiers.catalog import BUILTIN, BUILTIN_TASKS

    for name in BUILTIN:  # the class reads its row (the same object), never states its tasks again
        assert type(verifiers.create(name)).tasks is BUILTIN_TASKS[name], name


def test_a_verifier_without_tasks_is_refused():
    class Untasked(verifiers.Verifier):
        name = "untasked"

        def score(self, completions, rows):
            return [0.0] * len(completions)

        def gate_cases(self, rows):
            return []

    with pytest.raises(TypeError, match="must set tasks"):
        verifiers.register(Untasked)
    assert "untasked" not in verifiers.names()


@pytest.mark.skipif(not isolation_available(), reason="namespaces cannot be created here")
def test_the_code_gate_on_code_rows_judges_with_the_verifiers_own_accepts():
    row = {
        "id": "c",
        "task": "code",
        "solution": "def sq(x):\n    return x * x",
        "tests": ["assert sq(3) == 9", "assert sq(1) == 1"],
    }  # x // x passes one test of two
    v = verifiers.create("code")
    cases = v.gate_cases([row, *MATH_ROWS])
    strict = validate(v.score, cases, accepts=v.accepts)
    assert (strict.precision, strict.recall, strict.mutant_kill_rate) == (1.0, 1.0, 1.0), strict.confusions
    lax = validate(v.score, cases)  # at 0.5, the half-right mutant would pass as right
    assert [c["kind"] for c in lax.confusions] == ["mutant:swapped_operator"] and lax.mutant_kill_rate < 1
