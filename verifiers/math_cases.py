"""The math verifier's gate cases: the gold answer in several surface forms and templates, the
gold worked solution (all must pass), and systematically perturbed wrong answers (all must fail)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from verifiers.check import Case, malformed_cases

TEMPLATES = {"hashes": "#### {}", "answer_is": "The answer is {}.", "boxed": "\\boxed{{{}}}"}


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


def math_cases(rows: Sequence[Mapping[str, Any]]) -> list[Case]:
    """Every gold form must pass and every perturbation and malformed text must fail, per row."""
    cases: list[Case] = []
    for row in rows:
        ref = str(row["reference_answer"])
        if row.get("solution"):
            cases.append(Case(row["solution"], row, True, "gold:solution"))
        for form_name, form in surface_forms(ref).items():
            for t_name, template in TEMPLATES.items():
                cases.append(Case(template.format(form), row, True, f"gold:{form_name}:{t_name}"))
        for wrong_name, wrong in wrong_answers(ref).items():
            cases.append(Case(f"#### {wrong}", row, False, f"wrong:{wrong_name}"))
    return cases + malformed_cases(rows)
