"""Final-answer correctness for math word problems.

Plain numbers (``1,000``, ``$18``, ``18.0``) are compared exactly on a fast path; everything else
(fractions, percentages, LaTeX) goes to math-verify, gold first: ``verify(parse(gold), parse(pred))``.
math-verify costs about 1 ms a check, so :func:`score_batch` spreads the slow path over processes.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal, InvalidOperation
from typing import Sequence

from verifiers.extract import extract_answer
from verifiers.registry import register

_PLAIN = re.compile(r"^-?\$?\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$|^-?\$?\s?\.\d+$")


def plain_number(text: str) -> Decimal | None:
    """``Decimal`` of a plain number such as ``-1,234.50`` or ``$18``; None for anything else."""
    text = text.strip().rstrip(".")
    if not _PLAIN.match(text):
        return None
    try:
        return Decimal(text.replace(",", "").replace("$", "").replace(" ", ""))
    except InvalidOperation:
        return None


def _math_verify_equal(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    gold_parsed = parse(gold if "$" in gold or "\\" not in gold else f"${gold}$")
    pred_parsed = parse(pred if "$" in pred or "\\" not in pred else f"${pred}$")
    return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed))


def check_reference(reference: str) -> None:
    """Raise ``ValueError`` when a reference answer cannot be understood: no free rewards."""
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError(f"reference answer {reference!r} is empty")
    if plain_number(reference) is not None:
        return
    from math_verify import parse

    # no_fallback: a string math-verify could not read as math must not pass as one
    if not parse(reference if "\\" not in reference else f"${reference}$", fallback_mode="no_fallback"):
        raise ValueError(f"reference answer {reference!r} cannot be parsed by math-verify")


def equivalent(pred: str, reference: str) -> bool:
    a, b = plain_number(pred), plain_number(reference)
    if a is not None and b is not None:
        return a == b
    return _math_verify_equal(reference, pred)


@register("math")
def score(completion: str, reference: str, *, fallback_last_number: bool = True) -> float:
    """1.0 when the completion's final answer equals ``reference``, else 0.0. Never raises."""
    try:
        pred = extract_answer(completion, fallback_last_number=fallback_last_number)
        return float(pred is not None and equivalent(pred, str(reference)))
    except Exception:  # a verifier must never take training down; a crash scores 0
        return 0.0


def _score_pairs(pairs: list[tuple[str, str]]) -> list[float]:
    return [score(c, r) for c, r in pairs]


def score_batch(completions: Sequence[str], references: Sequence[str], *, workers: int | None = None) -> list[float]:
    """Scores of many completions: the plain-number ones inline, the rest over ``workers`` processes."""
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    results: list[float | None] = [None] * len(completions)
    slow: list[int] = []
    for i, (c, r) in enumerate(zip(completions, references)):
        pred = extract_answer(c) if isinstance(c, str) else None
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
            results[i] = score(completions[i], references[i])
    elif slow:
        chunks = [slow[k::workers] for k in range(workers)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for idx, scores in zip(chunks, pool.map(_score_pairs, [[(completions[i], references[i]) for i in ch] for ch in chunks])):
                for i, s in zip(idx, scores):
                    results[i] = s
    return [float(s) for s in results]  # type: ignore[arg-type]
