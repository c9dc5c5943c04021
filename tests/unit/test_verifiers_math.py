import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verifiers
from verifiers.extract import extract_answer
from verifiers.math import check_reference, plain_number, score, score_batch


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("#### 1,000", "1000"),
        ("#### 1000", "1,000"),
        ("The answer is 1/2.", "0.5"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("so \\boxed{0.5}", "\\frac{1}{2}"),
        ("#### $18", "18"),
        ("The answer is 18.0", "18"),
        ("The answer is 50%", "0.5"),
        ("She has 3 apples, then 5. The answer is: 8 apples.", "8"),
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("lots of work ... so 42", "42"),  # last-number fallback
        ("#### -7", "-7"),
    ],
)
def test_equivalent_forms_score_one(completion, reference):
    assert score(completion, reference) == 1.0


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("#### 1001", "1000"),
        ("#### 7", "-7"),
        ("The answer is 1/3.", "0.5"),
        ("\\boxed{19}", "18"),
        ("#### 81", "18"),
        ("", "18"),
        ("no numbers at all", "18"),
        ("#### 180", "18"),
    ],
)
def test_wrong_answers_score_zero(completion, reference):
    assert score(completion, reference) == 0.0


def test_marked_answer_beats_later_numbers():
    assert extract_answer("#### 12\nChecked in 3 steps.") == "12"
    assert extract_answer("The answer is 5. Verified with 7 examples.") == "5"
    assert extract_answer("no marker 3 and 4", fallback_last_number=False) is None
    assert score("no marker but 18", "18", fallback_last_number=False) == 0.0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["18", "0.5", "\\frac{1}{2}", "1000"]))
def test_never_raises_and_returns_zero_or_one(text, reference):
    assert score(text, reference) in (0.0, 1.0)


def test_non_string_completion_scores_zero():
    assert score(None, "1") == 0.0  # type: ignore[arg-type]


def test_unparseable_reference_is_an_error_at_validation():
    check_reference("1,234")
    check_reference("\\frac{3}{4}")
    for bad in ("", "   ", "\\frac{"):
        with pytest.raises(ValueError):
            check_reference(bad)


def test_plain_number_fast_path():
    assert plain_number("1,234.50") == plain_number("1234.5")
    assert plain_number("$18") == plain_number("18")
    assert plain_number("1/2") is None and plain_number("50%") is None and plain_number("1,23") is None


def test_batch_matches_single_scoring_inline_and_in_processes():
    completions = [f"#### {i}" for i in range(40)] + [f"The answer is {i}/2" for i in range(80)] + ["junk"]
    references = [str(i if i % 3 else i + 1) for i in range(40)] + [str(i / 2) for i in range(80)] + ["1"]
    expected = [score(c, r) for c, r in zip(completions, references)]
    assert score_batch(completions, references, workers=1) == expected
    assert score_batch(completions, references, workers=2) == expected  # 80 slow cases: process pool
    with pytest.raises(ValueError, match="references"):
        score_batch(["a"], [])


def test_registry_names_and_unknown_name():
    assert {"math", "format", "code"} <= set(verifiers.names())
    assert verifiers.get("math") is score
    with pytest.raises(KeyError, match="unknown verifier"):
        verifiers.get("maths")


def test_format_verifier():
    fmt = verifiers.get("format")
    assert fmt("step\n#### 12") == 1.0
    assert fmt("step\n#### 1,200\n\n") == 1.0
    assert fmt("\\boxed{12}") == 1.0
    assert fmt("The answer is 12.") == 0.0
    assert fmt("#### 12\nmore") == 0.0
    assert fmt("") == 0.0 and fmt(None) == 0.0  # type: ignore[arg-type]
