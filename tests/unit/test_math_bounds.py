"""Issue #23 item 5: every math answer is decided within the budget, at bounded memory, in the
caller's process and in a pool. The screen refuses the known-hopeless answers before any SymPy;
what it lets through runs in a checker process that is killed and replaced when it overruns.

No assertion here is on a duration: the verdict, the reason and the restart count are asserted,
and a bound far above the budget (``HANG_GUARD_S``) only keeps a broken build from hanging."""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers import math as math_verifier
from verifiers import math_checker, math_checks, math_screen
from verifiers.math import MathVerifier, check_reference, judge, judge_batch, score, score_batch
from verifiers.math_cases import surface_forms
from verifiers.math_screen import screen

HANG_GUARD_S = 120.0
ROOT = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux") and Path("/proc/self/status").is_file()
TOWER = "\\boxed{10^{10^{10^{10}}}}"  # 30 s and 8.5 GB in the caller before the fix
PARENS_140 = "\\boxed{" + "(" * 140 + "1" + ")" * 140 + "}"  # 2 s of math-verify's parser
POLY_60 = "\\boxed{" + "+".join(f"{i}x" for i in range(1, 61)) + "}"


# --- the screen ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, limit",
    [
        ("10^{10^{10^{10}}}", "MAX_POWER_TOWER"),
        ("2^{2^{2^{2}}}", "MAX_POWER_TOWER"),  # height 3, though only 65536
        ("10^{10^{10}}", "MAX_NUMBER_DIGITS"),  # 10^10 digits
        ("10^10^10", "MAX_NUMBER_DIGITS"),  # the same without braces (right-associative)
        ("10**10**10", "MAX_NUMBER_DIGITS"),
        ("9^{9^{9}}", "MAX_NUMBER_DIGITS"),  # 9^9 * log10(9) = 3.7e8 digits
        ("10^{10001}", "MAX_NUMBER_DIGITS"),  # 10001 digits, one above the limit
        ("10^{-10^{7}}", "MAX_NUMBER_DIGITS"),  # tiny, but 10^7 digits as a rational
        ("\\frac{1}{10^{20000}}", "MAX_NUMBER_DIGITS"),
        ("5000!", "MAX_NUMBER_DIGITS"),  # 5000 * log10(5000) = 18495 digits (bound)
        ("99999999999!", "MAX_NUMBER_DIGITS"),
        ("\\binom{100000}{50000}", "MAX_NUMBER_DIGITS"),  # <= 2^100000: 30103 digits
        ("(x+1)^{10^{10}}", "MAX_EXPONENT"),
        ("x^{10001}", "MAX_EXPONENT"),
        ("e^{10^{10}}", "MAX_EXPONENT"),
        ("(" * 9 + "1" + ")" * 9, "MAX_NESTING_DEPTH"),
        ("\\left(" * 9 + "1" + "\\right)" * 9, "MAX_NESTING_DEPTH"),
        ("\\{" * 5 + "[" * 4 + "1" + "]" * 4 + "\\}" * 5, "MAX_NESTING_DEPTH"),
        ("+".join(["x"] * 41), "MAX_TERMS"),
        (",".join(["1"] * 41), "MAX_TERMS"),
        ("1" * 101 + "x", "MAX_LITERAL_DIGITS"),
        ("x" * 301, "MAX_SYMBOLIC_CHARS"),
    ],
)
def test_the_screen_refuses_hopeless_answers_naming_the_limit(answer, limit):
    reason = screen(answer)
    assert reason is not None and limit in reason


@pytest.mark.parametrize(
    "answer",
    [
        "x^2+2x+1",
        "(x+1)^2",
        "e^{-x^{2}}",  # a tower of height 2
        "2^{2^{10}}",  # height 2, 309 digits
        "2^{1024}",
        "10^{10000}",  # exactly MAX_NUMBER_DIGITS
        "x^{10000}",  # exactly MAX_EXPONENT
        "1000!",  # 3000 digits (bound)
        "6.02 \\times 10^{23}",
        "\\frac{\\sqrt{3}}{2}",
        "3\\sqrt{2}",
        "\\pi/2",
        "[1,2)",
        "\\{1,2\\}",
        "x \\in [1,2)",
        "y = 2x+3",
        "50\\%",
        "\\$18",
        "(" * 8 + "1" + ")" * 8,  # exactly MAX_NESTING_DEPTH
        "+".join(["x"] * 40),  # exactly MAX_TERMS
        "1" * 100,  # exactly MAX_LITERAL_DIGITS
        "\\frac12",
        "²³",
        "٣^{٣}",
        ".",
    ],
)
def test_the_screen_passes_ordinary_answers(answer):
    assert screen(answer) is None


