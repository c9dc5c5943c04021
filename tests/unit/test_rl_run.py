"""An RL run built in one place: the reference is loaded exactly when the algorithm penalises KL
to it, PPO reads only its own KL coefficient, and the fingerprint follows the training code."""

from __future__ import annotations

import math

import pytest

from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
from grpoflow.algorithms.ppo.update import ALGORITHM as PPO
from grpoflow.config import validate_params
from grpoflow.metric_names import KL_COEF
from grpoflow.rl.run import build_rl_run, fingerprint, needs_reference
from tests.unit import rl_workspace

TINY = {
    "rl": {
        "steps": 1,
        "prompts_per_step": 2,
        "num_generations": 2,
        "checkpoint_every": 100,
        "eval_every": 100,
        "sampling": {"max_completion_length": 4},
        "engine": {"micro_batch_size": 4},
    },
    "ppo": {"critic_engine": {"micro_batch_size": 4}},
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A prepared split and a saved tiny reference model, as the stages leave them."""
    return rl_workspace.build(tmp_path_factory.mktemp("run"))


@pytest.mark.parametrize(
    "raw, algorithm, expected",
    [
        ({}, GRPO, True),
        ({"grpo": {"beta": 0}}, GRPO, False),
        ({}, PPO, True),
        ({"ppo": {"kl_coef": 0}}, PPO, False),
        # Each algorithm reads only its own coefficient.
        ({"grpo": {"beta": 0}}, PPO, True),
        ({"ppo": {"kl_coef": 0}}, GRPO, True),
    ],
)
def test_the_reference_is_needed_exactly_when_the_algorithm_penalises_kl(raw, algorithm, expected):
    assert needs_reference(validate_params(raw), algorithm) is expected


def test_ppo_without_kl_loads_no_reference_and_trains_whatever_grpo_beta_says(workspace):
    # The bug: with ppo.kl_coef 0 no reference was loaded, but grpo.beta (0.04 by default) made
    # the shared trainer raise "beta > 0 needs a reference model".
    params = validate_params({**TINY, "ppo": {**TINY["ppo"], "kl_coef": 0.0}})
    run = build_rl_run(params, PPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    assert run.trainer.ref is None and run.reference is None and params.grpo.beta == 0.04
    steps = []
    run.trainer.train(on_step=lambda step, m: steps.append(m))
    assert len(steps) == 1 and steps[0][KL_COEF] == 0.0 and steps[0]["kl"] == 0.0


@pytest.mark.parametrize("bf16", [False, True])
def test_the_reference_runs_in_the_policys_dtype_and_a_bf16_step_trains(workspace, bf16):
    import torch

    params = validate_params({**TINY, "rl": {**TINY["rl"], "engine": {**TINY["rl"]["engine"], "bf16": bf16}}})
    run = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    dtype = torch.bfloat16 if bf16 else torch.float32
    assert {p.dtype for p in run.engine.module.parameters()} == {p.dtype for p in run.reference.parameters()} == {dtype}
    steps = []
    run.trainer.train(on_step=lambda step, m: steps.append(m))
    assert len(steps) == 1 and torch.isfinite(torch.tensor(steps[0]["loss"]))


def test_ppo_logs_its_own_kl_coefficient(workspace):
    params = validate_params({**TINY, "ppo": {**TINY["ppo"], "kl_coef": 0.07}})
    run = build_rl_run(params, PPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    steps = []
    run.trainer.train(on_step=lambda step, m: steps.append(m))
    assert run.reference is run.trainer.ref is not None and steps[0][KL_COEF] == pytest.approx(0.07)


def test_the_fingerprint_changes_with_what_shapes_training_only(workspace):
    base = validate_params(TINY)
    fp = lambda p, algo=GRPO, seed=0: fingerprint(p, algo, workspace / "data", workspace / "ref", seed)  # noqa: E731
    assert fp(base) == fp(validate_params(TINY))
    assert fp(base) != fp(validate_params({**TINY, "grpo": {"beta": 0.1}}))
    assert fp(base, PPO) == fp(validate_params({**TINY, "grpo": {"beta": 0.1}}), PPO)  # PPO ignores grpo.*
    assert fp(base) == fp(validate_params({**TINY, "evaluate": {"k": 2}}))  # evaluation does not shape training
    assert fp(base) != fp(base, seed=1)


def test_a_lora_run_checkpoints_its_adapters_resumes_them_and_exports_a_merged_model(workspace, tmp_path):
    """Checkpoints hold the adapters (and their optimizer state) only; a new run resumes them; the
    export is a plain model, with no peft in it, whose outputs are the trained policy's."""
    import torch

    from grpoflow.models.modeling import load_pretrained
    from grpoflow.rl.logprobs import completion_logprobs
    from tests.chat_model import build_chat_model

    ref = build_chat_model(tmp_path / "chat")
    params = validate_params(
        {
            **TINY,
            "rl": {**TINY["rl"], "engine": {"micro_batch_size": 4, "lr": 0.05}},
            "model": {"lora": {"rank": 4, "alpha": 8}},
            "prompt": {"style": "chat"},
        }
    )
    run = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=ref)
    with torch.no_grad():  # B starts at zero; moved off it, the KL term has a gradient whatever the rewards
        for name, param in run.engine.module.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    before = {n: p.detach().clone() for n, p in run.engine.module.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)  # only the adapters train
    state = run.trainer.train()
    trained = {n: p.detach().clone() for n, p in run.engine.module.named_parameters() if p.requires_grad}
    assert any(not torch.equal(before[n], trained[n]) for n in trained)
    run.save(tmp_path / "ckpt", state, {"note": "stage state"})
    run.export(tmp_path / "out")

    again = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=ref)
    stage_state, skipped = again.resume(tmp_path / "ckpt")
    assert stage_state == {"note": "stage state"} and skipped == []
    resumed = {n: p.detach() for n, p in again.engine.module.named_parameters() if p.requires_grad}
    assert all(torch.equal(resumed[n], trained[n]) for n in trained)

    exported, _ = load_pretrained(tmp_path / "out")
    assert not any("lora" in n for n, _ in exported.named_parameters())
    ids = torch.randint(3, 100, (2, 10))
    want, _ = completion_logprobs(run.engine.module, ids, torch.ones_like(ids), 5)
    got, _ = completion_logprobs(exported, ids, torch.ones_like(ids), 5)
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("algorithm", [GRPO, PPO])
def test_a_run_with_the_grpo_family_options_trains_and_reports_them(workspace, algorithm):
    # KL folded into the reward (k2), RLOO advantages, an entropy bonus, DAPO's overlong buffer and
    # dynamic sampling, all at once on the real engines: one step trains, and reports each.
    rl = {
        **TINY["rl"],
        "entropy_coef": 0.01,
        "overlong_buffer": 2,
        "dynamic_sampling": {"enabled": True, "max_draws": 1},
    }
    params = validate_params(
        {**TINY, "rl": rl, "grpo": {"advantage_estimator": "rloo", "kl_estimator": "k2", "kl_placement": "reward"}}
    )
    run = build_rl_run(params, algorithm, data_dir=workspace / "data", reference_dir=workspace / "ref")
    before = [p.detach().clone() for p in run.trainer.engine.module.parameters()]
    steps = []
    run.trainer.train(on_step=lambda step, m: steps.append(m))
    (m,) = steps
    assert -1.0 <= m["reward/overlong"] <= 0.0 and m["entropy"] > 0 and m["grad_norm"] > 0
    # Two groups wanted; one extra draw of two at most: the share left out is what was drawn beyond them.
    assert m["frac_dropped_groups"] == {0.0: 0.0, 1.0: 0.5}[m["dynamic_sampling_draws"]]
    assert any(not p.equal(q) for p, q in zip(before, run.trainer.engine.module.parameters()))


