"""Every stage's compute on an accelerator, checked without one: real tiny steps of GRPO (LoRA,
shared-prefix groups, rollouts handed over on the CPU as vLLM hands them), PPO with its critic, SFT,
the reward model and evaluation run under the device audit (:mod:`tests.device_audit`), which fails
on any tensor that mixes devices. On a CUDA machine the same tests run on ``cuda:0``."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from packaging.version import Version

from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
from grpoflow.algorithms.ppo.update import ALGORITHM as PPO
from grpoflow.config import EngineConfig, validate_params
from grpoflow.models.device import compute_device, model_device
from grpoflow.rl.run import build_rl_run
from tests.device_audit import STAND_IN, DeviceMixError, OnDevice, audited
from tests.unit import rl_workspace, test_rl_run

TINY = {
    "rl": {
        **test_rl_run.TINY["rl"],
        "steps": 2,
        "entropy_coef": 0.01,  # a gradient whatever the rewards: the step's backward really runs
        "engine": {"micro_batch_size": 2, "lr": 0.01},
        "preflight": {"prompts": 2},
    },
    "ppo": {"critic_engine": {"micro_batch_size": 2}, "critic_warmup_steps": 1},
}


# Every option that builds tensors of its own in the step: RLOO advantages, KL folded into the reward,
# two passes (old log-probs), rollout correction on the sampler's log-probs, DAPO's overlong penalty and
# dynamic sampling, token-mean aggregation, the reference refreshed.
FAMILY = {
    "rl": {
        **TINY["rl"],
        "num_iterations": 2,
        "aggregation": "bnpo",
        "overlong_buffer": 2,
        "dynamic_sampling": {"enabled": True, "max_draws": 1},
        "rollout_correction": {"mode": "token_truncate", "cap": 2.0},
        "ref_sync_every": 1,
        "ref_sync_alpha": 0.5,
    },
    "grpo": {"advantage_estimator": "rloo", "kl_estimator": "k2", "kl_placement": "reward"},
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A prepared split and a saved tiny reference model, as the stages leave them."""
    return rl_workspace.build(tmp_path_factory.mktemp("audit"))


def _on_the_device(module: torch.nn.Module) -> bool:
    want = compute_device()
    return all(p.device == want for p in module.parameters())


# -- the audit itself ---------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
def test_the_audit_refuses_a_mix_and_lets_scalars_copies_and_host_reads_through():
    with audited() as mode:
        layer = torch.nn.Linear(3, 2).to(compute_device())
        x = torch.ones(4, 3, device=compute_device())
        assert compute_device() == STAND_IN and isinstance(layer.weight, OnDevice) and isinstance(x, OnDevice)
        with pytest.raises(DeviceMixError, match="addmm"):
            layer(torch.ones(4, 3))  # the bug's shape: a host batch into a model on the device
        with pytest.raises(DeviceMixError, match="isin"):
            torch.isin(x.long(), torch.tensor([1, 2]))  # and stop ids left on the host
        y = layer(x) * torch.tensor(2.0)  # a 0-dim host tensor joins as a scalar, as on CUDA
        y.sum().backward()
        assert isinstance(layer.weight.grad, OnDevice) and layer.weight.grad.shape == (2, 3)
        host = y.detach().cpu()
        assert not isinstance(host, OnDevice) and host.device.type == "cpu"
        expected = 2 * (torch.ones(4, 3) @ layer.weight.elem.detach().T + layer.bias.elem.detach())
        assert torch.allclose(host, expected)  # the numbers are real
        buffer = torch.zeros(2, 2, device=compute_device())
        assert buffer.add_(1.0) is buffer and buffer.tolist() == [[1.0, 1.0], [1.0, 1.0]]
        assert mode is not None and mode.ops > 0


# -- the RL stages --------------------------------------------------------------------------------------


class _HostRollouts:
    """The run's transformers engine, handing its rollouts over on the CPU, as vLLM's engine does."""

    def __init__(self):
        self.inner = None

    def generate(self, prompts, n, sampling, seed):
        return self.inner.generate(prompts, n, sampling, seed).to("cpu")

    def sync_weights(self, model):
        self.inner.sync_weights(model)

    def close(self):
        self.inner.close()