@settings(max_examples=300)
@given(
    st.one_of(
        st.integers(-(10**30), 10**30).map(str),
        st.integers(-(10**12), 10**12).map(lambda n: f"{n:,}"),
        st.tuples(st.integers(-(10**9), 10**9), st.integers(1, 10**9)).map(lambda t: f"{t[0]}/{t[1]}"),
        st.tuples(st.integers(-(10**9), 10**9), st.integers(1, 10**9)).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
        st.decimals(-(10**20), 10**20, allow_nan=False, allow_infinity=False, places=6).map(lambda d: format(d, "f")),
        st.fractions(max_denominator=10**6).map(str),
    )
)
def test_the_screen_never_refuses_a_plain_short_number(answer):
    assert screen(answer) is None


@settings(max_examples=200)
@given(st.decimals(min_value=-(10**9), max_value=10**9, allow_nan=False, allow_infinity=False, places=4))
def test_the_screen_never_refuses_a_gold_surface_form(value):
    for form in surface_forms(format(Decimal(value), "f")).values():
        assert screen(form) is None, form


@settings(max_examples=500)
@given(st.text(max_size=400) | st.text(alphabet="0123456789^{}()[]!+-*/.,x\\frac ", max_size=300))
def test_the_screen_never_raises(text):
    assert screen(text) is None or isinstance(screen(text), str)


def test_screened_answers_score_zero_with_the_reason_and_never_reach_a_checker(monkeypatch):
    def no_checker(*args, **kwargs):
        raise AssertionError("a screened answer reached math-verify")

    monkeypatch.setattr(math_verifier, "check_many", no_checker)
    for completion, reference, limit in [
        (TOWER, "(x+1)^2", "MAX_POWER_TOWER"),
        (PARENS_140, "2", "MAX_NESTING_DEPTH"),
        (POLY_60, "(x+1)^2", "MAX_TERMS"),
        ("\\boxed{10^{10^{10}}}", "5", "MAX_NUMBER_DIGITS"),
    ]:
        verdict = judge(completion, reference)
        assert verdict.score == 0.0 and verdict.reason.startswith("screened answer") and limit in verdict.reason
    assert score_batch([TOWER] * 70, ["(x+1)^2"] * 70, workers=2) == [0.0] * 70


def test_a_reference_the_screen_refuses_is_an_error_at_validation():
    with pytest.raises(ValueError, match="refused by the math screen.*MAX_POWER_TOWER"):
        check_reference("2^{2^{2^{2}}}")
    assert MathVerifier().check_rows([{"reference_answer": "10^{10^{10}}"}, {"reference_answer": "(x+1)^2"}])[0][0] == 0


