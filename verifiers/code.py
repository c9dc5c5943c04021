"""Code reward: the share of MBPP-style ``assert`` tests that a completion's code passes.

The code is untrusted and runs in :mod:`verifiers.sandbox`; each test is checked separately, by a judge
process the code cannot reach (see the sandbox's docstring for what crosses between them).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from verifiers.check import Case
from verifiers.registry import Row, Verifier, register
from verifiers.sandbox import Limits, SandboxUnavailable, run_batch, run_tests

log = logging.getLogger(__name__)

# After an opening ```: an optional language tag, then the end of the line. Possessive quantifiers
# (Python 3.11) never give characters back, so a fence followed by 60k spaces costs one pass, not 60k².
_FENCE_HEADER = re.compile(r"[ \t]*+([\w+-]*+)[ \t]*+\n")
_PYTHON_TAGS = ("python", "py", "python3")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every ``(language, body)`` fenced block: ``` + optional tag + newline, up to the next ```.

    One left-to-right scan with ``str.find``: linear in ``len(text)`` whatever the input.
    """
    blocks = []
    pos = 0
    while (start := text.find("```", pos)) >= 0:
        header = _FENCE_HEADER.match(text, start + 3)
        if header is None:
            pos = start + 1  # not an opening fence; a longer run of backticks may hold one
            continue
        end = text.find("```", header.end())
        if end < 0:
            break  # unterminated: no later ``` can open a block either
        blocks.append((header.group(1), text[header.end() : end]))
        pos = end + 3
    return blocks


def extract_code(completion: str) -> str:
    """The last fenced block (a ``python`` one preferred), else the whole completion."""
    blocks = fenced_blocks(completion or "")
    python = [body for lang, body in blocks if lang.lower() in _PYTHON_TAGS]
    chosen = python or [body for _, body in blocks]
    return chosen[-1] if chosen else (completion or "")


def score_code(
    completion: str, tests: list[str], limits: Limits = Limits(), *, allow_unsandboxed: bool | None = None
) -> float:
    """Fraction of ``tests`` passed. Bad code, crashes and timeouts score 0 for the tests they
    stop; a machine that cannot sandbox raises :class:`SandboxUnavailable` unless allowed
    (``allow_unsandboxed``, when given, overrides ``limits.allow_unsandboxed``)."""
    if not tests:
        raise ValueError("the code verifier needs at least one test")
    if not isinstance(completion, str):
        return 0.0
    try:
        return run_tests(extract_code(completion), list(tests), limits, allow_unsandboxed=allow_unsandboxed).fraction
    except SandboxUnavailable:
        raise
    except Exception:  # a verifier must never take training down
        log.exception("code verifier: scoring failed; reward 0")
        return 0.0


def score_code_batch(
    completions: Sequence[object],
    tests_per_row: Sequence[Sequence[str]],
    limits: Limits = Limits(),
    *,
    workers: int | None = None,
    allow_unsandboxed: bool | None = None,
) -> list[float]:
    """:func:`score_code` for each row, ``workers`` (default ``limits.workers``) sandboxes at a time.

    Raises ValueError naming the row and field for a row without tests or with non-string tests.
    """
    if len(completions) != len(tests_per_row):
        raise ValueError(f"completions has {len(completions)} rows but tests_per_row has {len(tests_per_row)}")
    for i, tests in enumerate(tests_per_row):
        if isinstance(tests, str) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"row {i}: field 'tests' must be a non-empty list of str, got {tests!r:.80}")
    runnable = [i for i, c in enumerate(completions) if isinstance(c, str)]
    items = [(extract_code(str(completions[i])), list(tests_per_row[i])) for i in runnable]
    scores = [0.0] * len(completions)
    try:
        results = run_batch(items, limits, workers=workers, allow_unsandboxed=allow_unsandboxed)
    except SandboxUnavailable:
        raise
    except Exception:  # as score_code: a verifier must never take training down
        log.exception("code verifier: batch scoring failed; reward 0 for %d rows", len(items))
        return scores
    for i, result in zip(runnable, results):
        scores[i] = result.fraction
    return scores


