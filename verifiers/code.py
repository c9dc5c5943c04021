"""Code reward: the share of MBPP-style ``assert`` tests that a completion's code passes.

The code is untrusted and runs in :mod:`verifiers.sandbox`; each test is checked separately.
"""

from __future__ import annotations

import re

from typing import Sequence

from verifiers.check import Case
from verifiers.registry import Row, Verifier, register
from verifiers.sandbox import Limits, SandboxUnavailable, run_tests

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The last fenced block (a ``python`` one preferred), else the whole completion."""
    blocks = _FENCE.findall(completion or "")
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    chosen = python or [body for _, body in blocks]
    return chosen[-1] if chosen else (completion or "")


def score_code(completion: str, tests: list[str], limits: Limits = Limits(), *, allow_unsandboxed: bool = False) -> float:
    """Fraction of ``tests`` passed. Bad code, crashes and timeouts score 0 for the tests they
    stop; a machine that cannot sandbox raises :class:`SandboxUnavailable` unless allowed."""
    if not tests:
        raise ValueError("the code verifier needs at least one test")
    if not isinstance(completion, str):
        return 0.0
    try:
        return run_tests(extract_code(completion), list(tests), limits, allow_unsandboxed=allow_unsandboxed).fraction
    except SandboxUnavailable:
        raise
    except Exception:  # a verifier must never take training down
        return 0.0


# Self-test: (completion, tests, must pass). The hostile ones must score 0 and leave the validating
# process standing.
CODE_CASES: list[tuple[str, list[str], bool, str]] = [
    ("```python\ndef add(a, b):\n    return a + b\n```", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], True, "correct"),
    ("```python\ndef add(a, b):\n    return a - b\n```", ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"],
     False, "mostly_wrong"),
    ("def add(a, b) return a + b", ["assert add(1, 2) == 3"], False, "syntax_error"),
    ("while True:\n    pass", ["assert True"], False, "infinite_loop"),
    ("import os\nwhile True:\n    os.fork()", ["assert True"], False, "fork_bomb"),
    ("x = bytearray(8 * 1024 ** 3)", ["assert True"], False, "memory_bomb"),
    ("import os\nos._exit(0)", ["assert True"], False, "early_exit"),
    ("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)", ["assert True"], False, "network"),
]


def row_tests(row: Row) -> list[str]:
    """The asserts a code row carries (``tests``)."""
    tests = row.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"row {row.get('id')!r} has no list of tests (a code task needs `tests`)")
    return tests


@register
class CodeVerifier(Verifier):
    """The share of a row's tests that the completion's code passes, run in the sandbox."""

    name = "code"

    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """Share of each row's tests passed (0 for a row without tests: the gate reports those)."""
        out = []
        for completion, row in zip(completions, rows):
            try:
                tests = row_tests(row)
            except ValueError:
                out.append(0.0)
                continue
            out.append(score_code(completion, tests, self.sandbox))
        return out

    def check_rows(self, rows: Sequence[Row]) -> list[tuple[int, str]]:
        """Rows without a list of tests."""
        problems = []
        for i, row in enumerate(rows):
            try:
                row_tests(row)
            except ValueError as exc:
                problems.append((i, str(exc)))
        return problems

    def gate_cases(self, rows: Sequence[Row]) -> list[Case]:
        """The self-test: correct code passes; wrong, broken and hostile code fails."""
        return [Case(code, {"id": f"self_test_{kind}", "tests": tests}, expected, kind)
                for code, tests, expected, kind in CODE_CASES]
