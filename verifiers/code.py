"""Code reward: the share of MBPP-style ``assert`` tests that a completion's code passes.

The code is untrusted and runs in :mod:`verifiers.sandbox`; each test is checked separately.
"""

from __future__ import annotations

import re

from verifiers.registry import register
from verifiers.sandbox import Limits, SandboxUnavailable, run_tests

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The last fenced block (a ``python`` one preferred), else the whole completion."""
    blocks = _FENCE.findall(completion or "")
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    chosen = python or [body for _, body in blocks]
    return chosen[-1] if chosen else (completion or "")


def score_code(completion: str, tests: list[str], limits: Limits = Limits(), *, allow_unsandboxed: bool = False) -> float:
    """Fraction of ``tests`` passed. Bad code, crashes and timeouts score 0 for the tests they
    stop; a machine that cannot sandbox raises :class:`SandboxUnavailable` unless allowed."""
    if not tests:
        raise ValueError("the code verifier needs at least one test")
    if not isinstance(completion, str):
        return 0.0
    try:
        return run_tests(extract_code(completion), list(tests), limits, allow_unsandboxed=allow_unsandboxed).fraction
    except SandboxUnavailable:
        raise
    except Exception:  # a verifier must never take training down
        return 0.0


@register("code")
def score(completion: str, tests: list[str]) -> float:
    return score_code(completion, tests)
