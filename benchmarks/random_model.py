"""A model folder of a given shape with random weights: the config and tokenizer files of ``SRC``
(no weights travel to the GPU machine: SmolLM2-135M's are 540 MB) and weights that transformers
initialises from one seed, saved in fp32 as the converted folder is. Both sides of the GPU check's
step timing load this one folder. ``LAYERS`` keeps the config but its depth: the dry run's model
(on a CPU without native bf16 SmolLM2's 30 layers took 30 s a step, 2 layers 5 s).

    python -m benchmarks.random_model SRC OUT [SEED [LAYERS]]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def random_model(src: Path, out: Path, seed: int = 0, layers: int | None = None) -> int:
    """Write the random model to ``out`` (``layers`` deep where given); its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(src)
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json" and not f.name.endswith(".safetensors"):
            shutil.copy(f, out / f.name)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 3, 4):
        raise SystemExit(__doc__)
    seed = int(args[2]) if len(args) > 2 else 0
    layers = int(args[3]) if len(args) > 3 else None
    n = random_model(Path(args[0]), Path(args[1]), seed, layers)
    print(f"random model with {n} parameters saved to {args[1]}")
