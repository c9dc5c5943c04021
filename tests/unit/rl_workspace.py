"""The smallest workspace an RL run starts from, as the prepare and sft stages leave it: a split of
one-step problems and a saved tiny reference model with its own tokenizer."""

from __future__ import annotations

from pathlib import Path

from grpoflow.config import ModelConfig
from grpoflow.io import write_jsonl

SMALLEST = ModelConfig(hidden_size=32, num_layers=1, num_heads=1, intermediate_size=64, max_length=64)


def build(root: Path, problems: int = 8, model_config: ModelConfig = SMALLEST) -> Path:
    """Write ``root/data/{train,val}.jsonl`` (``problems`` rows, two of them for validation) and
    ``root/ref`` (a model of ``model_config``'s shape); return ``root``."""
    from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer

    rows = [
        {"id": str(i), "prompt": f"Tom has {i} apples. How many?", "reference_answer": str(i), "solution": f"#### {i}"}
        for i in range(problems)
    ]
    write_jsonl(root / "data" / "train.jsonl", rows)
    write_jsonl(root / "data" / "val.jsonl", rows[:2])
    tok = train_tokenizer([r["prompt"] + r["solution"] for r in rows] * 5, vocab_size=96)
    model = build_tiny_model(model_config, tok, 0)
    save_pretrained(model, tok, root / "ref")
    return root