@pytest.mark.parametrize("mode, masked", [("token_truncate", None), ("token_mask", 1.0)])
def test_a_perturbed_sampler_is_measured_and_corrected_on_the_real_engines(workspace, mode, masked):
    # The sampler reports log-probs 0.5 above the trainer's for every token it sampled (as a bf16 vLLM
    # would, by other amounts): the step measures it, and MIS with cap 1.5 (|log rho| 0.5 > 0.405) drops all.
    import dataclasses

    params = validate_params({**TINY, "rl": {**TINY["rl"], "rollout_correction": {"mode": mode, "cap": 1.5}}})
    run = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    real = run.trainer.batches.rollout.generate

    def perturbed(*args, **kwargs):
        ro = real(*args, **kwargs)
        return dataclasses.replace(ro, sampler_logprobs=(ro.sampler_logprobs + 0.5) * ro.completion_mask)

    run.trainer.batches.rollout.generate = perturbed
    steps = []
    run.trainer.train(on_step=lambda step, m: steps.append(m))
    (m,) = steps
    assert m["rollout_logp_diff"] == pytest.approx(0.5, abs=1e-3)
    assert m["rollout_ratio_max"] == pytest.approx(math.exp(-0.5), abs=1e-3)
    assert m.get("rollout_masked_frac") == masked