def _trained(run) -> list[dict]:
    before = {n: p.detach().clone() for n, p in run.engine.module.named_parameters() if p.requires_grad}
    steps: list[dict] = []
    run.trainer.train(on_step=lambda step, m: steps.append(m), evaluate=run.evaluate)
    after = dict(run.engine.module.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before), "the step trained nothing"
    return steps


@pytest.mark.parametrize(
    "algorithm, overrides",
    [
        pytest.param(GRPO, {}, id="grpo-shared-prefix"),
        pytest.param(GRPO, {"model": {"lora": {"rank": 4, "alpha": 8}}}, id="grpo-lora"),
        pytest.param(
            GRPO, {"rl": {**TINY["rl"], "engine": {**TINY["rl"]["engine"], "shared_prefix": False}}}, id="grpo-rows"
        ),
        pytest.param(PPO, {}, id="ppo-critic"),
        pytest.param(GRPO, FAMILY, id="grpo-family-options"),
        pytest.param(PPO, FAMILY, id="ppo-family-options"),
    ],
)
def test_an_rl_step_computes_on_the_device_only(workspace, algorithm, overrides):
    params = validate_params({**TINY, **overrides})
    with audited():
        run = build_rl_run(params, algorithm, data_dir=workspace / "data", reference_dir=workspace / "ref")
        assert run.engine.device == compute_device() and _on_the_device(run.engine.module)
        if isinstance(run.reference, torch.nn.Module):  # LoRA's reference is the policy, adapters off
            assert _on_the_device(run.reference)
        for engine in run.engines.values():
            assert _on_the_device(engine.module)  # PPO's critic
        assert run.preflight() is not None
        steps = _trained(run)
    assert len(steps) == 2 and torch.isfinite(torch.tensor(steps[-1]["loss"]))  # PPO: step 1 warms the critic up
    assert "val_accuracy" in steps[-1]


def test_rollouts_handed_over_on_the_host_are_moved_to_the_device_before_the_update(workspace):
    host = _HostRollouts()
    with audited():
        run = build_rl_run(
            validate_params(TINY), GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref", rollout=host
        )
        from grpoflow.rollout.hf import HFRolloutEngine

        host.inner = HFRolloutEngine(run.engine.module, run.tokenizer, stop_ids=run.prompter.stop_ids)
        _trained(run)


# -- SFT, the reward model, evaluation --------------------------------------------------------------------


def _tiny_policy(workspace):
    from grpoflow.models.modeling import load_pretrained

    return load_pretrained(workspace / "ref")


def test_sft_steps_on_the_device(workspace):
    from grpoflow.models.engine import build_engine
    from grpoflow.models.prompting import Prompter
    from grpoflow.trainers.sft import build_examples, train_sft

    with audited():
        model, tok = _tiny_policy(workspace)
        assert model_device(model) == compute_device()
        rows = [{"prompt": f"Tom has {i} apples.", "solution": f"#### {i}"} for i in range(4)]
        examples = build_examples(rows, Prompter(tok), max_length=64)
        engine = build_engine(model, EngineConfig(micro_batch_size=2, lr=0.01), 4)
        before = [p.detach().clone() for p in engine.module.parameters()]
        losses = train_sft(engine, examples, epochs=1.0, batch_size=4, pad_id=tok.pad_token_id, seed=0)
        assert len(losses) == 1 and _on_the_device(engine.module)
        assert any(not torch.equal(b, p.detach()) for b, p in zip(before, engine.module.parameters()))


