"""Models: the tiny offline default (tokenizer trained here, LM initialised from scratch) and any
``transformers`` causal LM by path or hub name for real runs.

Both end up as an ordinary Hugging Face checkpoint directory, loadable with
``AutoModelForCausalLM`` / ``AutoTokenizer`` and by vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from grpoflow.config import ModelConfig
from grpoflow.models.attention import use_own_attention
from grpoflow.models.device import compute_device
from grpoflow.models.model_source import hub_offline, looks_local_path

EOS = "<|endoftext|>"
PAD = "<|pad|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained offline on ``texts``.

    Digits are split one per token before BPE sees them: a tokenizer that merges "12" and "123"
    into unrelated tokens makes arithmetic much harder for a small model (as LLaMA and Qwen do).
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, padding_side="left")


def build_tiny_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerFast, seed: int) -> PreTrainedModel:
    """A randomly initialised causal LM of the size in ``cfg``, seeded for reproducibility."""
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_length,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = Qwen2Config(**common) if cfg.arch == "qwen2" else LlamaConfig(**common)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


def save_pretrained(model: PreTrainedModel, tokenizer, path: str | Path) -> Path:
    """Save ``model`` and ``tokenizer`` as a Hugging Face checkpoint directory."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def load_pretrained(
    name_or_path: str | Path, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
):
    """``(model, tokenizer)`` from a local checkpoint directory or a hub name, the model on ``device``
    (default: the process's, :func:`grpoflow.models.device.compute_device`).

    A path that does not exist is an error before anything is downloaded; so is a hub name
    while ``HF_HUB_OFFLINE`` is set and the name is not in the local cache.
    """
    name = str(name_or_path)
    looks_local = looks_local_path(name)
    if looks_local and not Path(name).is_dir():
        raise FileNotFoundError(f"model path {name!r} does not exist (or is not a directory)")
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; ask again here so that setting it
    # later still means "never touch the network" instead of minutes of connection retries.
    local_only = hub_offline() or looks_local
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, local_files_only=local_only)
    except OSError as exc:
        if local_only and not looks_local:
            raise FileNotFoundError(
                f"model {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                "download it where a hub is reachable, or point name_or_path at a local directory"
            ) from exc
        raise
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return use_own_attention(model).to(device or compute_device()), tokenizer


def load_frozen(path: str | Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A model in eval mode with no gradients, in ``dtype``, on the process's device: the reference policy."""
    model, _ = load_pretrained(path, dtype)
    return model.eval().requires_grad_(False)