def test_a_refreshed_reference_is_checkpointed_and_resumed(workspace, tmp_path):
    import torch

    params = validate_params(
        {
            **TINY,
            "rl": {
                **TINY["rl"],
                "steps": 2,
                "ref_sync_every": 1,
                "ref_sync_alpha": 0.5,
                "engine": {"micro_batch_size": 4, "lr": 0.05},
            },
        }
    )
    run = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    with torch.no_grad():  # a policy away from the reference, whatever the rewards
        for p in run.engine.module.parameters():
            p.add_(0.1)
    original = {k: v.clone() for k, v in run.trainer.ref.state_dict().items()}
    state = run.trainer.train()
    refreshed = {k: v.clone() for k, v in run.trainer.ref.state_dict().items()}
    assert any(not torch.equal(original[k], refreshed[k]) for k in original)
    run.save(tmp_path / "ckpt", state, {})

    again = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    again.resume(tmp_path / "ckpt")
    assert all(torch.equal(again.trainer.ref.state_dict()[k], refreshed[k]) for k in refreshed)


def test_a_lora_reference_cannot_be_refreshed():
    from grpoflow.config import ConfigError

    with pytest.raises(ConfigError, match="rl.ref_sync_every needs a reference of its own weights"):
        validate_params({"rl": {"ref_sync_every": 10}, "model": {"lora": {"rank": 4}}})


def test_a_lora_critic_checkpoints_its_adapters_and_head_only_and_resumes_them(workspace, tmp_path):
    """#48 review: a LoRA critic's frozen trunk (SmolLM2's 532 MiB) is rebuilt from the reference, not
    saved in every checkpoint: its adapters, value head and optimizer state are, and a new run resumes them."""
    import torch

    params = validate_params({**TINY, "model": {"lora": {"rank": 4, "alpha": 8}}, "ppo": {"critic_warmup_steps": 0}})
    run = build_rl_run(params, PPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    state = run.trainer.train()
    critic = run.engines["critic"].module
    trained = {n: p.detach().clone() for n, p in critic.named_parameters() if p.requires_grad}
    frozen = sum(p.numel() * p.element_size() for p in critic.parameters() if not p.requires_grad)
    run.save(tmp_path / "ckpt", state, {})
    saved = sum(f.stat().st_size for f in (tmp_path / "ckpt" / "critic").rglob("*model_states.pt"))
    assert 0 < saved < frozen  # the adapters and the head, not the trunk

    again = build_rl_run(params, PPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    _, skipped = again.resume(tmp_path / "ckpt")
    assert skipped == []
    resumed = dict(again.engines["critic"].module.named_parameters())
    assert all(torch.equal(resumed[n].detach(), p) for n, p in trained.items())
