import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers import math as math_verifier
from verifiers import math_checks
from verifiers.extract import extract_answer
from verifiers.math import check_reference, latex_answer, plain_number, score, score_batch


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


@settings(max_examples=300)
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


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("\\boxed{x^2+2x+1}", "(x+1)^2"),  # the review's case: never parsed before
        ("#### (x+1)^2", "x^2+2x+1"),
        ("\\boxed{[1, 2)}", "[1,2)"),
        ("\\boxed{\\{2,1\\}}", "\\{1,2\\}"),
        ("\\boxed{\\sqrt{18}}", "3\\sqrt{2}"),
        ("\\boxed{\\frac{\\pi}{2}}", "\\pi/2"),
        ("\\boxed{0.75}", "3/4"),
        ("The answer is \\frac{\\sqrt{3}}{2}.", "\\frac{\\sqrt{3}}{2}"),
        ("\\boxed{\\$18}", "18"),
        ("\\boxed{50\\%}", "0.5"),
    ],
)
def test_symbolic_answers_score_one(completion, reference):
    assert score(completion, reference) == 1.0


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("\\boxed{2x}", "2"),  # bare '2x' parsed to 2 before
        ("\\boxed{2\\pi}", "2"),
        ("\\boxed{x^2+1}", "(x+1)^2"),
        ("\\boxed{(1, 2)}", "[1,2)"),
        ("The answer is -\\frac{1}{2}.", "1/2"),  # the sign was dropped before
    ],
)
def test_wrong_symbolic_answers_score_zero(completion, reference):
    assert score(completion, reference) == 0.0


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        ("x = 4", "4", 1.0),  # a variable named, then the value
        ("2+2 = 4", "4", 1.0),  # a true equation whose every side is the answer
        ("5 = 4", "4", 0.0),  # the review's case: scored 1 before
        ("4 = 5", "4", 0.0),
        ("a = 5 = 4", "4", 0.0),
        ("x \\le 4", "4", 0.0),  # an inequality is not a value
        ("x = x+1", "x+1", 0.0),  # x is the gold's own variable, not a name for the answer
        ("y = 3+2x", "y = 2x+3", 1.0),  # a relation as gold: math-verify decides
        ("x \\in [1,2)", "[1,2)", 1.0),
    ],
)
def test_relations_pass_only_when_they_state_the_answer(answer, gold, expected):
    assert score(f"\\boxed{{{answer}}}", gold) == expected


def test_symbolic_references_are_accepted_and_nonsense_is_not():
    for ref in ("(x+1)^2", "x^2+2x+1", "[1,2)", "\\{1,2\\}", "\\sqrt{2}", "\\pi", "3/4", "y = 2x+3", "50\\%"):
        check_reference(ref)
    for bad in ("hello world?", "x" * (math_verifier.MAX_SYMBOLIC_CHARS + 1), "{1}}"):
        with pytest.raises(ValueError, match="reference answer"):
            check_reference(bad)


def test_latex_answer():
    assert latex_answer("x^2+2x+1") == "$x^2+2x+1$"
    assert latex_answer("\\$18.") == "$18$"
    assert latex_answer("50\\%") == "$50$%" and latex_answer("50 %") == "$50$%"
    assert latex_answer(" $ ") == ""


SLOW_PATH_CASES = [
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("The answer is 1/2.", "0.5", 1.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("\\boxed{5 = 4}", "4", 0.0),
    ("\\boxed{\\frac{1}{3}}", "0.5", 0.0),
]


def test_scores_are_the_same_in_worker_threads():
    """math-verify's signal.alarm timeout raises off the main thread; that used to score 0 silently."""
    expected = [s for *_, s in SLOW_PATH_CASES]
    found: dict[str, list[float]] = {}
    thread = threading.Thread(target=lambda: found.update(thread=[score(c, r) for c, r, _ in SLOW_PATH_CASES]))
    thread.start()
    thread.join()
    with ThreadPoolExecutor(max_workers=3) as pool:
        pooled = list(pool.map(lambda case: score(case[0], case[1]), SLOW_PATH_CASES))
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(check_reference, "(x+1)^2").result()
        with pytest.raises(ValueError, match="cannot be parsed"):
            pool.submit(check_reference, "\\frac{").result()
    assert found["thread"] == expected
    assert pooled == expected


def test_a_checker_process_that_died_while_idle_is_replaced():
    def kill_idle_checkers_then_score() -> float:
        for checker in math_checks._pool()._idle:
            checker.proc.kill()
            checker.proc.wait()
        return score("\\boxed{\\frac{1}{2}}", "0.5")

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(score, "\\boxed{\\frac{1}{2}}", "0.5").result() == 1.0
        assert pool.submit(kill_idle_checkers_then_score).result() == 1.0


def test_a_checker_that_cannot_start_is_an_error_not_a_zero(monkeypatch):
    monkeypatch.setattr(math_checks, "_POOL", math_checks._CheckerPool(1))
    monkeypatch.setattr(math_checks.sys, "executable", "/nonexistent/python")
    with ThreadPoolExecutor(max_workers=1) as pool, pytest.raises(math_checks.VerifierUnavailable, match="cannot st"):
        pool.submit(score, "\\boxed{\\frac{1}{2}}", "0.5").result()


def test_the_budget_cuts_off_pathological_answers_and_restores_the_callers_alarm(monkeypatch):
    monkeypatch.setattr(math_checks, "CHECK_BUDGET_S", 0.3)
    assert score("\\boxed{\\frac{2}{4}}", "0.5") == 1.0  # imports and caches outside the timing
    rang: list[int] = []

    def callers_handler(signum, frame):
        rang.append(signum)

    previous = signal.signal(signal.SIGALRM, callers_handler)
    signal.setitimer(signal.ITIMER_REAL, 600)  # the caller's own pending alarm
    try:
        start = time.monotonic()
        assert score("\\boxed{10^{10^{10}}}", "5") == 0.0  # SymPy would compute a 10-billion-digit integer
        assert score("\\boxed{" + "(" * 14 + "1" + ")" * 14 + "}", "2") == 0.0  # math-verify's parser: seconds
        elapsed = time.monotonic() - start
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert elapsed < 30  # generous: the point is that it ends, not how fast
    assert 500 < remaining <= 600, "math-verify's alarm(0) used to cancel the caller's alarm"
    assert handler is callers_handler and not rang
