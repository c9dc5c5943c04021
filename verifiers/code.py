"""Code reward: the share of MBPP-style ``assert`` tests that a completion's code passes.

The code is untrusted and runs in :mod:`verifiers.sandbox`; each test is checked separately, by a judge
process the code cannot reach (see the sandbox's docstring for what crosses between them).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from verifiers.registry import register
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
        blocks.append((header.group(1), text[header.end():end]))
        pos = end + 3
    return blocks


def extract_code(completion: str) -> str:
    """The last fenced block (a ``python`` one preferred), else the whole completion."""
    blocks = fenced_blocks(completion or "")
    python = [body for lang, body in blocks if lang.lower() in _PYTHON_TAGS]
    chosen = python or [body for _, body in blocks]
    return chosen[-1] if chosen else (completion or "")


def score_code(completion: str, tests: list[str], limits: Limits = Limits(), *,
               allow_unsandboxed: bool | None = None) -> float:
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


def score_code_batch(completions: Sequence[object], tests_per_row: Sequence[Sequence[str]], limits: Limits = Limits(),
                     *, workers: int | None = None, allow_unsandboxed: bool | None = None) -> list[float]:
    """:func:`score_code` for each row, ``workers`` (default ``limits.workers``) sandboxes at a time.

    Raises ValueError naming the row and field for a row without tests or with non-string tests.
    """
    if len(completions) != len(tests_per_row):
        raise ValueError(f"completions has {len(completions)} rows but tests_per_row has {len(tests_per_row)}")
    for i, tests in enumerate(tests_per_row):
        if isinstance(tests, str) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"row {i}: field 'tests' must be a non-empty list of str, got {tests!r:.80}")
    runnable = [i for i, c in enumerate(completions) if isinstance(c, str)]
    items = [(extract_code(completions[i]), list(tests_per_row[i])) for i in runnable]
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


@register("code")
def score(completion: str, tests: list[str]) -> float:
    """The registered code verifier: :func:`score_code` with the default limits."""
    return score_code(completion, tests)
