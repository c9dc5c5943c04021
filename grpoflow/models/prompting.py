"""How a task row becomes model text: one rendering for SFT, rollouts, evaluation and preflight,
and the tokens a completion stops at.

``plain`` is the tiny default's template, ``<question>\\nAnswer:\\n``; ``chat`` renders a system and a
user turn with the tokenizer's chat template and the generation prompt, as an instruct model was
trained to see them. A completion ends at the end-of-turn token (the one the template writes after
an assistant message) or at any of the tokenizer's and generation config's EOS tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grpoflow.config import PromptConfig

PLAIN_TEMPLATE = "{question}\nAnswer:\n"
_PROBE = "\u2063grpoflow\u2063"  # an assistant message the template will not alter


class PromptError(ValueError):
    """The tokenizer cannot render prompts as the params ask (e.g. chat style without a template)."""


def _as_list(ids: Any) -> list[int]:
    if ids is None:
        return []
    return [int(i) for i in ids] if isinstance(ids, Iterable) else [int(ids)]


class Prompter:
    """Renders questions and SFT targets for one tokenizer and ``prompt`` section."""

    def __init__(self, tokenizer: Any, cfg: PromptConfig | None = None, generation_eos: Any = None):
        self.tokenizer, self.cfg = tokenizer, cfg or PromptConfig()
        if self.cfg.style == "chat" and not getattr(tokenizer, "chat_template", None):
            raise PromptError(
                "prompt.style is 'chat' but the tokenizer has no chat template: use prompt.style: plain, or a "
                "model whose tokenizer has one"
            )
        ids = [self.end_of_turn_id(), *_as_list(tokenizer.eos_token_id), *_as_list(generation_eos)]
        self.stop_ids = list(dict.fromkeys(i for i in ids if i is not None))
        if not self.stop_ids:
            raise PromptError("the tokenizer has no EOS token: completions could never end")

    def _question(self, question: str) -> str:
        text = question.strip()
        return f"{text}\n{self.cfg.instruction.strip()}" if self.cfg.instruction else text

    def _messages(self, question: str) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.cfg.system}] if self.cfg.system else []
        return [*system, {"role": "user", "content": self._question(question)}]

    def prompt(self, question: str) -> str:
        """The text the model sees for ``question``; tokenize it with ``add_special_tokens=False``."""
        if self.cfg.style == "plain":
            return PLAIN_TEMPLATE.format(question=self._question(question))
        return self.tokenizer.apply_chat_template(self._messages(question), add_generation_prompt=True, tokenize=False)

    def prompt_ids(self, question: str) -> list[int]:
        """The prompt's token ids, as every path (SFT, HF and vLLM rollouts, evaluation) feeds them."""
        return list(self.tokenizer(self.prompt(question), add_special_tokens=False)["input_ids"])

    def target_ids(self, solution: str) -> list[int]:
        """An SFT target: the solution's tokens, then the token that ends the turn."""
        return list(self.tokenizer(solution.strip(), add_special_tokens=False)["input_ids"]) + [self.stop_ids[0]]

    def end_of_turn_id(self) -> int | None:
        """The first token the chat template writes after an assistant message (``<|im_end|>``,
        ``<|eot_id|>``...); for plain prompts, the EOS token."""
        if self.cfg.style == "plain":
            return self.tokenizer.eos_token_id
        messages = [*self._messages("q"), {"role": "assistant", "content": _PROBE}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False)
        after = text[text.rindex(_PROBE) + len(_PROBE) :]
        ids = self.tokenizer(after, add_special_tokens=False)["input_ids"]
        special = set(getattr(self.tokenizer, "all_special_ids", []))
        return next((i for i in ids if i in special), self.tokenizer.eos_token_id)


def prompter_for(model: Any, tokenizer: Any, cfg: PromptConfig) -> Prompter:
    """The prompter of a loaded model: its tokenizer, and its generation config's EOS tokens too."""
    generation = getattr(model, "generation_config", None)
    return Prompter(tokenizer, cfg, getattr(generation, "eos_token_id", None))
