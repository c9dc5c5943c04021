"""The verifier self-test kit: case builders and the confusion matrix."""

from verifiers.check import Case, validate
from verifiers.format import FormatVerifier
from verifiers.math_cases import math_cases, surface_forms, wrong_answers

ROW = {"id": "r1", "reference_answer": "72", "solution": "48/2=24\n#### 72"}


def test_surface_forms_hand_cases():
    assert surface_forms("1000") == {"plain": "1000", "dollar": "$1000", "decimal_zero": "1000.0", "comma": "1,000"}
    forms = surface_forms("0.5")
    assert forms["fraction"] == "1/2" and forms["latex_frac"] == "\\frac{1}{2}" and forms["decimal_zero"] == "0.5"
    assert surface_forms("x+1") == {"plain": "x+1"}


def test_wrong_answers_differ_from_gold():
    w = wrong_answers("72")
    assert w == {
        "off_by_one_up": "73",
        "off_by_one_down": "71",
        "wrong_sign": "-72",
        "digits_swapped": "27",
        "scale_x10": "720",
        "scale_div100": "0.72",
    }
    assert "wrong_sign" not in wrong_answers("0") and "digits_swapped" not in wrong_answers("77")


def test_validate_tallies_the_confusion_matrix():
    cases = math_cases([ROW])
    always_yes = validate(lambda c, r: [1.0] * len(c), cases)
    assert always_yes.fn == 0 and always_yes.tn == 0 and always_yes.recall == 1.0
    assert always_yes.precision == always_yes.tp / len(cases) < 1
    assert always_yes.confusions and all(not c["expected"] for c in always_yes.confusions)
    never = validate(lambda c, r: [0.0] * len(c), cases)
    assert never.recall == 0.0 and never.precision == 1.0  # no positives claimed


def test_cases_carry_their_row_and_both_labels():
    for cases in (math_cases([ROW]), FormatVerifier().gate_cases([ROW])):
        assert {c.expected for c in cases} == {True, False}
        assert all(c.row is ROW for c in cases)


def test_validate_counts_a_case_accepted_by_the_given_rule():
    right, wrong = Case("right", ROW, True, "gold"), Case("wrong", ROW, False, "wrong:one_test_left")
    two_of_three = {"right": 1.0, "wrong": 2 / 3}

    def score(completions, rows):
        return [two_of_three[c] for c in completions]

    default = validate(score, [right, wrong])  # the default: a score of at least 0.5 is right
    assert (default.tp, default.fp) == (1, 1) and default.confusions[0]["id"] == "r1"
    strict = validate(score, [right, wrong], accepts=lambda s: s >= 1 - 1e-9)  # the code verifier's rule
    assert (strict.tp, strict.tn, strict.precision) == (1, 1, 1.0) and not strict.confusions
    assert strict.to_dict()["by_kind"] == {
        "gold": {"accepted": 1, "rejected": 0},
        "wrong:one_test_left": {"accepted": 0, "rejected": 1},
    }


def test_mutants_are_tallied_apart_from_the_confusion_matrix():
    # A surviving mutant is a weakness of the row's tests, not a verifier that accepts a wrong answer.
    from verifiers.check import MUTANT

    cases = [
        Case("right", ROW, True, "gold"),
        Case("killed", ROW, False, f"{MUTANT}a"),
        Case("survivor", ROW, False, f"{MUTANT}b"),
        Case("wrong", ROW, False, "wrong"),
    ]
    result = validate(lambda c, r: [0.0 if x in ("killed", "wrong") else 1.0 for x in c], cases)
    assert (result.tp, result.fp, result.tn, result.fn) == (1, 0, 1, 0)
    assert (result.mutants, result.mutants_killed, result.mutant_kill_rate) == (2, 1, 0.5)
    assert result.to_dict()["mutant_kill_rate"] == 0.5 and [c["kind"] for c in result.confusions] == [f"{MUTANT}b"]
    assert validate(lambda c, r: [1.0], [cases[0]]).mutant_kill_rate is None
