"""Format reward: does the completion end with its answer in the required final form?"""

from __future__ import annotations

import re

from verifiers.registry import register

_FINAL_LINE = re.compile(r"^####\s*-?\$?\d[\d,]*(?:\.\d+)?\s*$")
_BOXED = re.compile(r"\\boxed\{.+\}")


@register("format")
def score(completion: str, reference: object = None) -> float:
    """1.0 when the last non-empty line is ``#### <number>`` (or holds a ``\\boxed{}``), else 0.0."""
    if not isinstance(completion, str):
        return 0.0
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    if not lines:
        return 0.0
    last = lines[-1]
    return float(bool(_FINAL_LINE.match(last) or _BOXED.search(last)))
