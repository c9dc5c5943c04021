"""PPO's critic done right (grpoflow/algorithms/ppo/update.py): the warm-up fits the critic alone and leaves the
policy bit-identical, the critic's explained variance rises as it fits a batch, it can start from
the reward model, and its curves are charted under ``learning/``."""

from __future__ import annotations

import copy

import pytest
import torch

from grpoflow import metric_names as M
from grpoflow.algorithms.ppo.critic import initial_critic
from grpoflow.algorithms.ppo.update import ALGORITHM as PPO
from grpoflow.config import validate_params
from grpoflow.rl.run import build_rl_run
from tests.unit import rl_workspace

TINY = {
    "rl": {
        "steps": 3,
        "prompts_per_step": 4,
        "num_generations": 2,
        "checkpoint_every": 100,
        "eval_every": 100,
        "sampling": {"max_completion_length": 4},
        "engine": {"micro_batch_size": 4, "lr": 0.01},  # two micro-batches a step: accumulation is exercised
    },
    "ppo": {"critic_warmup_steps": 2, "lam_critic": 1.0, "critic_engine": {"micro_batch_size": 4, "lr": 0.003}},
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A prepared split and a saved tiny reference model, as the stages leave them."""
    return rl_workspace.build(tmp_path_factory.mktemp("critic"))


def by_prompt(completions, rows):
    """A reward the critic can predict from the prompt alone (the untrained policy earns no verifier's)."""
    return torch.tensor([int(r["reference_answer"]) / 7 for r in rows]), {}


def tiny_run(workspace, **ppo):
    params = validate_params({**TINY, "ppo": {**TINY["ppo"], **ppo}})
    run = build_rl_run(params, PPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    run.trainer.batches.reward = by_prompt
    return run


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def identical(a, b) -> bool:
    """Nested dicts, lists and tensors equal bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    return a == b


def test_the_warmup_fits_the_critic_alone_and_leaves_the_policy_bit_identical(workspace):
    run = tiny_run(workspace)
    policy, critic = run.engine, run.engines["critic"]
    before = weights(policy.module), copy.deepcopy(policy.optimizer.state_dict()), policy.global_steps
    schedule = copy.deepcopy(policy.lr_scheduler.state_dict())
    critic_before = weights(critic.module)
    warm = [run.trainer.step(step) for step in range(2)]  # ppo.critic_warmup_steps: 2
    after = weights(policy.module), policy.optimizer.state_dict(), policy.global_steps
    assert before[0].keys() == after[0].keys() and all(torch.equal(before[0][n], after[0][n]) for n in before[0])
    assert identical(before[1], after[1]) and before[2] == after[2] == 0
    assert identical(schedule, policy.lr_scheduler.state_dict())
    changed = [n for n, p in weights(critic.module).items() if not torch.equal(p, critic_before[n])]
    assert "head.weight" in changed and any(n.startswith("trunk.") for n in changed)
    for m in warm:
        assert m[M.CRITIC_WARMUP] == 1.0 and M.LOSS not in m and m[M.VALUE_LOSS] > 0 and m[M.ENTROPY] > 0
        assert m[M.RETURNS_STD] > 0 and m[M.KL] == 0.0  # the frozen policy is the reference
    # The third step of rl.steps updates the policy: the warm-up counted against the budget.
    m = run.trainer.step(2)
    assert m[M.CRITIC_WARMUP] == 0.0 and M.LOSS in m
    assert any(not torch.equal(p, before[0][n]) for n, p in weights(policy.module).items())


def test_more_critic_epochs_step_the_critic_more_on_the_same_batch_and_leave_the_policys_update_alone(workspace):
    def one_update(epochs: int):
        run = tiny_run(workspace, critic_warmup_steps=0, critic_epochs=epochs)
        trainer = run.trainer
        trainer.update(1, trainer.batch_of(trainer.batches.scored(0, 2), 2))
        critic = run.engines["critic"]
        return weights(run.engine.module), weights(critic.module), critic.global_steps

    once, thrice = one_update(1), one_update(3)
    assert identical(once[0], thrice[0])  # the policy's update reads the values from before any critic pass
    assert thrice[2] == 3 * once[2] > 0  # two micro-batches a pass, one optimizer step per batch, three passes
    assert not identical(once[1], thrice[1])


def test_explained_variance_rises_as_the_critic_fits_a_fixed_batch(workspace):
    trainer = tiny_run(workspace).trainer
    batch = trainer.batch_of(trainer.batches.scored(0, 2), 2)
    # Each warm-up update reports the explained variance of the values before it: a zero head's first.
    ev = [trainer.update(0, batch)[M.EXPLAINED_VARIANCE] for _ in range(25)]
    assert ev[0] == 0.0
    assert 0.4 < ev[-1] and ev[12] < ev[-1] and ev[1] < ev[12], ev  # measured: 0.03, 0.17, 0.63


def test_the_actor_trains_at_its_own_learning_rate_when_the_set_gives_one_and_grpo_keeps_the_shared_one(workspace):
    from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO

    def lrs(run) -> list[float]:
        return [g["lr"] for g in run.engine.optimizer.param_groups]

    shared = tiny_run(workspace)
    assert lrs(shared) and set(lrs(shared)) == {0.01}  # ppo.actor_lr null: rl.engine.lr
    own = tiny_run(workspace, actor_lr=0.002)
    assert set(lrs(own)) == {0.002} and set(g["lr"] for g in own.engines["critic"].optimizer.param_groups) == {0.003}
    params = validate_params({**TINY, "ppo": {**TINY["ppo"], "actor_lr": 0.002}})
    grpo = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    assert set(lrs(grpo)) == {0.01}


def test_the_critic_starts_from_the_sft_policy_by_default_with_a_zero_head(workspace):
    critic = initial_critic(validate_params({}), workspace / "ref")
    assert not critic.head.weight.any() and not critic.head.bias.any()


def test_the_critic_can_start_from_the_reward_model(workspace, tmp_path):
    from transformers import AutoTokenizer

    from grpoflow.models.reward_model import reward_model_from_policy

    tok = AutoTokenizer.from_pretrained(str(workspace / "ref"))
    rm = reward_model_from_policy(workspace / "ref", tok)
    torch.manual_seed(0)
    with torch.no_grad():
        rm.score.weight.normal_(0, 0.5)  # a trained RM's head is not zero
        for p in rm.base_model.parameters():
            p.add_(0.01 * torch.randn_like(p))  # nor is its backbone the policy's
    rm.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    params = validate_params(
        {
            "ppo": {"critic_init": "reward_model"},
            "rewards": [{"name": "math"}, {"name": "rm", "path": str(tmp_path / "rm")}],
        }
    )
    critic = initial_critic(params, workspace / "ref")
    assert torch.equal(critic.head.weight, rm.score.weight) and not critic.head.bias.any()
    ids = tok("Tom has 3 apples. How many?", return_tensors="pt").input_ids
    attn = torch.ones_like(ids)
    with torch.no_grad():  # the value at the last position is the RM's score of the whole text
        assert torch.allclose(critic(ids, attn)[:, -1], rm(input_ids=ids, attention_mask=attn).logits[:, 0], atol=1e-5)


def test_a_reward_model_of_another_vocabulary_cannot_host_the_critic(workspace, tmp_path):
    from grpoflow.algorithms.ppo.critic import check_same_vocabulary
    from grpoflow.models.modeling import train_tokenizer

    # Merges of other texts: a vocabulary beside the policy's 256 bytes and specials that differs from it.
    train_tokenizer(["something else entirely"] * 5, vocab_size=300).save_pretrained(tmp_path / "other")
    check_same_vocabulary(workspace / "ref", workspace / "ref")
    with pytest.raises(ValueError, match="another vocabulary"):
        check_same_vocabulary(tmp_path / "other", workspace / "ref")


@pytest.mark.parametrize(
    "key, name",
    [
        (M.EXPLAINED_VARIANCE, "learning/explained_variance"),
        (M.VALUE_LOSS, "learning/value_loss"),
        (M.RETURNS_MEAN, "learning/returns_mean"),
        (M.RETURNS_STD, "learning/returns_std"),
        (M.CRITIC_WARMUP, "schedule/critic_warmup"),  # charted only where it moves: the warm-up's end
    ],
)
def test_the_critics_curves_are_charted_in_mlflow(key, name):
    assert M.tracked(key) == name and key in M.HISTORY_FIELDS


def test_a_lora_policys_critic_trains_adapters_and_its_head_and_leaves_its_trunk_frozen(workspace):
    """#48: with ``model.lora`` the critic gets adapters like the policy's (a second trunk of the
    policy's size whose own weights stay frozen), the value head trains in full, and the policy's
    reference is its own model with the adapters off."""
    from grpoflow.algorithms.ppo.critic import completion_values
    from grpoflow.models.lora import AdaptersDisabled, has_adapters

    params = validate_params({**TINY, "model": {"lora": {"rank": 4, "alpha": 8}}})
    run = build_rl_run(params, PPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    run.trainer.batches.reward = by_prompt
    critic = run.engines["critic"]
    trainable = {n for n, p in critic.module.named_parameters() if p.requires_grad}
    assert has_adapters(critic.module.trunk) and isinstance(run.reference, AdaptersDisabled)
    assert {"head.weight", "head.bias"} <= trainable
    assert all(n.startswith("head.") or ".lora_" in n for n in trainable), sorted(trainable)
    frozen_before = {n: p for n, p in weights(critic.module).items() if n not in trainable}
    lora_before = {n: p for n, p in weights(critic.module).items() if ".lora_B" in n}
    assert frozen_before and lora_before
    batch = run.trainer.batch_of(run.trainer.batches.scored(0, 2), 2)
    ids, attn, start = batch.ids, batch.attn, batch.start
    # Each group's prompt encoded once gives the values one row per sample gives, through peft's wrapper.
    with torch.no_grad():
        packed = completion_values(critic.module, ids, attn, start, shared_prefix=True)
        rows = completion_values(critic.module, ids, attn, start, shared_prefix=False)
    torch.testing.assert_close(packed, rows)
    for step in range(3):  # two warm-up steps, then one that updates the policy too
        run.trainer.step(step)
    after = weights(critic.module)
    assert all(torch.equal(after[n], p) for n, p in frozen_before.items())
    assert any(not torch.equal(after[n], p) for n, p in lora_before.items())
    assert after["head.weight"].any()


def test_a_critic_trunk_takes_only_the_lora_targets_it_has():
    """#48 review: a policy that also adapts its ``lm_head`` gives a critic (a trunk without one) the
    other targets; a set whose targets are all missing from the trunk is refused with its name."""
    from grpoflow.algorithms.ppo.critic import trunk_lora
    from grpoflow.config import LoraConfig
    from grpoflow.models.lora import LoraTargetError

    trunk = torch.nn.Sequential()
    trunk.add_module("q_proj", torch.nn.Linear(2, 2))
    trunk.add_module("v_proj", torch.nn.Linear(2, 2))
    lora = LoraConfig(rank=2, alpha=4, target_modules=["q_proj", "lm_head", "v_proj"])
    assert trunk_lora(lora, trunk).target_modules == ["q_proj", "v_proj"]
    assert lora.target_modules == ["q_proj", "lm_head", "v_proj"]  # the policy's own, untouched
    with pytest.raises(LoraTargetError, match="lm_head"):
        trunk_lora(LoraConfig(target_modules=["lm_head"]), trunk)
