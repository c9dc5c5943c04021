"""A cheap screen for answers that would cost math-verify seconds or gigabytes, before any SymPy.

Pure Python, linear in the answer (at most :data:`MAX_SYMBOLIC_CHARS` characters are ever read).
:func:`screen` returns why an answer is refused, or None. It refuses

- more than :data:`MAX_SYMBOLIC_CHARS` characters, or a number literal of more than
  :data:`MAX_LITERAL_DIGITS` digits;
- brackets nested deeper than :data:`MAX_NESTING_DEPTH` (math-verify's ANTLR parser takes about
  50 ms per level of parentheses: 2 s at 140);
- more than :data:`MAX_TERMS` terms (every ``+``, ``-``, ``,`` or ``;`` starts one);
- a power tower higher than :data:`MAX_POWER_TOWER` (``a^{b^{c}}`` passes, ``a^{b^{c^{d}}}`` not);
- a number whose estimated size exceeds :data:`MAX_NUMBER_DIGITS` decimal digits
  (``10^{10^{10}}``, ``10^{-10^7}``, ``5000!``, ``\\binom{10^5}{50}``): SymPy and mpmath compute
  such numbers in C, where no signal can stop them (``10^{10^{10^{10}}}`` took 30 s and 8.5 GB);
- an exponent above :data:`MAX_EXPONENT` on anything but a number (``(x+1)^{10^{10}}``).

Sizes are upper bounds on ``|log10|x||`` from the literals up (a sum adds ``log10 2``, a product or
quotient adds, a power multiplies by the exponent's value); anything with a letter or an unknown
command is symbolic and only its exponents' values are bounded. What the screen lets through still
runs in a killable checker process (:mod:`verifiers.math_checks`); the screen only spares that
process the answers known to be hopeless, and keeps them from costing a restart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_SYMBOLIC_CHARS = 300  # a non-numeric answer (or reference) longer than this is never parsed
MAX_LITERAL_DIGITS = 100  # digits in one number literal
MAX_NESTING_DEPTH = 8  # nested brackets of any kind: about 0.3 s of math-verify's parser at 8
MAX_TERMS = 40  # summands and list items, at any depth
MAX_POWER_TOWER = 2  # exponents inside exponents: a^{b^{c}} has 2
MAX_NUMBER_DIGITS = 10_000  # estimated decimal digits of any number the answer denotes
MAX_EXPONENT = 10_000  # value of an exponent whose base is not a number

_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\d+(?:\.\d*)?|\.\d+|\*\*|\s+|.", re.DOTALL | re.ASCII)
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+", re.ASCII)
_OPENERS = frozenset({"(", "[", "{", "\\{", "\\lbrace", "\\langle", "\\lvert"})
_CLOSERS = frozenset({")", "]", "}", "\\}", "\\rbrace", "\\rangle", "\\rvert"})
_IGNORED = frozenset(
    {"\\left", "\\right", "\\,", "\\!", "\\;", "\\:", "\\ ", "\\quad", "\\qquad", "\\displaystyle", "$"}
)
_TERM_SEPARATORS = frozenset({"+", "-", ",", ";", "\\pm", "\\mp"})
_RELATIONS = frozenset({"=", "<", ">", "\\le", "\\leq", "\\ge", "\\geq", "\\ne", "\\neq", "\\approx", "\\in", "\\to"})
_PRODUCTS = frozenset({"*", "/", "\\cdot", "\\times", "\\div"})
_FRACTIONS = frozenset({"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"})
_BINOMIALS = frozenset({"\\binom", "\\dbinom", "\\tbinom"})
_POWERS = frozenset({"^", "**"})
_LOG10_2 = math.log10(2)


class Refused(Exception):
    """The answer is refused; the message says which limit it exceeds."""


@dataclass
class _Group:
    """A bracketed part of the answer: its items (tokens and groups) and its opening bracket."""

    items: list[_Group | str]
    opener: str


def _nesting_and_terms(tokens: list[str]) -> None:
    """Refuse too deep a nesting or too many terms: one pass, before any tree is built."""
    depth = terms = 0
    for tok in tokens:
        if tok in _OPENERS:
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                raise Refused(f"brackets nested more than MAX_NESTING_DEPTH={MAX_NESTING_DEPTH} deep")
        elif tok in _CLOSERS:
            depth = max(depth - 1, 0)
        elif tok in _TERM_SEPARATORS:
            terms += 1
            if terms >= MAX_TERMS:
                raise Refused(f"more than MAX_TERMS={MAX_TERMS} terms")
        elif _NUMBER.fullmatch(tok) and len(tok) - ("." in tok) > MAX_LITERAL_DIGITS:
            raise Refused(f"a number of more than MAX_LITERAL_DIGITS={MAX_LITERAL_DIGITS} digits")


def _tree(tokens: list[str]) -> _Group:
    """The tokens as nested groups; any closer closes the innermost group (``[1,2)``)."""
    stack = [_Group([], "")]
    for tok in tokens:
        if tok in _OPENERS:
            stack.append(_Group([], tok))
        elif tok in _CLOSERS:
            if len(stack) > 1:
                done = stack.pop()
                stack[-1].items.append(done)
        elif not tok.isspace() and tok not in _IGNORED:
            stack[-1].items.append(tok)
    while len(stack) > 1:
        done = stack.pop()
        stack[-1].items.append(done)
    return stack[0]


def _literal_size(tok: str) -> float:
    """``|log10|x||`` bound of a literal such as ``12``, ``0.5`` or ``.25``."""
    value = float(tok)
    return abs(math.log10(value)) if value > 0 else 0.0


def _number_size(digits: float) -> float:
    """``digits``, refused above :data:`MAX_NUMBER_DIGITS`."""
    if digits > MAX_NUMBER_DIGITS:
        raise Refused(f"a number of about {digits:.3g} digits, above MAX_NUMBER_DIGITS={MAX_NUMBER_DIGITS}")
    return digits


def _value_bound(size: float) -> float:
    """The largest value a size (``|log10|x||`` bound) allows; inf beyond floats."""
    return 10.0**size if size < 300 else math.inf


class _Reader:
    """Walks a group's items: sums of products of powers, each returning a size bound (None: symbolic)."""

    def __init__(self, items: list[_Group | str], level: int):
        self.items = items
        self.pos = 0
        self.level = level  # how many exponents this group sits inside

    def _next(self) -> _Group | str | None:
        item = self.items[self.pos] if self.pos < len(self.items) else None
        self.pos += item is not None
        return item

    def _peek(self) -> _Group | str | None:
        return self.items[self.pos] if self.pos < len(self.items) else None

    def expression(self) -> float | None:
        """The whole group: terms joined by signs, commas and relations; the largest term's size."""
        sizes: list[float | None] = []
        while self._peek() is not None:
            tok = self._peek()
            if isinstance(tok, str) and (tok in _TERM_SEPARATORS or tok in _RELATIONS):
                self.pos += 1
                continue
            sizes.append(self._product())
        if any(s is None for s in sizes):
            return None
        return max(sizes, default=0.0) + _LOG10_2 * (len(sizes) > 1)  # type: ignore[type-var, operator]

    def _product(self) -> float | None:
        """Factors joined by products, quotients or juxtaposition: their sizes add up."""
        total: float | None = 0.0
        while (tok := self._peek()) is not None and not (
            isinstance(tok, str) and (tok in _TERM_SEPARATORS or tok in _RELATIONS)
        ):
            if isinstance(tok, str) and tok in _PRODUCTS:
                self.pos += 1
                continue
            size = self._power()
            total = None if total is None or size is None else _number_size(total + size)
        return total

    def _power(self) -> float | None:
        """A primary with its exponents (right-associative) and factorials."""
        base = self._primary()
        tok = self._peek()
        if isinstance(tok, str) and tok in _POWERS:
            self.pos += 1
            if self.level + 1 > MAX_POWER_TOWER:
                raise Refused(f"a power tower higher than MAX_POWER_TOWER={MAX_POWER_TOWER}")
            outer, self.level = self.level, self.level + 1
            try:
                exponent = self._power()
            finally:
                self.level = outer
            base = _raised(base, exponent)
        while self._peek() == "!":
            self.pos += 1
            base = None if base is None else _number_size(_value_bound(base) * max(base, 1.0))
        return base

    def _primary(self) -> float | None:
        """A literal, a group, a fraction, a root, a binomial; anything else is symbolic."""
        item = self._next()
        if item is None:
            return 0.0
        if isinstance(item, _Group):
            return _Reader(item.items, self.level).expression()
        if _NUMBER.fullmatch(item):
            return _literal_size(item)
        if item in _FRACTIONS:
            num, den = self._argument(), self._argument()
            return None if num is None or den is None else _number_size(num + den)
        if item == "\\sqrt":
            nxt = self._peek()
            if isinstance(nxt, _Group) and nxt.opener == "[":
                self._argument()  # the root's index only makes the result smaller
            return self._argument()
        if item in _BINOMIALS:
            top, _ = self._argument(), self._argument()
            return None if top is None else _number_size(_value_bound(top) * _LOG10_2)
        return None

    def _argument(self) -> float | None:
        """A command's argument: one group or one token."""
        item = self._next()
        if isinstance(item, _Group):
            return _Reader(item.items, self.level).expression()
        return _Reader([item], self.level).expression() if item is not None else 0.0


def _raised(base: float | None, exponent: float | None) -> float | None:
    """The size of ``base ^ exponent``, refusing a huge number or a huge exponent of a symbol."""
    if exponent is None:
        return None
    value = _value_bound(exponent)
    if base is None:
        if value > MAX_EXPONENT:
            raise Refused(f"an exponent of about {value:.3g}, above MAX_EXPONENT={MAX_EXPONENT}")
        return None
    return _number_size(value * base if base > 0 else 0.0)


def screen(answer: str) -> str | None:
    """Why ``answer`` must not reach math-verify (a limit of this module exceeded), or None."""
    if len(answer) > MAX_SYMBOLIC_CHARS:
        return f"{len(answer)} characters, above MAX_SYMBOLIC_CHARS={MAX_SYMBOLIC_CHARS}"
    tokens = _TOKEN.findall(answer)
    try:
        _nesting_and_terms(tokens)
        _Reader(_tree(tokens).items, 0).expression()
    except Refused as exc:
        return str(exc)
    return None
