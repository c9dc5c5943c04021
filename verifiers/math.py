"""Final-answer correctness for math word problems.

Plain numbers (``1,000``, ``$18``, ``18.0``) are compared exactly on a fast path; everything else
(fractions, percentages, LaTeX, symbolic answers such as ``x^2+2x+1``, ``[1,2)``, ``\\{1,2\\}``,
``\\sqrt{2}``, ``\\pi/2``) goes to math-verify as inline math, gold first:
``verify(parse(gold), parse(pred))`` (https://github.com/huggingface/Math-Verify, README).
math-verify costs about 1 ms for a simple or repeated answer and 10-500 ms for a new bracketed one (its
ANTLR parser), so :func:`score_batch` spreads the slow path over checker processes.

Relations: an answer that is an equation counts only when it is really the answer: ``x = 4`` (a
variable named, then the value) and ``2+2 = 4`` (every side equals the gold) pass for gold ``4``;
``5 = 4``, ``x \\le 4`` and ``a = 5 = 4`` do not. When the gold itself is a relation, math-verify decides.

Bounds: an answer first passes a pure-Python screen (:mod:`verifiers.math_screen`: length, nesting,
terms, power towers, huge numbers), then math-verify runs in a persistent checker process with a
time budget and an address-space limit that is killed and replaced when the answer overruns
(:mod:`verifiers.math_checks`), from any thread of any process. SymPy is never imported by the
caller, and no answer costs it more than :data:`~verifiers.math_checks.CHECK_BUDGET_S` plus
:data:`~verifiers.math_checks.CHECKER_GRACE_S`. :func:`judge` says why an answer scored 0.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from verifiers.catalog import BUILTIN_TASKS
from verifiers.check import Case
from verifiers.extract import extract_answer
from verifiers.math_cases import math_cases
from verifiers.math_checks import Checked, VerifierUnavailable, check, check_many  # noqa: F401 - re-exported
from verifiers.math_screen import MAX_SYMBOLIC_CHARS, screen
from verifiers.registry import Row, Verifier, register

_PLAIN = re.compile(r"^-?\$?\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$|^-?\$?\s?\.\d+$")
_log = logging.getLogger(__name__)
PARALLEL_MIN_CHECKS = 64  # a batch with fewer math-verify checks uses one checker process


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


def canonical_answer(text: str) -> str | None:
    """A completion's final answer as maj@k votes on it: a plain number in its normal form (``4.0`` and
    ``4`` are one vote), else the extracted text; None without one."""
    answer = extract_answer(text)
    if answer is None:
        return None
    number = plain_number(answer)
    return format(number.normalize(), "f") if number is not None else answer.strip()


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
    refused = _screened(reference)
    if refused is not None:
        raise ValueError(f"reference answer {reference!r} is refused by the math screen: {refused}")
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


@lru_cache(maxsize=4096)  # references repeat across a group of rollouts
def _screened(text: str) -> str | None:
    return screen(text)


class Verdict(NamedTuple):
    """A score and why: ``plain numbers``, ``math-verify``, ``no final answer``, ``not math``,
    ``screened answer: <limit>``, ``not verified: <budget, memory, error or killed: ...>``."""

    score: float
    reason: str


def _prepare(pred: str, reference: str) -> Verdict | tuple[str, str]:
    """The verdict without math-verify (plain numbers, text that is no math, a screened answer),
    or the gold and guess that math-verify must compare."""
    a, b = plain_number(pred), plain_number(reference)
    if a is not None and b is not None:
        return Verdict(float(a == b), "plain numbers")
    if not (_could_be_math(pred) and _could_be_math(reference)):
        return Verdict(0.0, "not math")
    for who, text in (("answer", pred), ("reference", reference)):
        refused = _screened(text)
        if refused is not None:
            return Verdict(0.0, f"screened {who}: {refused}")
    gold, guess = latex_answer(reference), latex_answer(pred)
    return (gold, guess) if gold and guess else Verdict(0.0, "not math")


def _verdict(checked: Checked) -> Verdict:
    return Verdict(float(checked.ok), f"not verified: {checked.reason}" if checked.reason else "math-verify")


def _judge_answer(pred: str, reference: str) -> Verdict:
    """An extracted answer against the reference: exactly for plain numbers, else screened, then by math-verify."""
    prepared = _prepare(pred, reference)
    return prepared if isinstance(prepared, Verdict) else _verdict(check_many([("equal", prepared)])[0])


def equivalent(pred: str, reference: str) -> bool:
    """Whether an extracted answer equals the reference: exactly for plain numbers, else by math-verify."""
    return _judge_answer(pred, reference).score == 1.0


def judge(completion: str, reference: str, *, fallback_last_number: bool = True) -> Verdict:
    """:func:`score` with the reason. Never raises on any completion; raises
    :class:`VerifierUnavailable` when the checker cannot run."""
    return judge_batch([completion], [reference], workers=1, fallback_last_number=fallback_last_number)[0]


def score(completion: str, reference: str, *, fallback_last_number: bool = True) -> float:
    """1.0 when the completion's final answer equals ``reference``, else 0.0, in any thread.

    Never raises on any completion; raises :class:`VerifierUnavailable` when the checker cannot run.
    """
    return judge(completion, reference, fallback_last_number=fallback_last_number).score


def _prepare_completion(completion: str, reference: str, fallback_last_number: bool) -> Verdict | tuple[str, str]:
    """:func:`_prepare` on the completion's final answer; a crash scores 0, loudly."""
    try:
        pred = extract_answer(completion, fallback_last_number=fallback_last_number)
        return Verdict(0.0, "no final answer") if pred is None else _prepare(pred, str(reference))
    except Exception:  # noqa: BLE001 - a verifier must never take training down; a crash scores 0, loudly
        _log.warning("math verifier failed on a completion; scored 0", exc_info=True)
        return Verdict(0.0, "error")


def judge_batch(
    completions: Sequence[str],
    references: Sequence[str],
    *,
    workers: int | None = None,
    fallback_last_number: bool = True,
) -> list[Verdict]:
    """:func:`judge` of many completions: the cheap verdicts here, the math-verify checks in checker
    processes, a chunk per pipe write, over ``workers`` of them for a batch of at least
    :data:`PARALLEL_MIN_CHECKS` (threads here, each waiting on one child: the caller is never forked)."""
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    prepared = [_prepare_completion(c, r, fallback_last_number) for c, r in zip(completions, references)]
    pending = [(i, p) for i, p in enumerate(prepared) if not isinstance(p, Verdict)]
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    workers = workers if len(pending) >= PARALLEL_MIN_CHECKS else 1
    checked = check_many([("equal", p) for _, p in pending], workers=workers) if pending else []
    for (i, _), outcome in zip(pending, checked):
        prepared[i] = _verdict(outcome)
    return prepared  # type: ignore[return-value]  # every pair was replaced by its verdict


def score_batch(
    completions: Sequence[str],
    references: Sequence[str],
    *,
    workers: int | None = None,
    fallback_last_number: bool = True,
) -> list[float]:
    """Scores of many completions (:func:`judge_batch`)."""
    verdicts = judge_batch(completions, references, workers=workers, fallback_last_number=fallback_last_number)
    return [v.score for v in verdicts]


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
    tasks: ClassVar[frozenset[str]] = BUILTIN_TASKS[name]  # stated once, in verifiers/catalog.py
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