# Self-test: (completion, tests, must pass). The hostile ones must score 0 and leave the validating
# process standing; each of the reward hacks scored 1.0 against a harness that ran the tests in the
# completion's own interpreter.
CODE_CASES: list[tuple[str, list[str], bool, str]] = [
    (
        "```python\ndef add(a, b):\n    return a + b\n```",
        ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        True,
        "correct",
    ),
    (
        "```python\ndef add(a, b):\n    return a - b\n```",
        ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"],
        False,
        "mostly_wrong",
    ),
    ("def add(a, b) return a + b", ["assert add(1, 2) == 3"], False, "syntax_error"),
    ("while True:\n    pass", ["assert True"], False, "infinite_loop"),
    ("import os\nwhile True:\n    os.fork()", ["assert True"], False, "fork_bomb"),
    ("x = bytearray(8 * 1024 ** 3)", ["assert True"], False, "memory_bomb"),
    ("import os\nos._exit(0)", ["assert True"], False, "early_exit"),
    ("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)", ["assert True"], False, "network"),
    ("import builtins\nbuiltins.exec = lambda *a, **k: None", ["assert False"], False, "exec_replaced"),
    (
        "import builtins\n_c = builtins.compile\nbuiltins.compile = lambda s, f, m, *a, **k: _c('pass', f, m)",
        ["assert False"],
        False,
        "compile_replaced",
    ),
    (
        "import os, sys\nfr = sys._getframe(1)\nfor i in range(9):\n"
        "    print('%s:%d:pass' % (fr.f_locals.get('nonce'), i))\nsys.stdout.flush()\nos._exit(0)",
        ["assert False"],
        False,
        "forged_verdict",
    ),
    (
        "class A:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return A()",
        ["assert add(1, 2) == 4", "assert add(0, 0) == 1"],
        False,
        "always_equal",
    ),
    (
        "def sorted(*a):\n    return 0\ndef add(a, b):\n    return [a]",
        ["assert sorted(add(1, 2)) == sorted([3])"],
        False,
        "shadowed_builtin",
    ),
    ("import os, signal\nos.kill(1, signal.SIGKILL)", ["assert False"], False, "kill_judge"),
    ("while True:\n    print('x' * 65536)", ["assert True"], False, "infinite_output"),
]


def row_tests(row: Row) -> list[str]:
    """The asserts a code row carries (``tests``); ValueError naming the row when it has none."""
    tests = row.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError(
            f"row {row.get('id')!r}: field 'tests' must be a non-empty list of str (a code task needs tests)"
        )
    return tests


@register
class CodeVerifier(Verifier):
    """The share of each row's tests that the completion's code passes, run in the sandbox with the
    run's ``sandbox`` limits, ``sandbox.workers`` checks at a time."""

    name = "code"

    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """Share of each row's tests passed; 0 for a row without tests (the gate reports those)."""
        usable = [i for i, row in enumerate(rows) if not self.check_rows([row])]
        scores = [0.0] * len(completions)
        got = score_code_batch([completions[i] for i in usable], [rows[i]["tests"] for i in usable], self.sandbox)
        for i, s in zip(usable, got):
            scores[i] = s
        return scores

    def check_rows(self, rows: Sequence[Row]) -> list[tuple[int, str]]:
        """Rows without a non-empty list of tests."""
        problems = []
        for i, row in enumerate(rows):
            try:
                row_tests(row)
            except ValueError as exc:
                problems.append((i, str(exc)))
        return problems

    def gate_cases(self, rows: Sequence[Row]) -> list[Case]:
        """The self-test: correct code passes; wrong, broken, hostile and reward-hacking code fails."""
        return [
            Case(code, {"id": f"self_test_{kind}", "tests": tests}, expected, kind)
            for code, tests, expected, kind in CODE_CASES
        ]
