"""Checking a verifier before training on it: a wrong verifier makes every later step worthless.

For each reference answer, build completions that must score 1 (the gold answer in several
surface forms, and the gold worked solution itself) and completions that must score 0 (perturbed
wrong answers: off by one, wrong sign, swapped digits, wrong unit scale; and malformed text).
Score them all, and report precision, recall, accuracy, the confusion cases and throughput.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Callable, Sequence

BatchScorer = Callable[[list[str], list[str]], list[float]]

MALFORMED = [
    "",
    "I don't know.",
    "####",
    "The answer is",
    "\\boxed{",
    "#### abc",
    "}}}{{{ \\frac{",
    "\x00\x01\x02",
    "9" * 5000 + " is not the answer? ####",
]


@dataclass(frozen=True)
class Case:
    completion: str
    reference: str
    expected: bool
    kind: str  # e.g. "gold:comma", "wrong:off_by_one", "malformed"


def _as_decimal(answer: str) -> Decimal | None:
    try:
        return Decimal(answer.replace(",", "").replace("$", "").strip())
    except (InvalidOperation, ValueError):
        return None


def _fmt(d: Decimal) -> str:
    text = format(d.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def surface_forms(answer: str) -> dict[str, str]:
    """Equivalent spellings of a numeric answer: commas, currency, trailing .0, fraction."""
    d = _as_decimal(answer)
    if d is None:
        return {"plain": answer}
    plain = _fmt(d)
    forms = {"plain": plain, "dollar": f"${plain}", "decimal_zero": f"{plain}.0" if d == d.to_integral() else plain}
    if d == d.to_integral() and abs(d) >= 1000:
        forms["comma"] = f"{int(d):,}"
    if d != d.to_integral():
        num, den = d.as_integer_ratio()
        if den <= 1000:
            forms["fraction"] = f"{num}/{den}"
            forms["latex_frac"] = f"\\frac{{{num}}}{{{den}}}"
    return forms


def wrong_answers(answer: str) -> dict[str, str]:
    """Systematically perturbed wrong answers; only those that differ from the gold value."""
    d = _as_decimal(answer)
    if d is None:
        return {}
    swapped = None
    digits = _fmt(abs(d)).replace(".", "")
    if len(digits) >= 2 and digits[-1] != digits[-2] and "." not in _fmt(abs(d)):
        swapped = ("-" if d < 0 else "") + digits[:-2] + digits[-1] + digits[-2]
    candidates = {
        "off_by_one_up": _fmt(d + 1),
        "off_by_one_down": _fmt(d - 1),
        "wrong_sign": _fmt(-d) if d != 0 else None,
        "digits_swapped": swapped,
        "scale_x10": _fmt(d * 10) if d != 0 else None,
        "scale_div100": _fmt(d / 100) if d != 0 else None,
    }
    return {k: v for k, v in candidates.items() if v is not None and _as_decimal(v) != d}


def build_cases(references: Sequence[str], solutions: Sequence[str | None]) -> list[Case]:
    cases: list[Case] = []
    templates = {"hashes": "#### {}", "answer_is": "The answer is {}.", "boxed": "\\boxed{{{}}}"}
    for ref, solution in zip(references, solutions):
        if solution:
            cases.append(Case(solution, ref, True, "gold:solution"))
        for form_name, form in surface_forms(ref).items():
            for t_name, template in templates.items():
                cases.append(Case(template.format(form), ref, True, f"gold:{form_name}:{t_name}"))
        for wrong_name, wrong in wrong_answers(ref).items():
            cases.append(Case(f"#### {wrong}", ref, False, f"wrong:{wrong_name}"))
    for ref in references[:50]:
        cases.extend(Case(text, ref, False, "malformed") for text in MALFORMED)
    return cases


@dataclass
class Validation:
    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0
    checks_per_second: float = 0.0
    errors: list[str] = field(default_factory=list)
    confusions: list[dict] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def accuracy(self) -> float:
        total = self.tp + self.fp + self.tn + self.fn
        return (self.tp + self.tn) / total if total else 0.0

    def to_dict(self) -> dict:
        return {
            "tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn,
            "precision": round(self.precision, 6), "recall": round(self.recall, 6), "accuracy": round(self.accuracy, 6),
            "checks_per_second": round(self.checks_per_second, 1), "cases": self.tp + self.fp + self.tn + self.fn,
        }


def validate(scorer: BatchScorer, cases: Sequence[Case], *, max_confusions: int = 20) -> Validation:
    """Score every case (reward >= 0.5 counts as accepted) and tally the confusion matrix."""
    start = time.perf_counter()
    scores = scorer([c.completion for c in cases], [c.reference for c in cases])
    elapsed = time.perf_counter() - start
    v = Validation(checks_per_second=len(cases) / elapsed if elapsed > 0 else float("inf"))
    for case, s in zip(cases, scores):
        accepted = s >= 0.5
        if accepted and case.expected:
            v.tp += 1
        elif accepted:
            v.fp += 1
        elif case.expected:
            v.fn += 1
        else:
            v.tn += 1
        if accepted != case.expected and len(v.confusions) < max_confusions:
            v.confusions.append({"kind": case.kind, "expected": case.expected, "score": s,
                                 "reference": case.reference, "completion": case.completion[:300]})
    return v


def check_references(references: Sequence[str], check: Callable[[str], None]) -> list[tuple[int, str]]:
    """Every reference the verifier cannot understand, as (index, message): a free reward otherwise."""
    errors = []
    for i, ref in enumerate(references):
        try:
            check(ref)
        except ValueError as exc:
            errors.append((i, str(exc)))
    return errors


def format_cases(references: Sequence[str], solutions: Sequence[str | None]) -> list[Case]:
    """Cases for a final-form verifier: '#### x' last lines pass; answers in prose do not."""
    cases: list[Case] = []
    for ref, solution in zip(references, solutions):
        if solution:
            cases.append(Case(solution, ref, True, "format:gold_solution"))
        cases.append(Case(f"Some steps.\n#### {ref}", ref, True, "format:final_line"))
        cases.append(Case(f"The answer is {ref}.", ref, False, "format:prose_answer"))
        cases.append(Case(f"#### {ref}\nand then more text", ref, False, "format:text_after_answer"))
    for ref in references[:50]:
        cases.extend(Case(text, ref, False, "malformed") for text in MALFORMED)
    return cases


# Code verifier self-test: (completion, tests, expected share of tests passed). The hostile ones
# must score 0 and leave the validating process standing.
CODE_CASES: list[tuple[str, list[str], float, str]] = [
    ("```python\ndef add(a, b):\n    return a + b\n```", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], 1.0, "correct"),
    ("```python\ndef add(a, b):\n    return a - b\n```", ["assert add(1, 2) == 3", "assert add(0, 0) == 0"], 0.5, "half_right"),
    ("def add(a, b) return a + b", ["assert add(1, 2) == 3"], 0.0, "syntax_error"),
    ("while True:\n    pass", ["assert True"], 0.0, "infinite_loop"),
    ("import os\nwhile True:\n    os.fork()", ["assert True"], 0.0, "fork_bomb"),
    ("x = bytearray(8 * 1024 ** 3)", ["assert True"], 0.0, "memory_bomb"),
    ("import os\nos._exit(0)", ["assert True"], 0.0, "early_exit"),
    ("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)", ["assert True"], 0.0, "network"),
    ("import builtins\nbuiltins.exec = lambda *a, **k: None", ["assert False"], 0.0, "exec_replaced"),
    ("import builtins\n_c = builtins.compile\nbuiltins.compile = lambda s, f, m, *a, **k: _c('pass', f, m)",
     ["assert False"], 0.0, "compile_replaced"),
    ("import os, sys\nfr = sys._getframe(1)\nfor i in range(9):\n    print('%s:%d:pass' % (fr.f_locals.get('nonce'), i))\n"
     "sys.stdout.flush()\nos._exit(0)", ["assert False"], 0.0, "forged_verdict"),
    ("class A:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return A()",
     ["assert add(1, 2) == 4", "assert add(0, 0) == 1"], 0.0, "always_equal"),
    ("def sorted(*a):\n    return 0\ndef add(a, b):\n    return [a]", ["assert sorted(add(1, 2)) == sorted([3])"], 0.0,
     "shadowed_builtin"),
    ("import os, signal\nos.kill(1, signal.SIGKILL)", ["assert False"], 0.0, "kill_judge"),
    ("while True:\n    print('x' * 65536)", ["assert True"], 0.0, "infinite_output"),
]
