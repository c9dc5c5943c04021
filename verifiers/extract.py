"""Finding the final answer in a model completion.

Tried in order, the last occurrence of each winning: ``\\boxed{...}``, ``#### x`` (GSM8K),
"the answer is x", and, if allowed, the last number in the text.

Every step is linear in the completion's length, whatever the text (the trainer calls this on
every rollout, in its main thread). Markers are found with ``str.rfind`` or with regexes that start
with a literal, the text after a marker is read once, numbers are matched only where a digit search
(a fast scan) points, and the brace scan of a boxed answer stops after :data:`MAX_ANSWER_CHARS`.
The previous ``answer\\s+is\\s*:?\\s*([^\\n]+)`` backtracked over runs of blanks: 23 s on 40k newlines.
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 1000  # a symbolic final answer longer than this is not an answer; bounds the brace scan

# A number as written in a solution: sign, currency, thousands commas, decimals, a fraction, a percent.
_NUMBER = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?(?:\s?/\s?\d+)?\s?%?")
_NUMBER_LEAD = 3  # at most this many characters (``-$ ``) come before a number's first digit
# The same shape read right to left (on the reversed text), without a trailing comma; the possessive
# ``\d++`` never gives digits back, as a shorter run could not be followed by '.' or '/' anyway.
_NUMBER_REVERSED = re.compile(r"%?\s?(?:\d++\s?/\s?)?(?:\d++\.)?\d(?:[\d,]*\d)?\s?\$?-?")
_NUMBER_REVERSED_LEAD = 2  # '%' and a blank
_DIGIT = re.compile(r"\d")
_FRAC = re.compile(r"\\[dt]?frac\{[^{}]*\}\{[^{}]*\}")
_ANSWER_IS = re.compile(r"answer\s+is", re.IGNORECASE)
_OPEN_BRACE = re.compile(r"\s*\{")
_BRACE = re.compile(r"[{}]")
_NON_SPACE = re.compile(r"\S")
_BOX_COMMANDS = ("\\boxed", "\\fbox")
# A marked answer taken whole (``#### (x+1)^2``, ``The answer is x \\in [1,2).``): ASCII math only,
# no word of two letters or more outside a LaTeX command, not a number followed by a unit.
_EXPRESSION = re.compile(r"[0-9A-Za-z\s+\-*/^_=<>()\[\]{}.,!|\\$%:']+")
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_NUMBER_THEN_WORD = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?\s+[A-Za-z]")
_SENTENCE_END = " \t.,;!?"
_EMPHASIS = "*_`"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if absent.

    None too when the braces do not close within :data:`MAX_ANSWER_CHARS` characters.
    """
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    brace = _OPEN_BRACE.match(text, start + len(command))
    if brace is None:
        return None
    open_at = brace.end() - 1
    depth = 0
    for m in _BRACE.finditer(text, open_at, open_at + MAX_ANSWER_CHARS + 2):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[open_at + 1 : m.start()].strip()
    return None


def _line_after(text: str, pos: int, *, skip_colon: bool = False) -> str | None:
    """The text from the first non-blank character at or after ``pos`` to the end of its line."""
    first = _NON_SPACE.search(text, pos)
    if first is not None and skip_colon and first.group() == ":":
        first = _NON_SPACE.search(text, first.end())
    if first is None:
        return None
    end = text.find("\n", first.start())
    return text[first.start() : end if end >= 0 else len(text)]


def _hash_span(text: str) -> str | None:
    """What follows the last ``####`` that has anything after it."""
    pos = len(text)
    while (at := text.rfind("####", 0, pos)) >= 0:
        span = _line_after(text, at + 4)
        if span is not None:
            return span
        pos = at
    return None


def _answer_is_span(text: str) -> str | None:
    """What follows the last "answer is" (an optional colon skipped) that has anything after it."""
    ends = [m.end() for m in _ANSWER_IS.finditer(text)]
    for end in reversed(ends):
        span = _line_after(text, end, skip_colon=True)
        if span is not None:
            return span
    return None


def _match_near_digit(pattern: re.Pattern[str], text: str, lead: int) -> re.Match[str] | None:
    """``pattern.search(text)`` for a pattern whose matches start at most ``lead`` characters
    before a digit: one fast digit scan, then at most ``lead + 1`` anchored tries."""
    digit = _DIGIT.search(text)
    if digit is None:
        return None
    for start in range(max(0, digit.start() - lead), digit.start() + 1):
        m = pattern.match(text, start)
        if m:
            return m
    return None


def _clean_number(token: str) -> str:
    """A matched number without the blanks and list comma the number pattern lets it end with."""
    return token.strip().rstrip(",").rstrip()


def _first_math_token(span: str) -> str | None:
    """The first number (or LaTeX fraction) in a span such as '18 apples.' or '\\frac{1}{2}'."""
    num = _match_near_digit(_NUMBER, span, _NUMBER_LEAD)
    frac = _FRAC.search(span)
    if frac and (num is None or frac.start() <= num.start()):
        return frac.group()
    return _clean_number(num.group()) if num else None


def last_number(text: str) -> str | None:
    """The number that ends at the last digit of ``text`` (with its sign, ``$``, fraction, ``%``)."""
    m = _match_near_digit(_NUMBER_REVERSED, text[::-1], _NUMBER_REVERSED_LEAD)
    return _clean_number(m.group()[::-1]) if m else None


def _whole_expression(text: str) -> str | None:
    """``text`` when it is one math expression rather than a number in a sentence."""
    if not _EXPRESSION.fullmatch(text) or _PROSE_WORD.search(text) or _NUMBER_THEN_WORD.match(text):
        return None
    return text


def _marked_answer(span: str) -> str | None:
    """The answer in the text after a marker: all of it when it is a number or an expression
    (``72``, ``(x+1)^2``, ``x = 4``), else its first number or fraction (``72 apples``)."""
    if len(span) <= MAX_ANSWER_CHARS:
        text = span.strip(_EMPHASIS + " ").rstrip(_SENTENCE_END).strip(_EMPHASIS + " ")
        if _NUMBER.fullmatch(text):  # the common case, first
            return _clean_number(text)
        if text and _whole_expression(text):
            return text
    return _first_math_token(span)


def extract_answer(completion: str, *, fallback_last_number: bool = True) -> str | None:
    """The final answer as a string, or None when the completion states none."""
    if not isinstance(completion, str) or not completion:
        return None
    boxed = last_boxed(completion)
    if boxed:
        return boxed
    for find_span in (_hash_span, _answer_is_span):
        span = find_span(completion)
        token = _marked_answer(span) if span is not None else None
        if token:
            return token
    return last_number(completion) if fallback_last_number else None
