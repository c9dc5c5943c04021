"""Final-answer correctness for math word problems.

Plain numbers (``1,000``, ``$18``, ``18.0``) are compared exactly on a fast path; everything else
(fractions, percentages, LaTeX, symbolic answers such as ``x^2+2x+1``, ``[1,2)``, ``\\{1,2\\}``,
``\\sqrt{2}``, ``\\pi/2``) goes to math-verify as inline math, gold first:
``verify(parse(gold), parse(pred))`` (https://github.com/huggingface/Math-Verify, README).
math-verify costs about 1 ms for a simple or repeated answer and 10-500 ms for a new bracketed one (its
ANTLR parser), so :func:`score_batch` spreads the slow path over processes.

Relations: an answer that is an equation counts only when it is really the answer: ``x = 4`` (a
variable named, then the value) and ``2+2 = 4`` (every side equals the gold) pass for gold ``4``;
``5 = 4``, ``x \\le 4`` and ``a = 5 = 4`` do not. When the gold itself is a relation, math-verify decides.

Time: math-verify's own timeout is ``signal.alarm``, which works only in the main thread (elsewhere
it raises, and the old blanket ``except`` turned that into a silent 0). Here every check gets
:data:`CHECK_BUDGET_S` from an interval timer in the main thread; a caller on any other thread has
its check run by a small pool of child processes (their main threads take the same timer), so the
result is the same in any thread and a pathological answer (``10^{10^{10}}``) cannot hang a caller.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal, InvalidOperation
from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from verifiers.check import Case
from verifiers.extract import extract_answer
from verifiers.math_cases import math_cases
from verifiers.math_checks import VerifierUnavailable, check
from verifiers.registry import Row, Verifier, register

MAX_SYMBOLIC_CHARS = 300  # a non-numeric answer (or reference) longer than this is never parsed
_PLAIN = re.compile(r"^-?\$?\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$|^-?\$?\s?\.\d+$")
_log = logging.getLogger(__name__)
_T = TypeVar("_T")


def plain_number(text: str) -> Decimal | None:
    """``Decimal`` of a plain number such as ``-1,234.50`` or ``$18``; None for anything else."""
    text = text.strip().rstrip(".")
    if not _PLAIN.match(text):
        return None
    try:
        return Decimal(text.replace(",", "").replace("$", "").replace(" ", ""))
    except InvalidOperation:
        return None


def latex_answer(answer: str) -> str:
    """An answer as one inline-math string for math-verify: ``x^2+2x+1`` -> ``$x^2+2x+1$``.

    math-verify reads LaTeX only between delimiters (bare ``x^2+2x+1`` parses to nothing, and bare
    ``2x`` to ``2``); currency dollars and a closing full stop are dropped; a final percent sign goes
    after the closing ``$``, where math-verify reads it as a percentage.
    """
    body = answer.replace("\\$", "").replace("$", "").replace("\n", " ").strip().rstrip(".").rstrip()
    percent = ""
    for sign in ("\\%", "%"):
        if body.endswith(sign):
            body, percent = body[: -len(sign)].rstrip(), "%"
            break
    return f"${body}${percent}" if body else ""


# --- the verifier ----------------------------------------------------------------------------------


def check_reference(reference: str) -> None:
    """Raise ``ValueError`` when a reference answer cannot be understood: no free rewards."""
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError(f"reference answer {reference!r} is empty")
    if plain_number(reference) is not None:
        return
    if len(reference) > MAX_SYMBOLIC_CHARS:
        raise ValueError(
            f"reference answer {reference[:60]!r}... has {len(reference)} characters, "
            f"above the {MAX_SYMBOLIC_CHARS} the math verifier parses"
        )
    # no string fallback: a string math-verify could not read as math must not pass as one
    if not check("parses", latex_answer(reference)):
        raise ValueError(f"reference answer {reference!r} cannot be parsed by math-verify")


def _could_be_math(answer: str) -> bool:
    """Cheap tests that spare math-verify (whose parser takes 50-500 ms on a new bracketed string)
    answers it cannot read: too long, without a letter or digit, or with unbalanced braces."""
    if len(answer) > MAX_SYMBOLIC_CHARS or not any(c.isalnum() for c in answer):
        return False
    depth = 0
    for c in answer:
        depth += (c == "{") - (c == "}")
        if depth < 0:
            return False
    return depth == 0


def equivalent(pred: str, reference: str) -> bool:
    """Whether an extracted answer equals the reference: exactly for plain numbers, else by math-verify."""
    a, b = plain_number(pred), plain_number(reference)
    if a is not None and b is not None:
        return a == b
    if not (_could_be_math(pred) and _could_be_math(reference)):
        return False
    gold, guess = latex_answer(reference), latex_answer(pred)
    return bool(gold and guess) and check("equal", gold, guess)


def score(completion: str, reference: str, *, fallback_last_number: bool = True) -> float:
    """1.0 when the completion's final answer equals ``reference``, else 0.0, in any thread.

    Never raises on any completion; raises :class:`VerifierUnavailable` when the checker cannot run.
    """
    try:
        pred = extract_answer(completion, fallback_last_number=fallback_last_number)
        return float(pred is not None and equivalent(pred, str(reference)))
    except VerifierUnavailable:
        raise
    except Exception:  # noqa: BLE001 - a verifier must never take training down; a crash scores 0, loudly
        _log.warning("math verifier failed on a completion; scored 0", exc_info=True)
        return 0.0


def _score_pairs(pairs: list[tuple[str, str]], fallback_last_number: bool = True) -> list[float]:
    return [score(c, r, fallback_last_number=fallback_last_number) for c, r in pairs]


def score_batch(
    completions: Sequence[str],
    references: Sequence[str],
    *,
    workers: int | None = None,
    fallback_last_number: bool = True,
) -> list[float]:
    """Scores of many completions: the plain-number ones inline, the rest over ``workers`` processes."""
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    results: list[float | None] = [None] * len(completions)
    slow: list[int] = []
    for i, (c, r) in enumerate(zip(completions, references)):
        pred = extract_answer(c, fallback_last_number=fallback_last_number) if isinstance(c, str) else None
        if pred is None:
            results[i] = 0.0
            continue
        a, b = plain_number(pred), plain_number(str(r))
        if a is not None and b is not None:
            results[i] = float(a == b)
        else:
            slow.append(i)
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    if slow and (workers <= 1 or len(slow) < 64):
        for i in slow:
            results[i] = score(completions[i], references[i], fallback_last_number=fallback_last_number)
    elif slow:
        chunks = [slow[k::workers] for k in range(workers)]
        pairs = [[(completions[i], references[i]) for i in ch] for ch in chunks]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for idx, scores in zip(chunks, pool.map(_score_pairs, pairs, [fallback_last_number] * len(pairs))):
                for i, s in zip(idx, scores):
                    results[i] = s
    return [float(s) for s in results]  # type: ignore[arg-type]


class MathOptions(BaseModel):
    """The math verifier's options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fallback_last_number: bool = Field(
        True, description="With no marked answer (\\boxed, ####, 'the answer is'), take the text's last number."
    )


@register
class MathVerifier(Verifier):
    """Final-answer correctness against each row's ``reference_answer``."""

    name = "math"
    tasks: ClassVar[frozenset[str]] = frozenset({"math"})
    Options = MathOptions

    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """1.0 per completion whose final answer equals its row's reference."""
        refs = [str(r["reference_answer"]) for r in rows]
        options: MathOptions = self.options  # type: ignore[assignment]  # validated as Options
        return score_batch(completions, refs, workers=self.workers, fallback_last_number=options.fallback_last_number)

    def check_rows(self, rows: Sequence[Row]) -> list[tuple[int, str]]:
        """Rows whose reference answer math-verify cannot read."""
        problems = []
        for i, row in enumerate(rows):
            try:
                check_reference(row.get("reference_answer"))  # type: ignore[arg-type]
            except ValueError as exc:
                problems.append((i, str(exc)))
        return problems

    def gate_cases(self, rows: Sequence[Row]) -> list[Case]:
        """Gold forms and solutions, perturbed wrong answers, malformed text."""
        return math_cases(rows)
