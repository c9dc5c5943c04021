"""What checkpoint integrity costs: grpoflow's save (DeepSpeed's save + sha256 manifest + atomic
``latest``) over DeepSpeed's save alone, and verifying the manifest over DeepSpeed's load, for a
model of ``hidden`` width (about 30M parameters with AdamW state at the default).

Ratios near 1 mean detection of corrupt checkpoints is nearly free next to writing them.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from benchmarks.timing import best_of
from grpoflow.config import EngineConfig, ModelConfig
from grpoflow.models import checkpoint
from grpoflow.models.engine import build_engine
from grpoflow.models.modeling import build_tiny_model, train_tokenizer
from grpoflow.rl import loop_state
from grpoflow.rl.loop_state import LoopState


def run(hidden: int = 512, layers: int = 8) -> dict:
    tok = train_tokenizer([f"{i}+{i}={2 * i}" for i in range(500)], 384)
    model = build_tiny_model(
        ModelConfig(hidden_size=hidden, num_layers=layers, num_heads=8, intermediate_size=4 * hidden), tok, seed=0
    )
    engine = build_engine(model, EngineConfig(micro_batch_size=2), 2)
    ids = torch.randint(0, len(tok), (2, 32))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()  # optimizer state exists, as in any real checkpoint
    with tempfile.TemporaryDirectory() as tmp:
        plain, ours = Path(tmp) / "plain", Path(tmp) / "ours"
        steps = iter(range(1, 10**6))
        t_plain, t_ours = float("inf"), float("inf")
        for _ in range(5):  # alternated, so that disk and page-cache state favour neither
            t_plain = min(
                t_plain,
                best_of(lambda: engine.save_checkpoint(str(plain), tag=f"step_{next(steps):06d}"), repeats=1, warmup=0),
            )
            t_ours = min(
                t_ours,
                best_of(
                    lambda: loop_state.save(engine, ours, LoopState(step=next(steps)), "fp", keep=2),
                    repeats=1,
                    warmup=0,
                ),
            )
            for old in sorted(plain.glob("step_*"))[:-2]:  # the same retention for both
                shutil.rmtree(old)
        step = checkpoint.saved_steps(ours)[0]
        t_load = best_of(lambda: engine.load_checkpoint(str(ours), tag=f"step_{step:06d}"), repeats=3)
        t_verify = best_of(lambda: checkpoint.verify(ours, step), repeats=3)
        size = sum(p.stat().st_size for p in (ours / f"step_{step:06d}").rglob("*") if p.is_file())
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "checkpoint_mb": round(size / 2**20, 1),
        "deepspeed_save_s": round(t_plain, 3),
        "grpoflow_save_s": round(t_ours, 3),
        "save_overhead_ratio": round(t_ours / t_plain, 3),
        "deepspeed_load_s": round(t_load, 3),
        "verify_s": round(t_verify, 3),
        "verify_over_load": round(t_verify / t_load, 3),
    }
