"""The format verifier: the same verdicts as before, in linear time."""

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers.format import last_line, score

BOUND_S = 0.050


def _previous_score(completion: str) -> float:
    """The implementation before the linear-time rewrite (quadratic on a line of unclosed boxes)."""
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    if not lines:
        return 0.0
    last = lines[-1]
    final_line = re.match(r"^####\s*-?\$?\d[\d,]*(?:\.\d+)?\s*$", last)
    return float(bool(final_line or re.search(r"\\boxed\{.+\}", last)))


def _best_time(text: str) -> float:
    """Best of three CPU times of this thread: a quadratic scan is slow every time, and the thread's own
    CPU time leaves out the time other processes hold the cores (wall time is load, not work)."""
    times = []
    for _ in range(3):
        start = time.thread_time()
        score(text)
        times.append(time.thread_time() - start)
    return min(times)


PIECES = [
    "####",
    " ",
    "\n",
    "\r\n",
    "\r",
    "\x0b",
    "\u2028",
    "\x1c",
    "\t",
    "-",
    "$",
    "1",
    "0",
    ",",
    ".",
    "\\boxed{",
    "{",
    "}",
    "x",
    "answer",
]


@settings(max_examples=1500)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_same_verdict_as_the_previous_implementation(completion):
    assert score(completion) == _previous_score(completion)


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 20_000,  # every '\boxed{' rescanned the rest of the line before
        "#### " + "1," * 50_000 + "x",
        "x\n" * 50_000,
        " " * 100_000,
    ],
)
def test_hostile_completions_are_linear(text):
    assert _best_time(text) < BOUND_S


def test_last_line_splits_where_splitlines_does():
    assert last_line("a\r\n#### 1\u2028 b \n\n") == "b"
    assert last_line(" \n \t") == ""
    assert score("steps\u2028#### 12") == 1.0