# torch 2.11 (the lent image's) cannot make a view of the audit's wrapper tensor under inference_mode
# ("Cannot set version_counter for inference tensor", a rotary embedding's buffer in the reward model's
# scoring pass); 2.13 can, and on CUDA there is no wrapper. benchmarks/gpu/old_versions.sh found it.
@pytest.mark.skipif(
    not torch.cuda.is_available() and Version(torch.__version__).release < (2, 13),
    reason="the audit's stand-in tensor takes no inference_mode view before torch 2.13 (a limit of the audit)",
)
def test_the_reward_model_trains_scores_and_evaluates_on_the_device(workspace, tmp_path):
    from grpoflow.data.pairs import Pair, encode_pairs
    from grpoflow.evaluation.pairwise import pairwise_eval
    from grpoflow.models.engine import build_engine
    from grpoflow.models.modeling import save_pretrained
    from grpoflow.models.prompting import Prompter
    from grpoflow.models.reward_model import RewardModelScorer, load_reward_model, reward_model_from_policy
    from grpoflow.trainers.reward_model import train_reward_model

    policy, tok = _tiny_policy(workspace)  # saved from the host: the audit's tensors have no storage to write
    save_pretrained(reward_model_from_policy(policy, tok), tok, tmp_path / "rm")
    pairs = [Pair(f"Tom has {i} apples.", f"#### {i}", f"#### {i + 1}", str(i), "test") for i in range(4)]
    encoded, _ = encode_pairs(pairs, Prompter(tok), 64)
    with audited():
        rm, _ = load_reward_model(tmp_path / "rm")
        engine = build_engine(rm, EngineConfig(micro_batch_size=2, lr=0.01), 4)
        losses = train_reward_model(engine, encoded, epochs=1.0, batch_size=4, pad_id=tok.pad_token_id, seed=0)
        assert len(losses) == 1 and _on_the_device(engine.module)
        assert len(pairwise_eval(engine.module, encoded, tok.pad_token_id).margins) == 4
        scorer = RewardModelScorer(tmp_path / "rm", batch_size=2)
        scores = scorer(["#### 1", "#### 2", "#### 3"], [{"prompt": "Tom has 1 apples."}] * 3)
        assert len(scores) == 3 and _on_the_device(scorer.model)


def test_evaluation_generates_scores_and_measures_held_out_loss_on_the_device(workspace):
    from grpoflow.evaluation.accuracy import greedy_accuracy, heldout_loss, sampled_metrics
    from grpoflow.models.prompting import Prompter
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.hf import HFRolloutEngine

    rows = [
        {"id": str(i), "prompt": f"Tom has {i} apples.", "reference_answer": str(i), "solution": f"#### {i}"}
        for i in range(3)
    ]
    score = lambda texts, rs: [1.0 if t.strip() else 0.0 for t in texts]  # noqa: E731
    with audited():
        model, tok = _tiny_policy(workspace)
        prompter = Prompter(tok)
        engine = HFRolloutEngine(model, tok)
        # The accelerator's decode: the static KV cache (#49), run eagerly here; a graph only on CUDA.
        assert engine._static() == ((True, True) if torch.cuda.is_available() else (True, False))
        greedy = greedy_accuracy(engine, rows, score, prompter, max_new_tokens=4)
        sampled = sampled_metrics(engine, rows, score, str, prompter, n=2, k=2, sampling=Sampling(1.0, 1.0, 4), seed=0)
        loss = heldout_loss(model, prompter, rows)
        assert engine.static is None  # no fallback was taken: the static step ran under the audit
    assert len(greedy.outputs) == 3 and 0.0 <= sampled.pass_at_1 <= 1.0 and loss > 0


# -- mutants: device bugs put back one at a time, each caught (#49) ------------------------------------


