"""Deterministic, verifiable Python tasks: one small function of one integer, MBPP-style asserts.

A task asks for a function such as ``f(x)`` that returns ``x`` plus a constant; its solution is a
two-line program (``def f(x):`` / ``return x + 3``) and its tests are ``tests_per_task`` asserts on
distinct inputs. The expected values are computed here in Python from the template's own function,
never by running generated text, and the tests are drawn so that, where the template allows, they
do not all expect the same value (a constant answer then fails at least one).

A task is a choice of template, constant, function name and argument name. Task ``i`` of seed
``s`` is combination ``P_s(i mod N)`` of all ``N`` such combinations, where ``P_s`` is a seeded
pseudo-random permutation of ``0 .. N-1`` (a Feistel network on the next even power of two,
cycle-walked into range). So the first ``N`` tasks have distinct prompts (later ones repeat and
are de-duplicated by the prepare stage) in no regular order, and task ``i`` depends only on
``(s, i)`` and the config: asking for more tasks keeps the ones before.

The prompts are short on purpose: siblings that differ only in the constant share at most 3 of 4
word 8-grams and a word-trigram Jaccard of 0.8 (below the relaxed leakage thresholds that
generated data uses, params/default.yaml), and the tiny default model can learn the form.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from grpoflow.config import SyntheticCodeConfig

FUNCTION_NAMES = ["f", "g", "h", "solve", "compute", "calc", "func", "apply", "transform", "answer"]
ARGUMENT_NAMES = ["x", "n", "a", "y", "num", "value"]
INPUTS = range(-9, 21)  # test inputs: 30 values, enough for the most asserts a task may have (10)


@dataclass(frozen=True)
class Template:
    """One kind of task: how it is asked (``{v}`` the argument, ``{k}`` the constant), the body's
    expression, and the function it describes, which computes the tests' expected values."""

    name: str
    ask: str
    expression: str
    compute: Callable[[int, int], Any]


# A handful of operations a tiny model can learn; the constant sits inside the sentence where it
# can, so siblings differing only in it share few word n-grams.
TEMPLATES = [
    Template("plus", "returns {v} plus {k}", "{v} + {k}", lambda x, k: x + k),
    Template("minus", "returns {v} minus {k}", "{v} - {k}", lambda x, k: x - k),
    Template("times", "returns {v} times {k}", "{v} * {k}", lambda x, k: x * k),
    Template("larger", "returns the larger of {k} and {v}", "max({v}, {k})", max),
    Template("smaller", "returns the smaller of {k} and {v}", "min({v}, {k})", min),
    Template("square_plus", "returns {k} plus {v} squared", "{v} * {v} + {k}", lambda x, k: x * x + k),
    Template("twice_plus", "returns {k} plus twice {v}", "2 * {v} + {k}", lambda x, k: 2 * x + k),
    Template("abs_diff", "returns the absolute difference of {k} and {v}", "abs({v} - {k})", lambda x, k: abs(x - k)),
    Template("is_greater", "returns True if {v} is greater than {k}, else False", "{v} > {k}", lambda x, k: x > k),
    Template(
        "even_plus",
        "returns True if {v} plus {k} is even, else False",
        "({v} + {k}) % 2 == 0",
        lambda x, k: (x + k) % 2 == 0,
    ),
]


@dataclass(frozen=True)
class CodeTask:
    """One generated task: the prompt, the reference program, and its asserts."""

    index: int
    prompt: str
    solution: str
    tests: tuple[str, ...]
    template: str
    constant: int

    def row(self, seed: int) -> dict[str, Any]:
        """The task as a raw MBPP-form row, for :func:`grpoflow.data.ingest.ingest` with format code."""
        return {
            "id": f"synthetic_code-{seed}-{self.index}",
            "prompt": self.prompt,
            "tests": list(self.tests),
            "solution": self.solution,
        }


