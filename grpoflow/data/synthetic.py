"""Deterministic, verifiable arithmetic word problems in GSM8K form.

A problem is a short story: a starting amount, then ``n`` steps, each one arithmetic operation,
then the question. The answer is a worked solution, one ``a<op>b=c`` line per step (GSM8K's own
line shape, without its calculator annotations), ending with ``#### <number>``. Every
intermediate result is a non-negative integer, so the reference is exact.

Problem ``i`` of seed ``s`` depends only on ``(s, i)``: asking for more problems extends the
list without changing the ones before it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from grpoflow.config import SyntheticConfig

NAMES = [
    "Ava",
    "Ben",
    "Chen",
    "Dana",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jia",
    "Kofi",
    "Lena",
    "Mateo",
    "Nora",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
    "Uma",
    "Victor",
    "Wen",
    "Yara",
]
ITEMS = [
    "apples",
    "marbles",
    "stickers",
    "books",
    "coins",
    "pencils",
    "cards",
    "shells",
    "stamps",
    "cookies",
    "beads",
    "eggs",
    "toy cars",
    "flowers",
    "buttons",
    "crayons",
]

# One phrasing per operation; {n} is the operand. Kept few and regular on purpose: the tiny
# default model must be able to learn the format from a few thousand examples.
STEP_TEXT = {
    "+": ["{name} gets {n} more {item}.", "{name} finds {n} {item}.", "A friend gives {name} {n} {item}."],
    "-": ["{name} gives away {n} {item}.", "{name} loses {n} {item}.", "{name} uses {n} {item}."],
    "*": ["{name} ends up with {n} times as many {item}.", "The number of {item} grows {n} times."],
    "/": ["{name} splits the {item} into {n} equal piles and keeps one pile."],
}


@dataclass(frozen=True)
class Problem:
    """One generated problem; ``answer`` is the GSM8K-form solution, ``final`` its number."""

    index: int
    question: str
    answer: str
    final: int
    num_ops: int


def _pick_step(rng: random.Random, value: int, cfg: SyntheticConfig) -> tuple[str, int] | None:
    """An operation and operand that keep the running value a non-negative integer."""
    choices = list(cfg.ops)
    rng.shuffle(choices)
    for op in choices:
        if op == "+":
            return op, rng.randint(cfg.operand_min, cfg.operand_max)
        if op == "-" and value >= max(cfg.operand_min, 1):
            return op, rng.randint(max(cfg.operand_min, 1), min(value, cfg.operand_max))
        if op == "*":
            return op, rng.randint(2, cfg.factor_max)
        if op == "/":
            divisors = [d for d in range(2, cfg.factor_max + 1) if value % d == 0 and value > 0]
            if divisors:
                return op, rng.choice(divisors)
    return None


def _apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]


def make_problem(seed: int, index: int, cfg: SyntheticConfig) -> Problem:
    """Problem ``index`` of the stream for ``seed``."""
    rng = random.Random(f"grpoflow-synthetic:{seed}:{index}")
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    # Redraw a start that admits no first step (a prime with only '/' allowed, say): every
    # problem has at least one step. Later steps may still run out; the chain then ends early.
    for _ in range(100):
        value = rng.randint(max(cfg.operand_min, 1), cfg.operand_max)
        if _pick_step(random.Random(0), value, cfg) is not None:
            break
    sentences = [f"{name} has {value} {item}."]
    lines: list[str] = []
    for _ in range(rng.randint(cfg.min_ops, cfg.max_ops)):
        step = _pick_step(rng, value, cfg)
        if step is None:  # e.g. only '-' allowed and nothing left to take away
            break
        op, n = step
        new = _apply(op, value, n)
        sentences.append(rng.choice(STEP_TEXT[op]).format(name=name, n=n, item=item))
        lines.append(f"{value}{op}{n}={new}")
        value = new
    sentences.append(f"How many {item} does {name} have now?")
    answer = "\n".join(lines + [f"#### {value}"])
    return Problem(index=index, question=" ".join(sentences), answer=answer, final=value, num_ops=len(lines))


def generate(seed: int, cfg: SyntheticConfig, start: int = 0) -> Iterator[Problem]:
    """``cfg.num_examples`` problems, indices ``start .. start + num_examples - 1``."""
    for i in range(start, start + cfg.num_examples):
        yield make_problem(seed, i, cfg)