class _TorchWithout:
    """The ``torch`` a module sees, with ``name`` forgetting its ``device`` argument: the bug of a
    buffer or constant built on the host."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        real = getattr(torch, attr)
        if attr != self._name:
            return real
        return lambda *args, device=None, **kwargs: real(*args, **kwargs)


def _static_generation(workspace):
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.hf import HFRolloutEngine

    model, tok = _tiny_policy(workspace)
    engine = HFRolloutEngine(model, tok, static=True)
    return engine.generate(["Tom has 3 apples.", "Ann has 12."], 2, Sampling(1.0, 1.0, 4), seed=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
@pytest.mark.parametrize(
    "module, name",
    [
        ("grpoflow.rollout.static_decode", "zeros"),  # the static step's mask, token and position buffers
        ("grpoflow.rollout.decode", "zeros"),  # the loop's done flags
        ("grpoflow.rollout.decode", "tensor"),  # the stop ids
        ("grpoflow.rollout", "arange"),  # the completion mask's positions
        ("grpoflow.rollout.hf", "arange"),  # sample -> prompt rows
    ],
)
def test_a_host_buffer_in_the_gpus_decode_path_fails_the_audit(workspace, monkeypatch, module, name):
    import importlib

    with audited():
        _static_generation(workspace)  # as written: passes
        monkeypatch.setattr(importlib.import_module(module), "torch", _TorchWithout(name))
        with pytest.raises(DeviceMixError):
            _static_generation(workspace)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
def test_what_cuda_refuses_and_the_old_audit_let_through_is_caught():
    """Three device bugs the audit missed on ae1589d (each passed it then): a CPU generator drawing for
    a device tensor, and a 0-dim host tensor in ``stack`` / ``cat``; CUDA refuses all three."""
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.decode import next_tokens

    with audited():
        logits = torch.randn(2, 5, device=compute_device())
        loss = logits.sum()
        with pytest.raises(DeviceMixError, match="generator"):
            next_tokens(logits, Sampling(1.0, 1.0, 4), generator=torch.Generator().manual_seed(0))
        with pytest.raises(DeviceMixError, match="generator"):
            logits.clone().uniform_(generator=torch.Generator())
        with pytest.raises(DeviceMixError, match="stack"):
            torch.stack([loss, torch.tensor(0.0)])
        with pytest.raises(DeviceMixError, match="cat"):
            torch.cat([logits.flatten(), torch.tensor([0.0])])
        # Still let through where CUDA lets them: a 0-dim host tensor in element-wise arithmetic.
        assert isinstance(loss * torch.tensor(2.0) + torch.where(logits > 0, logits, torch.tensor(0.0)).sum(), OnDevice)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
def test_new_tensor_of_a_device_tensor_is_on_the_device_without_a_false_alarm():
    with audited():
        x = torch.ones(3, device=compute_device())
        made = x.new_tensor([1.0, 2.0, 3.0])
        assert isinstance(made, OnDevice) and made.dtype == x.dtype and (x + made).tolist() == [2.0, 3.0, 4.0]
        assert x.new_tensor([1, 2], dtype=torch.long).dtype == torch.long
        host = x.new_tensor([1.0], device="cpu")
        assert not isinstance(host, OnDevice) and host.device.type == "cpu"


# -- host syncs (#49) ------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
def test_the_accelerators_decode_reads_the_device_once_per_chunk_of_tokens(workspace):
    """A device-to-host read per generated token stalls a GPU rollout at every step: the static decode
    (the accelerator's) asks whether every row stopped once per STOP_CHECK_EVERY tokens, and the
    prefill's grouping of samples by prompt once per batch."""
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.decode import STOP_CHECK_EVERY
    from grpoflow.rollout.hf import HFRolloutEngine

    tokens = 4 * STOP_CHECK_EVERY
    with audited() as mode:
        model, tok = _tiny_policy(workspace)
        engine = HFRolloutEngine(model, tok)
        mode.syncs.clear()
        out = engine.generate(["Tom has 3 apples.", "Ann has 12."], 2, Sampling(1.0, 1.0, tokens), seed=0)
    chunks = -(-out.completion_ids.shape[1] // STOP_CHECK_EVERY)
    # One read per chunk, and per batch: transformers' check of the prefill's padding mask (two reads in
    # masking_utils._ignore_causal_mask_sdpa), the samples' prompt groups (unique_consecutive) and the
    # texts' decoding (tolist). Per token, 32 here, there used to be one read or two.
    assert mode.syncs["_local_scalar_dense"] <= chunks + 2, dict(mode.syncs)
    assert mode.syncs["unique_consecutive"] == 1 and mode.syncs["tolist"] == 1, dict(mode.syncs)
    assert sum(mode.syncs.values()) <= tokens // STOP_CHECK_EVERY + 4 < tokens, dict(mode.syncs)


# Every read of the device a GRPO step makes, by the function of the project that makes it (the audit's
# ``readers``), and why the hot path keeps it (#49). The rollout's reads grow with its chunks of tokens;
# every other is one read a step whatever the micro-batches, passes and packs, except the optimizer
# step's guard, one per optimizer step. Before #49's cuts a step of this size made 57 reads, 24 after
# its first round (one per micro-batch, one per pack), 9 now.
STEP_READS = {
    "grpoflow.rollout.decode:decode": "the samples' prompt groups; whether every row has stopped, per chunk",
    "grpoflow.rollout.hf:generate": "the completions' tokens, for their texts",
    "grpoflow.rl.advantages:_check_rewards": "the rewards finite, before they become advantages",
    "grpoflow.rl.ranks:token_scales": "every micro-batch's token count, at once, for the loss scales",
    "grpoflow.rl.shared_prefix:read_rows": "the batch's shared-prefix layout, for every pass and micro-batch",
    "grpoflow.rl.learner:_checked_grad_norm": "the losses finite and the gradient norm, before weights move",
    "grpoflow.rl.learner:means": "the update's metrics, at once",
    "grpoflow.rl.trainer:_batch_metrics": "the step's rewards, lengths and token counts, at once",
    # Not ours: transformers asks whether a row's padding mask can be skipped (two reads a forward pass,
    # masking_utils), on the passes that do not pack shared prompts: single-row micro-batches, or
    # rl.engine.shared_prefix off. A packed pass hands the model its own 4-D mask, which it takes as is.
    "grpoflow.rl.logprobs:row_logits": "transformers' padding-mask check, per unpacked forward pass",
}
ROLLOUT_READERS = {"grpoflow.rollout.decode:decode", "grpoflow.rollout.hf:generate"}
UNPACKED = "grpoflow.rl.logprobs:row_logits"


def _second_step_readers(workspace, overrides: dict, algorithm=GRPO) -> Counter:
    """The audit's reads of a run's second step (the first builds what later steps reuse), by reader."""
    params = validate_params({**TINY, "rl": {**TINY["rl"], **overrides}})
    with audited() as mode:
        run = build_rl_run(params, algorithm, data_dir=workspace / "data", reference_dir=workspace / "ref")
        run.trainer.step(0)
        mode.readers.clear()
        run.trainer.step(1)
    return mode.readers


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
def test_a_training_steps_device_reads_are_each_named_and_a_fixed_few(workspace):
    """A step's reads come from :data:`STEP_READS` alone (a new read in the hot path fails here, by
    name), one each outside the rollout, as many with two packed micro-batches as with one; single-row
    micro-batches (nothing to pack) add transformers' two a forward pass, and no more."""
    one = _second_step_readers(workspace, {"engine": {"micro_batch_size": 4, "lr": 0.01}})
    two = _second_step_readers(workspace, {"engine": {"micro_batch_size": 2, "lr": 0.01}})
    for readers in (one, two):
        assert set(readers) <= set(STEP_READS), dict(readers)
        update = {k: n for k, n in readers.items() if k not in ROLLOUT_READERS}
        assert update == dict.fromkeys(set(STEP_READS) - ROLLOUT_READERS - {UNPACKED}, 1), update
        assert sum(readers.values()) <= len(STEP_READS) + 2, dict(readers)  # 8 tokens: 2 chunks
    rows = _second_step_readers(workspace, {"engine": {"micro_batch_size": 1, "lr": 0.01}})
    assert set(rows) <= set(STEP_READS), dict(rows)
    assert rows[UNPACKED] <= 2 * 4 * 2, dict(rows)  # four micro-batches, the reference's pass and the update's
    others = {k: n for k, n in rows.items() if k not in ROLLOUT_READERS | {UNPACKED}}
    assert others == dict.fromkeys(set(STEP_READS) - ROLLOUT_READERS - {UNPACKED}, 1), dict(rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit is CUDA itself")
def test_a_ppo_steps_reads_do_not_grow_with_its_micro_batches(workspace):
    """PPO's critic passes take the batch's layout as the policy's do: its step reads as often with
    two packed micro-batches as with one (its critic's step, value and metric reads, once each)."""

    def update_reads(micro: int) -> dict:
        readers = _second_step_readers(workspace, {"engine": {"micro_batch_size": micro, "lr": 0.01}}, PPO)
        return {k: n for k, n in readers.items() if k not in ROLLOUT_READERS}

    one, two = update_reads(4), update_reads(2)
    assert one == two and one["grpoflow.rl.shared_prefix:read_rows"] == 1, (one, two)