# --- the checker processes -------------------------------------------------------------------------


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _status(pid: int, field: str) -> str | None:
    """A field of /proc/<pid>/status, None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(field + ":")), None)


def _gone(pid: int) -> bool:
    state = _status(pid, "State")
    return state is None or state.startswith(("Z", "X"))  # a zombie no one reaps is no running process


def _stop(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped: the signal is only acted on once the process
    runs, and a child still blocked in its read would take in what the test writes first (under
    load it read part of the requests, and the rest then fitted in the pipe)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + HANG_GUARD_S
    while not (_status(pid, "State") or "").startswith("T"):
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.01)


def _wait_gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def own_pool(monkeypatch):
    """A checker pool of one child for this test alone (others may leave dead idle children behind)."""
    pool = math_checks._CheckerPool(1)
    monkeypatch.setattr(math_checks, "_POOL", pool)
    yield pool
    pool.close()


def _checker_pids() -> list[int]:
    pool = math_checks._pool()
    return [c.proc.pid for c in [*pool._idle, *pool._busy]]


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_an_unscreened_power_tower_stays_in_the_checker_and_its_memory_limit(monkeypatch, own_pool):
    """Before the fix this answer ran in the caller: 30 s and 8.5 GB of its memory."""
    monkeypatch.setattr(math_verifier, "_screened", lambda text: None)
    assert score("\\boxed{\\frac{1}{2}}", "0.5") == 1.0  # a warm checker, outside the measurement
    before = _peak_rss_bytes()
    start = time.monotonic()
    verdict = judge(TOWER, "(x+1)^2")
    assert time.monotonic() - start < HANG_GUARD_S
    assert verdict.score == 0.0 and verdict.reason.startswith("not verified")
    assert _peak_rss_bytes() - before < 512 << 20  # the caller grew by far less than the GBs of before
    for pid in _checker_pids():  # the child that did the work stayed under its address-space limit
        peak = _status(pid, "VmPeak")
        assert peak is None or int(peak.split()[0]) * 1024 <= math_checks.CHECKER_MEMORY_BYTES
    assert score("\\boxed{x^2+2x+1}", "(x+1)^2") == 1.0  # and the next answer is judged as ever


@pytest.mark.skipif(not LINUX, reason="stops a process with SIGSTOP")
def test_a_checker_that_stops_answering_is_killed_replaced_and_the_answer_scores_zero(monkeypatch, own_pool):
    """A child stuck in C code (where its own timer cannot interrupt it) looks like this one."""
    with ThreadPoolExecutor(max_workers=1) as pool:  # any thread: the same path
        assert pool.submit(score, "\\boxed{\\frac{1}{2}}", "0.5").result() == 1.0
    [pid] = _checker_pids()
    _stop(pid)
    budget = math_checks.CHECK_BUDGET_S
    monkeypatch.setattr(math_checks, "CHECK_BUDGET_S", 0.2)  # only to keep the test short
    start = time.monotonic()
    verdict = judge("\\boxed{x^2+2x+1}", "(x+1)^2")
    assert time.monotonic() - start < HANG_GUARD_S
    monkeypatch.setattr(math_checks, "CHECK_BUDGET_S", budget)
    assert verdict.score == 0.0 and verdict.reason.startswith("not verified: killed: no answer within")
    assert own_pool.restarts == 1
    assert _wait_gone([pid])  # the stuck child was killed, not left behind
    assert score("\\boxed{x^2+2x+1}", "(x+1)^2") == 1.0  # a fresh child judges the next answer


@pytest.mark.skipif(not LINUX, reason="stops a process with SIGSTOP, shrinks a pipe with F_SETPIPE_SZ")
def test_a_checker_that_stops_reading_cannot_block_the_caller_on_a_full_pipe(own_pool):
    """Requests are written a chunk at a time; a write into a full pipe waits only as long as a reply would."""
    import fcntl

    assert score("\\boxed{\\frac{1}{2}}", "0.5") == 1.0
    [checker] = own_pool._idle
    _stop(checker.proc.pid)
    assert checker.proc.stdin is not None
    fcntl.fcntl(checker.proc.stdin.fileno(), 1031, 4096)  # F_SETPIPE_SZ: one page
    answer = "\\boxed{x^2+2x" + " " * 250 + "+1}"  # 16 requests of about 330 bytes: more than a page
    start = time.monotonic()
    verdicts = judge_batch([answer] * 16, ["(x+1)^2"] * 16, workers=1)
    assert time.monotonic() - start < HANG_GUARD_S
    assert verdicts[0].score == 0.0 and "read no request" in verdicts[0].reason
    assert [v.score for v in verdicts[1:]] == [1.0] * 15  # the rest, judged by the replacement
    assert own_pool.restarts == 1 and _wait_gone([checker.proc.pid])


def test_a_batch_goes_on_in_order_after_a_checker_dies_in_the_middle(monkeypatch, own_pool):
    """Requests are pipelined; the ones after a failed check go to the replacement child."""
    original = math_checks._Checker.check_many
    calls: list[int] = []

    def die_on_the_third(self, lines, budget_s):
        calls.append(len(lines))
        if len(calls) == 1 and len(lines) > 3:
            done = original(self, lines[:2], budget_s)
            raise math_checks._CheckerDied("simulated death", done)
        return original(self, lines, budget_s)

    monkeypatch.setattr(math_checks._Checker, "check_many", die_on_the_third)
    completions = [f"\\boxed{{\\frac{{{i}}}{{2}}}}" for i in range(8)]
    references = [str(i / 2) if i % 3 else "7" for i in range(8)]
    verdicts = judge_batch(completions, references, workers=1)
    expected = [float(i % 3 != 0) for i in range(8)]
    expected[2] = 0.0  # the check the child died on
    assert [v.score for v in verdicts] == expected
    assert verdicts[2].reason == "not verified: killed: simulated death"
    assert calls[1] == 5 and own_pool.restarts == 1  # the rest, resubmitted in one chunk to a new child


def test_a_check_that_runs_out_of_memory_in_the_child_says_so(monkeypatch):
    def out_of_memory(op, args, budget_s):
        raise MemoryError

    monkeypatch.setattr(math_checker, "_run_check", out_of_memory)  # the child's side, run here
    assert math_checker._serve_one('["equal", 2.0, "$1$", "$1$"]') == (False, "memory")
    assert math_checker._serve_one("not json") == (False, "error")


def test_the_caller_never_imports_sympy():
    code = (
        "import sys; from verifiers.math import score, score_batch;"
        "assert score('\\\\boxed{x^2+2x+1}', '(x+1)^2') == 1.0;"
        "assert score_batch(['\\\\boxed{\\\\frac{1}{2}}'] * 70, ['0.5'] * 70, workers=2) == [1.0] * 70;"
        "print('sympy' in sys.modules, 'math_verify' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


# --- processes and threads of the caller ----------------------------------------------------------

ORDINARY = [
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("\\boxed{5 = 4}", "4", 0.0),
    ("\\boxed{\\frac{1}{3}}", "0.5", 0.0),
    ("#### 72", "72", 1.0),
]


def _score_in_pool_worker(case: tuple[str, str, float]) -> tuple[float, list[int]]:
    return score(case[0], case[1]), _checker_pids()


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_multiprocessing_pool_scores_the_same_and_leaves_no_checker_behind():
    assert score(*ORDINARY[0][:2]) == 1.0  # the parent's own checker, before the fork
    parents = _checker_pids()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        found = pool.map(_score_in_pool_worker, ORDINARY * 2)
    assert [s for s, _ in found] == [s for *_, s in ORDINARY] * 2
    theirs = sorted({p for _, pids in found for p in pids} - set(parents))
    assert theirs and _wait_gone(theirs)  # ended with the pool's workers (EOF, parent-death signal)
    assert _checker_pids() == parents and score(*ORDINARY[1][:2]) == 1.0  # the parent's pipes still work


@pytest.mark.skipif(not LINUX, reason="reads /proc")
@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_checkers_end_with_their_caller(ending):
    code = (
        "import sys, time, threading; from verifiers import math_checks; from verifiers.math import score;"
        "t = threading.Thread(target=score, args=('\\\\boxed{\\\\frac{1}{2}}', '0.5')); t.start(); t.join();"
        "print(*[c.proc.pid for c in math_checks._pool()._idle], flush=True);"
        "sys.stdin.readline()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids and not any(_gone(p) for p in pids)
        if ending == "sigkill":
            proc.kill()  # no atexit: the parent-death signal and end-of-file must do it
        else:
            proc.stdin.close()
        proc.wait(timeout=HANG_GUARD_S)
        assert _wait_gone(pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_scores_are_the_same_from_threads_with_torch_loaded():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)
    assert float(torch.ones(64, 64).matmul(torch.ones(64, 64)).sum()) == 64.0**3
    expected = [s for *_, s in ORDINARY]
    found: dict[str, list[float]] = {}
    thread = threading.Thread(target=lambda: found.update(t=[score(c, r) for c, r, _ in ORDINARY]))
    thread.start()
    thread.join(HANG_GUARD_S)
    with ThreadPoolExecutor(max_workers=3) as pool:
        pooled = list(pool.map(lambda case: score(case[0], case[1]), ORDINARY * 3))
    assert found["t"] == expected and pooled == expected * 3
    assert [score(c, r) for c, r, _ in ORDINARY] == expected  # and in the main thread


def test_batches_judge_like_single_answers_over_one_or_more_checkers():
    rows = [{"reference_answer": r} for r in ("72", "0.5", "\\frac{3}{4}", "(x+1)^2", "[1,2)", "-7") for _ in range(12)]
    cases = MathVerifier().gate_cases(rows)
    completions, refs = [c.completion for c in cases], [str(c.row["reference_answer"]) for c in cases]
    expected = [float(c.expected) for c in cases]
    assert len([c for c in completions if "\\frac" in c or "x" in c]) >= math_verifier.PARALLEL_MIN_CHECKS
    assert score_batch(completions, refs, workers=1) == expected
    assert score_batch(completions, refs, workers=2) == expected
    assert [score(c, r) for c, r in zip(completions, refs)] == expected


def test_limits_are_named_and_documented():
    for name in (
        "MAX_SYMBOLIC_CHARS",
        "MAX_LITERAL_DIGITS",
        "MAX_NESTING_DEPTH",
        "MAX_TERMS",
        "MAX_POWER_TOWER",
        "MAX_NUMBER_DIGITS",
        "MAX_EXPONENT",
    ):
        assert isinstance(getattr(math_screen, name), int) and name in (math_screen.__doc__ or "")
    for name in ("CHECK_BUDGET_S", "CHECKER_GRACE_S", "CHECKER_MEMORY_BYTES"):
        assert name in (math_checks.__doc__ or "")