def combinations(cfg: SyntheticCodeConfig) -> int:
    """How many distinct tasks the config allows (templates x constants x names x argument names)."""
    constants = cfg.constant_max - cfg.constant_min + 1
    return len(TEMPLATES) * constants * len(FUNCTION_NAMES) * len(ARGUMENT_NAMES)


def _feistel(value: int, half_bits: int, seed: int) -> int:
    """A seeded bijection of ``0 .. 4**half_bits - 1``: four Feistel rounds, each keyed by blake2b."""
    mask = (1 << half_bits) - 1
    left, right = value >> half_bits, value & mask
    for round_ in range(4):
        key = hashlib.blake2b(f"{seed}:{round_}:{right}".encode(), digest_size=8, person=b"grpoflow-code")
        left, right = right, left ^ (int.from_bytes(key.digest(), "big") & mask)
    return (left << half_bits) | right


def _permuted(index: int, size: int, seed: int) -> int:
    """Where ``index`` (< ``size``) lands in the seed's permutation of ``0 .. size-1``.

    Cycle walking: apply the bijection of the enclosing power-of-two range until the value falls
    inside ``0 .. size-1`` (that range is under 4x ``size``, so a few steps on average).
    """
    half_bits = max(1, (max(size - 1, 1).bit_length() + 1) // 2)
    value = _feistel(index, half_bits, seed)
    while value >= size:
        value = _feistel(value, half_bits, seed)
    return value


def _choice(seed: int, index: int, cfg: SyntheticCodeConfig) -> tuple[Template, int, str, str]:
    """Task ``index``'s template, constant, function name and argument name."""
    size = combinations(cfg)
    code = _permuted(index % size, size, seed)
    code, template = divmod(code, len(TEMPLATES))
    code, function = divmod(code, len(FUNCTION_NAMES))
    constant, argument = divmod(code, len(ARGUMENT_NAMES))
    return TEMPLATES[template], cfg.constant_min + constant, FUNCTION_NAMES[function], ARGUMENT_NAMES[argument]


# Templates whose result turns at the constant: their tests start at the constant and one above it,
# so an off-by-one (`>` for `>=`) or a shifted constant fails a test, as the verifier gate's
# mutants check (a test set that lets such a program pass would pay a model for it).
AT_THE_CONSTANT = {"larger", "smaller", "abs_diff", "is_greater"}


def _inputs(rng: random.Random, template: Template, constant: int, count: int) -> list[int]:
    """``count`` distinct inputs whose expected values are not all the same, where a few draws find
    some; the boundary first for the templates of :data:`AT_THE_CONSTANT`."""
    fixed = [constant, constant + 1][:count] if template.name in AT_THE_CONSTANT else []
    pool = [x for x in INPUTS if x not in fixed]
    inputs = fixed + rng.sample(pool, count - len(fixed))
    for _ in range(20):
        if count < 2 or len({template.compute(x, constant) for x in inputs}) > 1:
            break
        inputs = fixed + rng.sample(pool, count - len(fixed))  # e.g. "is greater than 9" on inputs all below 9
    return inputs


def make_task(seed: int, index: int, cfg: SyntheticCodeConfig) -> CodeTask:
    """Task ``index`` of the stream for ``seed``."""
    template, constant, function, argument = _choice(seed, index, cfg)
    rng = random.Random(f"grpoflow-synthetic-code:{seed}:{index}")
    prompt = f"Write a Python function {function}({argument}) that {template.ask.format(v=argument, k=constant)}."
    expression = template.expression.format(v=argument, k=constant)
    solution = f"def {function}({argument}):\n    return {expression}"
    tests = tuple(
        f"assert {function}({x}) == {template.compute(x, constant)!r}"
        for x in _inputs(rng, template, constant, cfg.tests_per_task)
    )
    return CodeTask(index, prompt, solution, tests, template.name, constant)


def generate(seed: int, cfg: SyntheticCodeConfig, start: int = 0) -> Iterator[CodeTask]:
    """``cfg.num_examples`` tasks, indices ``start .. start + num_examples - 1``."""
    for i in range(start, start + cfg.num_examples):
        yield make_task(seed, i, cfg)
