import pytest
import torch

from grpoflow.algorithms.ppo.critic import explained_variance, token_rewards


def test_token_rewards_put_the_reward_on_the_last_token_and_subtract_kl():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    r = token_rewards(torch.tensor([1.0, 0.5]), mask, None, 0.0)
    assert r.tolist() == [[0, 0, 1, 0], [0.5, 0, 0, 0]]
    kl = torch.full_like(mask, 0.5)
    r = token_rewards(torch.tensor([1.0, 0.5]), mask, kl, 0.1)
    assert torch.allclose(r, torch.tensor([[-0.05, -0.05, 0.95, 0.0], [0.45, 0, 0, 0]]))


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns.clone(), returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)


def test_critic_metrics_take_the_statistics_of_every_process():
    # This process: returns 1, 3 (values 0, 2); the other: return 2 (value 2). Over all three tokens:
    # returns mean 2, variance 2/3; returns - values = 1, 1, 0: mean 2/3, variance 2/9; EV = 1 - (2/9)/(2/3).
    from grpoflow import metric_names as M
    from grpoflow.algorithms.ppo.critic import critic_metrics

    returns, values, mask = (
        torch.tensor([[1.0, 3.0, 7.0]]),
        torch.tensor([[0.0, 2.0, 5.0]]),
        torch.tensor([[1.0, 1.0, 0.0]]),
    )
    # the other process's count, sum and squared deviations, as asked: for the returns, then the residuals
    others = iter([1.0, 2.0, 0.0, 1.0, 0.0, (0 - 2 / 3) ** 2])
    got = critic_metrics(values, returns, mask, total=lambda t: t + next(others))
    assert got[M.RETURNS_MEAN] == pytest.approx(2.0) and got[M.RETURNS_STD] == pytest.approx((2 / 3) ** 0.5)
    assert got[M.EXPLAINED_VARIANCE] == pytest.approx(1 - (2 / 9) / (2 / 3))
    # the same as one process holding all three tokens
    whole = critic_metrics(torch.tensor([[0.0, 2.0, 2.0]]), torch.tensor([[1.0, 3.0, 2.0]]), torch.ones(1, 3))
    assert whole == pytest.approx(got)


def test_the_value_loss_is_clipped_around_the_old_values_as_documented():
    # clip 0.2. Token 0: V 1.0, old 0, return 1.0: unclipped (1.0 - 1.0)^2 = 0, clipped V 0.2: (0.2 - 1.0)^2 = 0.64;
    # the larger, 0.64, counts and its gradient is 0 (the clamp saturates). Token 1: V 0, old 0, return 0.5: both
    # (0 - 0.5)^2 = 0.25. Token 2 is not counted. Loss 0.5 * (0.64 + 0.25) / 2 = 0.2225; dL/dV_1 = (0 - 0.5) / 2.
    from grpoflow.algorithms.ppo.critic import clipped_value_loss

    values = torch.tensor([[1.0, 0.0, 5.0]], requires_grad=True)
    old, returns = torch.zeros(1, 3), torch.tensor([[1.0, 0.5, 0.0]])
    loss = clipped_value_loss(values, old, returns, torch.tensor([[1.0, 1.0, 0.0]]), 0.2)
    loss.backward()
    assert loss.item() == pytest.approx(0.2225)
    assert values.grad[0].tolist() == pytest.approx([0.0, -0.25, 0.0])


# -- shared-prefix groups: PPO's policy and critic passes equal the unshared ones ---------------
from transformers import AutoModel, LlamaConfig, Qwen2Config  # noqa: E402

from grpoflow.algorithms.ppo.critic import ValueModel, completion_values  # noqa: E402
from grpoflow.models.attention import NAME, use_own_attention  # noqa: E402
from grpoflow.rl.logprobs import completion_logprobs  # noqa: E402
from grpoflow.rl.losses import clipped_surrogate_loss  # noqa: E402
from tests.unit.test_shared_prefix import batch, rel, small_llama, tiny_default  # noqa: E402


def _critic(arch: str, attention: str = NAME) -> ValueModel:
    torch.manual_seed(0)
    kind, cfg = {
        "qwen2": (Qwen2Config, {"num_key_value_heads": 4}),
        "llama": (LlamaConfig, {"num_key_value_heads": 2}),
    }[arch]
    trunk = AutoModel.from_config(
        kind(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, **cfg)
    )
    critic = ValueModel(use_own_attention(trunk) if attention == NAME else trunk, 64)
    torch.nn.init.normal_(critic.head.weight, std=0.5)  # a zero head would make every gradient but its own zero
    return critic


def _value_pass(critic, ids, attn, start, shared, returns, slices):
    critic.zero_grad(set_to_none=True)
    out, losses = [], []
    for sl in slices:
        v = completion_values(critic, ids[sl], attn[sl], start, shared)
        mask = attn[sl, start:].float()
        loss = (0.5 * (v - returns[sl]) ** 2 * mask).sum() / mask.sum()
        loss.backward()
        out.append(v.detach())
        losses.append(float(loss.detach()))
    return torch.cat(out), losses, {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("attention", [NAME, "sdpa"])
def test_shared_prefix_critic_values_and_gradients_equal_rows(arch, attention):
    critic = _critic(arch, attention).train()
    critic.trunk.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids, attn, start = batch([6, 11, 3], g=4, c_lens=[5, 1, 7, 3])
    returns = torch.randn(ids.shape[0], ids.shape[1] - start)
    slices = [slice(0, 6), slice(6, 12)]  # the second group split across micro-batches
    base, shared = (_value_pass(critic, ids, attn, start, s, returns, slices) for s in (False, True))
    mask = attn[:, start:].bool()  # padding is not fed in: only the counted tokens' values compare
    assert rel(shared[0][mask], base[0][mask]) < 1e-5 and shared[0].isfinite().all()
    assert shared[1] == pytest.approx(base[1], rel=1e-5)
    assert base[2].keys() == shared[2].keys() and len(base[2]) > 4
    for name, grad in base[2].items():
        assert rel(shared[2][name], grad) < 1e-5, name


@pytest.mark.parametrize("make", [tiny_default, small_llama])
def test_shared_prefix_ppo_policy_loss_and_gradients_equal_rows(make):
    model = make().train()
    ids, attn, start = batch([7, 4], g=4, c_lens=[4, 6, 2])
    mask = attn[:, start:].float()
    adv = torch.randn(mask.shape)  # PPO: token-level (GAE) advantages
    with torch.no_grad():
        old = completion_logprobs(model, ids, attn, start, shared_prefix=False)[0] + 0.05 * torch.randn(mask.shape)

    def policy_pass(shared):
        model.zero_grad(set_to_none=True)
        logp, ent = completion_logprobs(model, ids, attn, start, with_entropy=True, shared_prefix=shared)
        loss, _ = clipped_surrogate_loss(logp, old, adv, mask, clip_eps=0.2, aggregation="bnpo", entropy=ent)
        loss.backward()
        return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    (loss_a, grads_a), (loss_b, grads_b) = policy_pass(False), policy_pass(True)
    assert loss_b == pytest.approx(loss_a, rel=1e-5)
    for name, grad in grads_a.items():
        assert rel(grads_b[name], grad) < 1e-5, name
