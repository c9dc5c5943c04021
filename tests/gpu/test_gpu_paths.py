"""GPU-only paths: run with `pytest -m gpu` where CUDA is present (skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _tiny(tmp_path):
    from grpoflow.config import ModelConfig
    from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer

    texts = [f"{i}+{i}={2 * i}\n#### {2 * i}" for i in range(300)]
    tok = train_tokenizer(texts, 300)
    model = build_tiny_model(
        ModelConfig(vocab_size=300, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256), tok, seed=0
    )
    save_pretrained(model, tok, tmp_path)
    return model, tok


def _project_with_sft(tmp_path, name: str, overrides: dict):
    """A copy of this checkout with a params file of the tiny default shrunk to a few steps plus
    ``overrides``, and its SFT reference built by dvc: (project, params path, environment)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from grpoflow.provenance import copy_checkout
    from tests.e2e.conftest import SMOKE_OVERRIDES, use_params, write_params

    project = copy_checkout(Path(__file__).resolve().parents[2], tmp_path / "project")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    rel = write_params(project, name, {**SMOKE_OVERRIDES, **overrides})
    use_params(project, rel)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DVC_NO_ANALYTICS": "1"}
    sft = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "sft"], cwd=project, env=env, capture_output=True, text=True
    )
    assert sft.returncode == 0, sft.stdout[-3000:] + sft.stderr[-3000:]
    return project, rel, env


def test_deepspeed_bf16_zero2_step_on_cuda(tmp_path):
    from grpoflow.config import EngineConfig
    from grpoflow.models.engine import build_engine, use_bf16

    model, tok = _tiny(tmp_path)
    cfg = EngineConfig(zero_stage=2, micro_batch_size=4, lr=1e-3)
    engine = build_engine(model.cuda(), cfg, 8)
    assert engine.device.type == "cuda" and use_bf16(cfg) == torch.cuda.is_bf16_supported()
    ids = tok(["1+1=2"] * 4, return_tensors="pt")["input_ids"].cuda()
    before = [p.detach().float().clone() for p in engine.module.parameters()]
    for _ in range(2):
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
    assert any(not torch.equal(b, p.detach().float()) for b, p in zip(before, engine.module.parameters()))


def test_vllm_cuda_rollout_and_weight_sync(tmp_path):
    pytest.importorskip("vllm")
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine

    model, tok = _tiny(tmp_path)
    engine = VLLMRolloutEngine(str(tmp_path), tok, seed=0, max_model_len=128, gpu_memory_utilization=0.2)
    a = engine.generate(["1+1="], 4, Sampling(temperature=1.0, max_new_tokens=8), seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    engine.sync_weights(model.cuda())
    b = engine.generate(["1+1="], 4, Sampling(temperature=1.0, max_new_tokens=8), seed=0)
    assert a.completion_ids.shape == b.completion_ids.shape == (4, 8)
    assert not torch.allclose(a.sampler_logprobs, b.sampler_logprobs)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_grpo_zero2_across_two_gpus_with_vllm_rollouts(tmp_path):
    """The multi-GPU launch of the README: torchrun, one process per GPU, ZeRO-2, bf16, a vLLM
    engine colocated on each rank, on the tiny default shrunk to a few steps."""
    import json
    import subprocess
    import sys

    from grpoflow.ports import free_port
    from tests.e2e.conftest import SMOKE_OVERRIDES

    project, rel, env = _project_with_sft(
        tmp_path, "gpu2", {"rl.rollout_engine": "vllm", "rl.engine.zero_stage": 2, "rl.engine.bf16": "auto"}
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        "-m",
        "tasks.grpo",
        "--params",
        rel,
        "--metrics",
        "metrics/gpu2.json",
        "--history",
        "metrics/gpu2.csv",
    ]
    out = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = json.loads((project / "metrics" / "gpu2.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == SMOKE_OVERRIDES["rl.steps"]


def test_tis_sees_the_bf16_vllm_sampler_mismatch_and_trains_through_it(tmp_path):
    """What the rollout correction is for (#12): vLLM samples in bf16 with its own kernels, so its
    log-probs differ from the trainer's; the mismatch is logged every step and TIS weights by it."""
    import csv
    import subprocess
    import sys

    pytest.importorskip("vllm")
    from tests.e2e.conftest import SMOKE_OVERRIDES

    project, rel, env = _project_with_sft(
        tmp_path,
        "tis",
        {"rl.rollout_engine": "vllm", "rl.engine.bf16": "auto", "rl.rollout_correction.mode": "token_truncate"},
    )
    cmd = [
        sys.executable,
        "-m",
        "tasks.grpo",
        "--params",
        rel,
        "--metrics",
        "metrics/tis.json",
        "--history",
        "metrics/tis.csv",
    ]
    out = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(project / "metrics" / "tis.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == SMOKE_OVERRIDES["rl.steps"]
    diffs = [float(r["rollout_logp_diff"]) for r in rows]
    assert all(0 < d < 1 for d in diffs), diffs  # bf16 sampler vs trainer: a mismatch, and a small one
    assert all(float(r["rollout_ratio_max"]) >= 1 for r in rows)  # some token the trainer finds likelier


def test_the_device_generator_comes_back_from_a_checkpoint_file(tmp_path):
    # Sampling on a GPU draws from the device's generator: a resumed run must get it back (grpoflow.models.rng).
    from grpoflow.models import rng

    torch.manual_seed(3)
    torch.rand(4, device="cuda")
    torch.save(rng.capture(), tmp_path / "rng.pt")
    uninterrupted = torch.rand(8, device="cuda")
    torch.rand(8, device="cuda")
    state = torch.load(tmp_path / "rng.pt", weights_only=True)
    assert rng.problem(state) is None and "cuda" in state
    rng.restore(state)
    assert torch.equal(torch.rand(8, device="cuda"), uninterrupted)
