"""Finding the final answer in a model completion.

Tried in order, the last occurrence of each winning: ``\\boxed{...}``, ``#### x`` (GSM8K),
"the answer is x", and, if allowed, the last number in the text.
"""

from __future__ import annotations

import re

_NUM = r"-?\$?\s?\d[\d,]*(?:\.\d+)?(?:\s?/\s?\d+)?\s?%?"
_HASHES = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*([^\n]+)", re.IGNORECASE)
_NUMBER = re.compile(_NUM)
_FRAC = re.compile(r"\\[dt]?frac\{[^{}]*\}\{[^{}]*\}")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    open_at = text.find("{", start) if start >= 0 else -1
    if open_at < 0:
        return None
    depth = 0
    for k in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[open_at + 1 : k].strip()
    return None


def _first_math_token(span: str) -> str | None:
    """The first number (or LaTeX fraction) in a span such as '18 apples.' or '\\frac{1}{2}'."""
    frac, num = _FRAC.search(span), _NUMBER.search(span)
    hits = [m for m in (frac, num) if m]
    if not hits:
        return None
    return min(hits, key=lambda m: m.start()).group(0).strip()


def extract_answer(completion: str, *, fallback_last_number: bool = True) -> str | None:
    """The final answer as a string, or None when the completion states none."""
    if not isinstance(completion, str) or not completion:
        return None
    boxed = last_boxed(completion)
    if boxed:
        return boxed
    for pattern in (_HASHES, _ANSWER_IS):
        spans = pattern.findall(completion)
        if spans:
            token = _first_math_token(spans[-1])
            if token:
                return token
    if fallback_last_number:
        numbers = _NUMBER.findall(completion)
        if numbers:
            return numbers[-1].strip()
    return None
