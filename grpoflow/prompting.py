"""How a task row becomes model text: one prompt template for SFT, rollouts and evaluation."""

from __future__ import annotations

PROMPT_TEMPLATE = "{question}\nAnswer:\n"


def format_prompt(question: str) -> str:
    """The text the model sees for ``question``."""
    return PROMPT_TEMPLATE.format(question=question.strip())


def sft_completion(solution: str) -> str:
    """The target text after the prompt: the worked solution (ending '#### n')."""
    return solution.strip()
