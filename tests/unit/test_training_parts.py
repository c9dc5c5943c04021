"""The training loop's parts, on hand-made inputs."""

import math

import pytest
import torch

from grpoflow.config import ConfigError, RLConfig, validate_params
from grpoflow.engine import deepspeed_config
from grpoflow.rl import adapt_beta, prompt_indices
from grpoflow.lint import lint
from grpoflow.logprobs import completion_logprobs
from grpoflow.rewards import RewardComponent, WeightedReward
from grpoflow.rollout import completion_mask
from grpoflow.sft import build_examples, collate


def test_completion_mask_includes_eos_and_flags_truncation():
    ids = torch.tensor([[5, 6, 0, 9, 9], [5, 6, 7, 8, 4], [0, 9, 9, 9, 9]])
    mask, truncated = completion_mask(ids, eos_id=0)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def test_prompt_indices_cover_every_prompt_once_per_epoch_and_are_reproducible():
    seen = [i for step in range(5) for i in prompt_indices(20, 4, step, seed=3)]
    assert sorted(seen) == list(range(20))
    assert prompt_indices(20, 4, 7, seed=3) == prompt_indices(20, 4, 7, seed=3)
    assert prompt_indices(20, 4, 0, seed=3) != prompt_indices(20, 4, 0, seed=4)
    assert len(prompt_indices(3, 8, 0, seed=0)) == 8  # wraps into the next epoch


def test_adaptive_beta_moves_toward_the_target():
    assert adapt_beta(0.04, kl=0.1, target=0.02, horizon=10) > 0.04
    assert adapt_beta(0.04, kl=0.001, target=0.02, horizon=10) < 0.04
    assert adapt_beta(0.04, kl=0.02, target=0.02, horizon=10) == pytest.approx(0.04)
    assert adapt_beta(0.04, kl=100.0, target=0.02, horizon=10) == pytest.approx(0.04 * 1.2)  # error clipped


def test_generation_schedule_anneals_g():
    cfg = RLConfig(num_generations=16, generation_schedule=[{"from_step": 10, "num_generations": 8}, {"from_step": 20, "num_generations": 4}])
    assert [cfg.generations_at(s) for s in (0, 9, 10, 19, 20, 99)] == [16, 16, 8, 8, 4, 4]


def test_lint_reports_differences_and_batches_that_do_not_split_over_the_processes():
    params = validate_params({"rl": {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 8}}})
    errors = [f.message for f in lint(params, "grpo", world_size=4) if f.level == "error"]
    assert errors == ["rl.prompts_per_step=6 is not divisible by 4 processes"]
    errors = [f.message for f in lint(params, "grpo", world_size=2) if f.level == "error"]
    assert errors == ["12 sequences per process (rl.prompts_per_step / 2 processes x G=4) are not a multiple of "
                      "rl.engine.micro_batch_size=8"]
    infos = [f.message for f in lint(params, "grpo") if f.level == "info"]
    assert any("DeepSeekMath: 64" in m for m in infos) and any("TRL default: 0.0" in m for m in infos)
    assert not any("grpo.beta" in f.message for f in lint(params, "ppo"))  # PPO is compared on the shared budget only
    assert not [f for f in lint(validate_params({}), "grpo", 1) if f.level == "error"]


@pytest.mark.parametrize("raw, message", [
    ({"rl": {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 16}}},
     r"24 sequences per process .* not a multiple of rl.engine.micro_batch_size=16"),
    ({"rl": {"sampling": {"temperature": 0.0}}}, "temperature 0 makes every completion of a group identical"),
    ({"rl": {"adaptive_kl": {"enabled": True}}, "grpo": {"beta": 0}, "ppo": {"kl_coef": 0}}, "adaptive_kl needs a starting"),
])
def test_config_errors_that_need_no_model_fail_when_the_params_are_loaded(raw, message):
    with pytest.raises(ConfigError, match=message):
        validate_params(raw)


def test_deepspeed_batch_arithmetic():
    cfg = validate_params({}).rl.engine.model_copy(update={"micro_batch_size": 8})
    ds = deepspeed_config(cfg, batch_size=64, world_size=2)
    assert ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 2 == 64
    with pytest.raises(ValueError, match="does not split"):
        deepspeed_config(cfg, batch_size=60, world_size=8)


class Bigram(torch.nn.Module):
    """A model whose log-probs are known: logits depend on the previous token only."""

    def __init__(self, vocab=5):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_completion_logprobs_match_a_hand_computation():
    model = Bigram()
    ids = torch.tensor([[0, 3, 1, 2, 4]])  # prompt [0, 3], completion [1, 2, 4]
    logp, ent = completion_logprobs(model, ids, torch.ones_like(ids), 2, with_entropy=True)
    table = torch.log_softmax(model.table, -1)
    expected = [table[3, 1], table[1, 2], table[2, 4]]
    assert torch.allclose(logp[0], torch.stack(expected))
    assert torch.allclose(ent[0, 0], -(table[3].exp() * table[3]).sum())


def test_weighted_reward_keeps_each_component():
    reward = WeightedReward([
        RewardComponent("a", lambda c, r: [1.0 if x == y else 0.0 for x, y in zip(c, r)], 1.0),
        RewardComponent("b", lambda c, r: [0.5] * len(c), 0.2),
    ])
    total, parts = reward(["x", "y"], ["x", "z"])
    assert torch.allclose(total, torch.tensor([1.1, 0.1]))
    assert parts["a"].tolist() == [1.0, 0.0]


def test_sft_labels_cover_only_the_completion():
    from grpoflow.modeling import train_tokenizer

    tok = train_tokenizer(["Ann has 2 cats.\nAnswer:\n2+1=3\n#### 3"] * 20, 300)
    (ids, labels), = build_examples([{"prompt": "Ann has 2 cats.", "solution": "2+1=3\n#### 3"}], tok, 128)
    n_prompt = len(tok("Ann has 2 cats.\nAnswer:\n", add_special_tokens=False)["input_ids"])
    assert labels[:n_prompt] == [-100] * n_prompt and labels[n_prompt:] == ids[n_prompt:]
    assert ids[-1] == tok.eos_token_id
    batch = collate([(ids, labels), (ids[:3], labels[:3])], tok.pad_token_id)
    assert batch["attention_mask"][1].tolist() == [1, 1, 1] + [0] * (len(ids) - 3)
    assert math.isclose(float((batch["labels"][1] == -100).sum()), len(ids))
