"""Final-answer extraction: what it finds, and that it stays linear on hostile completions."""

import time
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpoflow.data.text import normalize_text
from verifiers import format as format_verifier
from verifiers import math as math_verifier
from verifiers.extract import MAX_ANSWER_CHARS, extract_answer, last_boxed, last_number

# The pieces a review found the old regexes choking on; repeated and mixed, up to 100k characters.
PIECES = [
    "0",
    "1",
    "7",
    "42",
    "1000",
    ",",
    " ",
    "\n",
    "####",
    "answer is",
    "\\boxed{",
    "{",
    "}",
    "$",
    "\\frac",
    "%",
    "/",
    ".",
]
MAX_CHARS = 100_000
BOUND_S = 0.050  # the review's bound per call; the implementation is ~1-5 ms at 100k characters


@st.composite
def hostile_completions(draw) -> str:
    """Runs of a short unit of pieces (``"answer is" + "\\n" * 40000``) and mixtures of such runs."""
    runs = draw(
        st.lists(
            st.tuples(
                st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join),
                st.sampled_from([1, 3, 50, 2_000, 20_000, MAX_CHARS]),
            ),
            min_size=1,
            max_size=6,
        )
    )
    return "".join(unit * count for unit, count in runs)[:MAX_CHARS]


def _best_time(fn, text: str) -> float:
    """Best of three CPU times of this thread: a quadratic scan is slow every time, and the thread's own
    CPU time leaves out the time other processes hold the cores (wall time is load, not work)."""
    times = []
    for _ in range(3):
        start = time.thread_time()
        fn(text)
        times.append(time.thread_time() - start)
    return min(times)


def _math_verify_spy(op: str, *args: str) -> bool:
    """Stands in for math.score's one math-verify call, whose cost is bounded by CHECK_BUDGET_S
    (test_verifiers_math) but not by 50 ms: its parser takes 50-500 ms on a new bracketed string."""
    assert all(len(a) <= math_verifier.MAX_SYMBOLIC_CHARS + 3 for a in args), "math-verify got a long input"
    return False


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=hostile_completions(), reference=st.sampled_from(["18", "0.5", "\\frac{1}{2}", "1000"]))
def test_hostile_completions_are_scored_in_linear_time(text, reference):
    normalize_text("é")  # builds the normaliser's Unicode table (once) outside the timing
    calls = [
        ("math.score", lambda t: math_verifier.score(t, reference)),
        ("format.score", format_verifier.score),
        ("extract_answer", extract_answer),
        ("normalize_text", normalize_text),
    ]
    with mock.patch.object(math_verifier, "check", _math_verify_spy):
        for name, fn in calls:
            elapsed = _best_time(fn, text)
            assert elapsed < BOUND_S, f"{name} took {elapsed * 1000:.1f} ms on {len(text)} characters: {text[:80]!r}"


@pytest.mark.parametrize(
    "text",
    [
        "answer is" + "\n" * 40_000,  # the review's case: 23 s before
        "The answer is:" + " " * 50_000 + "x",
        "####" + " \n" * 40_000,
        "\\boxed{" * 20_000,
        "{" * MAX_CHARS,
        "1 " * 50_000,
        "%" * MAX_CHARS,
        "$ " * 50_000,
        "answer is " * 10_000,
    ],
)
def test_review_cases_are_fast(text):
    assert _best_time(extract_answer, text) < BOUND_S


def test_last_marker_with_an_answer_wins():
    assert extract_answer("#### 5\nthen #### 6") == "6"
    assert extract_answer("#### 72\n####") == "72"  # an empty last marker falls back to the one before
    assert extract_answer("The answer is 5, so the answer is 6") == "6"
    assert extract_answer("The answer is:\n\n  42 apples") == "42"  # colon and blank lines skipped
    assert extract_answer("The ANSWER   is 9") == "9"


@pytest.mark.parametrize(
    "completion, answer",
    [
        ("#### (x+1)^2", "(x+1)^2"),
        ("The answer is x \\in [1,2).", "x \\in [1,2)"),
        ("The answer is -\\frac{1}{2}.", "-\\frac{1}{2}"),  # the sign was lost before
        ("The answer is \\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}"),
        ("The answer is x = 4", "x = 4"),
        ("The answer is **42**.", "42"),
        ("#### 72 apples", "72"),  # a number and a unit: the number
        ("The answer is 5 m.", "5"),
        ("The answer is 5. Verified with 7 examples.", "5"),
        ("The answer is 2xy", "2"),  # a two-letter run reads as prose
        ("The answer is ≈ 42", "42"),  # not ASCII math: the first number
        ("answer is 42, because", "42"),
    ],
)
def test_a_marked_answer_is_the_whole_expression_or_its_first_number(completion, answer):
    assert extract_answer(completion) == answer


@pytest.mark.parametrize(
    "text, number",
    [
        ("so 42.", "42"),
        ("total 42,", "42"),
        ("50%.", "50%"),
        ("it is -7", "-7"),
        ("$18 each", "$18"),
        ("1/2 cup", "1/2"),
        ("3.5 kg", "3.5"),
        ("48/2 = 24", "24"),
        ("1,000 apples", "1,000"),
        ("no digits", None),
    ],
)
def test_last_number(text, number):
    assert last_number(text) == number


def test_last_boxed_balances_braces_and_stops_at_the_limit():
    assert last_boxed("\\boxed{1} and \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\fbox{ 7 }") == "7"
    assert last_boxed("\\boxed 5 and later {6}") is None  # the brace must follow the command
    assert last_boxed("\\boxed{" + "1" * MAX_ANSWER_CHARS + "}") == "1" * MAX_ANSWER_CHARS
    assert last_boxed("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}") is None
    assert last_boxed("\\boxed{unclosed") is None
