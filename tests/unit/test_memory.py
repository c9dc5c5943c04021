"""What a run's memory record counts (grpoflow/rl/memory.py): weights, the gradients of trained
weights and the optimizer's states, from the tensors themselves."""

from __future__ import annotations

import pytest
import torch

from grpoflow.rl.memory import MIB, current_memory_mb, model_state


class Engine:
    """What model_state reads of a DeepSpeed engine: an optimizer, wrapped the way bf16 or ZeRO wrap it."""

    def __init__(self, optimizer):
        self.optimizer = optimizer


class Wrapper:
    def __init__(self, optimizer):
        self.optimizer = optimizer


def test_a_models_state_by_hand_before_and_after_adamws_first_step():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 2))
    model[0].requires_grad_(False)  # frozen, as a LoRA trunk's own weights
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    engine = Engine(Wrapper(opt))
    before = model_state(model, engine)
    frozen, trained = 256 * 256 + 256, 256 * 2 + 2
    assert before["parameters"] == frozen + trained and before["trainable_parameters"] == trained
    assert before["weights_mb"] == pytest.approx((frozen + trained) * 4 / MIB)
    assert before["gradients_mb"] == pytest.approx(trained * 4 / MIB)
    assert before["optimizer_mb"] == 0.0  # AdamW makes its moments at the first step
    model(torch.randn(3, 256)).sum().backward()
    opt.step()
    after = model_state(model, engine)
    # two fp32 moments per trained weight, and a scalar step count per tensor (fp32 in torch's AdamW)
    assert after["optimizer_mb"] == pytest.approx((2 * trained * 4 + 2 * 4) / MIB)


def test_the_memory_in_use_is_the_resident_set_on_a_cpu():
    held = current_memory_mb()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    assert current_memory_mb() - held == pytest.approx(64, abs=8)
    del block


def test_a_runs_models_by_role_a_lora_reference_costing_nothing_of_its_own(tmp_path):
    from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
    from grpoflow.config import validate_params
    from grpoflow.rl.memory import run_models
    from grpoflow.rl.run import build_rl_run
    from tests.unit import rl_workspace

    ws = rl_workspace.build(tmp_path)
    small = {"rl": {"steps": 1, "prompts_per_step": 2, "num_generations": 2, "engine": {"micro_batch_size": 4}}}

    def models(extra: dict) -> dict:
        params = validate_params({**small, **extra, "grpo": {"beta": 0.04}})
        return run_models(build_rl_run(params, GRPO, data_dir=ws / "data", reference_dir=ws / "ref"))

    full, lora = models({}), models({"model": {"lora": {"rank": 2, "alpha": 4}}})
    # Full fine-tuning: a frozen copy of the policy is the reference, every policy weight trains.
    assert set(full) == {"policy", "reference"} and full["reference"]["trainable_parameters"] == 0
    assert full["policy"]["trainable_parameters"] == full["policy"]["parameters"] == full["reference"]["parameters"]
    # LoRA: the reference is the policy with its adapters off, and only the adapters train.
    assert set(lora) == {"policy"} and 0 < lora["policy"]["trainable_parameters"] < full["policy"]["parameters"]
