"""A tiny Llama with a real chat template and special tokens, built locally (no download): the
chat, end-of-turn and LoRA paths of a pretrained instruct model, at test speed."""

from __future__ import annotations

from pathlib import Path

from grpoflow.config import ModelConfig
from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
# The ChatML form SmolLM2 and Qwen2.5 use.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TEXTS = [
    f"Tom has {a} apples and gets {b} more. How many?\n{a}+{b}={a + b}\n#### {a + b}"
    for a in range(9)
    for b in range(9)
]


def build_chat_model(out: Path) -> Path:
    """Save a tiny Llama whose tokenizer has a chat template and ``<|im_end|>`` as its end of turn."""
    tok = train_tokenizer(TEXTS * 3, vocab_size=160)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tok.chat_template = CHAT_TEMPLATE
    cfg = ModelConfig(arch="llama", hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_length=256)
    model = build_tiny_model(cfg, tok, seed=0)
    model.generation_config.eos_token_id = [tok.convert_tokens_to_ids(IM_END), tok.eos_token_id]
    save_pretrained(model, tok, out)
    return out
