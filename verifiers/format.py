"""Format reward: does the completion end with its answer in the required final form?

Linear in the completion's length: the last line is found with ``str.rfind`` and checked with an
anchored regex or plain ``find``. (The previous ``\\\\boxed\\{.+\\}`` search rescanned the rest of the
line from every ``\\boxed{``: quadratic on a line of unclosed boxes.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from verifiers.catalog import BUILTIN_TASKS
from verifiers.check import Case, malformed_cases
from verifiers.registry import Row, Verifier, register

_FINAL_LINE = re.compile(r"####\s*-?\$?\d[\d,]*(?:\.\d+)?\s*")
_BOXED = "\\boxed{"
# What str.splitlines() splits on.
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped; '' when there is none."""
    text = text.strip()
    start = max(text.rfind(brk) for brk in _LINE_BREAKS) + 1
    return text[start:].strip()


def _has_boxed(line: str) -> bool:
    """Whether ``line`` holds ``\\boxed{`` with at least one character before a later ``}``."""
    at = line.find(_BOXED)
    return at >= 0 and line.rfind("}") > at + len(_BOXED)


def score(completion: str, reference: object = None) -> float:
    """1.0 when the last non-empty line is ``#### <number>`` (or holds a ``\\boxed{}``), else 0.0."""
    if not isinstance(completion, str):
        return 0.0
    last = last_line(completion)
    if not last:
        return 0.0
    return float(bool(_FINAL_LINE.fullmatch(last) or _has_boxed(last)))


@register
class FormatVerifier(Verifier):
    """Whether a completion ends with its answer in the required final form (``#### n`` or ``\\boxed{}``)."""

    name = "format"
    tasks: ClassVar[frozenset[str]] = BUILTIN_TASKS[name]  # stated once, in verifiers/catalog.py

    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """1.0 per completion whose last non-empty line is a final-answer line."""
        return [score(c) for c in completions]

    def gate_cases(self, rows: Sequence[Row]) -> list[Case]:
        """A '#### x' last line passes; an answer in prose or followed by more text does not."""
        cases: list[Case] = []
        for row in rows:
            ref = row["reference_answer"]
            if row.get("solution"):
                cases.append(Case(row["solution"], row, True, "format:gold_solution"))
            cases.append(Case(f"Some steps.\n#### {ref}", row, True, "format:final_line"))
            cases.append(Case(f"The answer is {ref}.", row, False, "format:prose_answer"))
            cases.append(Case(f"#### {ref}\nand then more text", row, False, "format:text_after_answer"))
        return cases + malformed_cases(rows)
