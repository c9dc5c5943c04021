"""Code reward: the share of a code row's tests that a completion's code passes.

Rows come in two shapes (see :func:`program_for`): MBPP rows, whose ``tests`` are asserts run against the
completion's code alone, and HumanEval rows (with ``entry_point``), whose completion continues the row's
``prompt`` (a signature and docstring): the body only, or the whole function again.

The code is untrusted and runs in :mod:`verifiers.sandbox`; each test is checked separately, by a judge
process the code cannot reach (see the sandbox's docstring for what crosses between them). A HumanEval
row's tests call the prompt's helpers as the judge defines them from the row (:func:`trusted_setup`),
not as the completion's program does.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Sequence
from typing import ClassVar

from verifiers.catalog import BUILTIN_TASKS
from verifiers.check import MUTANT, Case
from verifiers.limits import Limits
from verifiers.mutants import mutants
from verifiers.registry import Row, Verifier, register
from verifiers.sandbox import SandboxUnavailable, run_batch, run_tests

__all__ = [
    "CodeVerifier",
    "extract_code",
    "mutants",
    "program_for",
    "score_code",
    "score_code_batch",
    "score_programs",
    "trusted_setup",
]

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
    programs = [extract_code(c) if isinstance(c, str) else c for c in completions]
    return score_programs(programs, tests_per_row, limits, workers=workers, allow_unsandboxed=allow_unsandboxed)


def score_programs(
    programs: Sequence[object],
    tests_per_row: Sequence[Sequence[str]],
    limits: Limits = Limits(),
    *,
    setups: Sequence[str] | None = None,
    workers: int | None = None,
    allow_unsandboxed: bool | None = None,
) -> list[float]:
    """Share of each row's tests that its program (code as is, nothing extracted) passes; 0 for a
    program that is not a str. ``setups``: per row, trusted code the judge runs before the tests
    (:func:`trusted_setup`). Same errors as :func:`score_code_batch`."""
    if len(programs) != len(tests_per_row):
        raise ValueError(f"completions has {len(programs)} rows but tests_per_row has {len(tests_per_row)}")
    if setups is not None and len(setups) != len(programs):
        raise ValueError(f"completions has {len(programs)} rows but setups has {len(setups)}")
    for i, tests in enumerate(tests_per_row):
        if isinstance(tests, str) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"row {i}: field 'tests' must be a non-empty list of str, got {tests!r:.80}")
    runnable = [i for i, p in enumerate(programs) if isinstance(p, str)]
    items = [(str(programs[i]), list(tests_per_row[i]), setups[i] if setups else "") for i in runnable]
    scores = [0.0] * len(programs)
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


def program_for(completion: str, row: Row) -> str:
    """The program a completion stands for on ``row``: its code (:func:`extract_code`), after the row's
    ``prompt`` when the row is a HumanEval one (has ``entry_point``).

    The prompt holds the imports, helpers, signature and docstring; a body-only completion (indented)
    finishes that function, and a whole-function completion defines it again, which replaces the
    docstring-only one. Scoring and the gate both build programs here, so they cannot disagree.
    """
    code = extract_code(completion)
    if row.get("entry_point"):
        return f"{row.get('prompt') or ''}\n{code}"
    return code


def trusted_setup(row: Row) -> str:
    """What the judge runs before a HumanEval row's tests: the row's ``prompt`` less the entry point's own
    definition (its imports, constants and helper functions, e.g. HumanEval/38's ``encode_cyclic``).

    The tests call those helpers as well as the entry point (``candidate(encode_cyclic(s)) == s``). Taken
    from the completion's program, a completion could redefine them (``encode_cyclic`` as the identity)
    and pass with a wrong answer; run by the judge from the trusted row, they replace the completion's
    names for the tests, while the completion's code still sees its own. Empty for an MBPP row. Raises
    ValueError naming the row when the prompt is not Python.
    """
    entry_point, prompt = row.get("entry_point"), row.get("prompt")
    if not entry_point or not isinstance(prompt, str):
        return ""
    tree, source = _parse_prompt(prompt, row)
    lines = source.splitlines(keepends=True)
    for node in reversed(tree.body):  # from the end, so that earlier line numbers stay valid
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            del lines[first : node.end_lineno]
    return "".join(lines)


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


def _parse_prompt(prompt: str, row: Row) -> tuple[ast.Module, str]:
    """The prompt's syntax tree, and the source it is of: the prompt as it is, or, for one that ends in the
    entry point's bare signature, with a ``pass`` body (that definition is dropped anyway)."""
    error: SyntaxError | None = None
    for source in (prompt, prompt.rstrip() + "\n    pass\n"):
        try:
            return ast.parse(source), source
        except SyntaxError as exc:
            error = error or exc
    assert error is not None
    raise ValueError(f"row {row.get('id')!r}: field 'prompt' is not Python ({error.msg}, line {error.lineno})")


def row_tests(row: Row) -> list[str]:
    """The tests a code row carries (``tests``); ValueError naming the row when it has none."""
    tests = row.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError(
            f"row {row.get('id')!r}: field 'tests' must be a non-empty list of str (a code task needs tests)"
        )
    if row.get("entry_point") and not isinstance(row.get("prompt"), str):
        raise ValueError(f"row {row.get('id')!r}: a row with 'entry_point' needs its 'prompt' (the signature)")
    trusted_setup(row)  # a prompt that is not Python is the row's problem, reported here
    return tests


def solution_cases(row: Row) -> list[Case]:
    """The row's reference solution, which must pass, and each of its :func:`mutants`, which must fail."""
    solution = row.get("solution")
    if not isinstance(solution, str) or not solution.strip():
        return []
    cases = [Case(solution, row, True, "gold:canonical")]
    cases += [Case(program, row, False, f"{MUTANT}{kind}") for kind, program in mutants(solution)]
    return cases


@register
class CodeVerifier(Verifier):
    """The share of each row's tests that the completion's program (:func:`program_for`) passes, run in
    the sandbox with the run's ``sandbox`` limits, ``sandbox.workers`` checks at a time. A completion is
    right only when it passes every test (:meth:`accepts`)."""

    name = "code"
    tasks: ClassVar[frozenset[str]] = BUILTIN_TASKS[name]  # stated once, in verifiers/catalog.py

    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """Share of each row's tests passed; 0 for a row without tests (the gate reports those)."""
        usable = [i for i, row in enumerate(rows) if not self.check_rows([row])]
        programs = [program_for(c, rows[i]) if isinstance(c := completions[i], str) else c for i in usable]
        setups = [trusted_setup(rows[i]) for i in usable]
        got = score_programs(programs, [rows[i]["tests"] for i in usable], self.sandbox, setups=setups)
        scores = [0.0] * len(completions)
        for i, s in zip(usable, got):
            scores[i] = s
        return scores

    def accepts(self, score: float) -> bool:
        """Right only when every test passed: a program that fails one test is wrong, however many it passes."""
        return score >= 1 - 1e-9

    def check_rows(self, rows: Sequence[Row]) -> list[tuple[int, str]]:
        """Rows without a non-empty list of tests, or HumanEval rows without their prompt."""
        problems = []
        for i, row in enumerate(rows):
            try:
                row_tests(row)
            except ValueError as exc:
                problems.append((i, str(exc)))
        return problems

    def gate_cases(self, rows: Sequence[Row]) -> list[Case]:
        """The self-test: each usable code row's reference solution passes and its mutants fail; correct
        code passes and wrong, broken, hostile and reward-hacking code fails (:data:`CODE_CASES`)."""
        code_rows = [row for row in rows if row.get("task", "math") in self.tasks and not self.check_rows([row])]
        cases = [case for row in code_rows for case in solution_cases(row)]
        return cases + [
            Case(code, {"id": f"self_test_{kind}", "tests": tests}, expected, kind)
            for code, tests, expected, kind in CODE_CASES
        ]
