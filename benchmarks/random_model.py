"""A model folder of a given shape with random weights: the config and tokenizer files of ``SRC``
(no weights travel to the GPU machine: SmolLM2-135M's are 540 MB) and weights that transformers
initialises from one seed, saved in fp32 as the converted folder is. Both sides of the GPU check's
step timing load this one folder.

    python -m benchmarks.random_model SRC OUT [SEED]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def random_model(src: Path, out: Path, seed: int = 0) -> int:
    """Write the random model to ``out``; its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json" and not f.name.endswith(".safetensors"):
            shutil.copy(f, out / f.name)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 3):
        raise SystemExit(__doc__)
    n = random_model(Path(args[0]), Path(args[1]), int(args[2]) if len(args) == 3 else 0)
    print(f"random model with {n} parameters saved to {args[1]}")
