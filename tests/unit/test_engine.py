"""The training loop's parts, on hand-made inputs."""


import pytest

from grpoflow.config import validate_params
from grpoflow.engine import deepspeed_config


def test_deepspeed_batch_arithmetic():
    cfg = validate_params({}).rl.engine.model_copy(update={"micro_batch_size": 8})
    ds = deepspeed_config(cfg, batch_size=64, world_size=2)
    assert ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 2 == 64
    with pytest.raises(ValueError, match="does not split"):
        deepspeed_config(cfg, batch_size=60, world_size=8)
