"""Model and reward plumbing shared by the training stages: params -> objects."""

from __future__ import annotations

import torch

import verifiers
from grpoflow.config import Params
from grpoflow.modeling import load_pretrained
from grpoflow.rewards import RewardComponent, WeightedReward
from verifiers.math import score_batch


def _batch(name: str):
    if name == "math":
        return lambda completions, refs: score_batch(completions, refs, workers=1)
    fn = verifiers.get(name)
    return lambda completions, refs: [fn(c, r) for c, r in zip(completions, refs)]


def build_reward(params: Params) -> WeightedReward:
    return WeightedReward([RewardComponent(r.name, _batch(r.name), r.weight) for r in params.rewards])


def math_scorer():
    return _batch("math")


def load_frozen(path: str) -> torch.nn.Module:
    model, _ = load_pretrained(path)
    return model.eval().requires_grad_(False)


def build_rollout(kind: str, model: torch.nn.Module, tokenizer, model_path: str, params: Params):
    if kind == "vllm":
        from grpoflow.rollout.vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(model_path, tokenizer, seed=params.experiment.seed, max_model_len=params.model.max_length)
    from grpoflow.rollout.hf import HFRolloutEngine

    return HFRolloutEngine(model, tokenizer, batch_size=128)
