import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.rl.losses import clipped_surrogate_loss, kl_k3

RATIOS = torch.tensor([[1.5, 1.0, 0.5], [0.7, 1.1, 1.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)


def inputs():
    logp = RATIOS.log().clone().requires_grad_(True)
    return logp, torch.zeros_like(RATIOS), MASK


def test_token_level_hand_computed_all_aggregations():
    # row 0 (A=+1): per-token losses -1.2 (clipped at 1.2), -1.0, -0.5; row 1 (A=-1): 0.8 (clipped), 1.1
    expected = {"grpo": (-0.9 + 0.95) / 2, "bnpo": -0.8 / 5, "dr_grpo": -0.8 / 6}
    for aggregation, value in expected.items():
        logp, old, mask = inputs()
        loss, metrics = clipped_surrogate_loss(logp, old, ADV, mask, beta=0.0, aggregation=aggregation)
        assert loss.item() == pytest.approx(value, abs=1e-9), aggregation
        assert metrics["clip_ratio"] == pytest.approx(2 / 5)
        assert metrics["ratio_mean"] == pytest.approx(4.8 / 5)
        assert "kl" not in metrics


def test_kl_penalty_hand_computed():
    logp, old, mask = inputs()
    ref = logp.detach().clone()
    ref[0, 0] += math.log(2.0)  # k3 = 2 - ln 2 - 1 on one token, 0 elsewhere
    k3 = 1 - math.log(2.0)
    loss, metrics = clipped_surrogate_loss(logp, old, ADV, mask, ref_logp=ref, beta=0.1)
    assert loss.item() == pytest.approx(((-2.7 + 0.1 * k3) / 3 + 0.95) / 2, abs=1e-9)
    assert metrics["kl"] == pytest.approx(k3 / 5)


def test_sequence_level_ratio_hand_computed():
    logp, old, mask = inputs()
    loss, _ = clipped_surrogate_loss(logp, old, ADV, mask, beta=0.0, ratio_level="sequence")
    r0, r1 = 0.75 ** (1 / 3), 0.77**0.5  # exp of the masked mean log-ratio of each row
    assert loss.item() == pytest.approx((-r0 + r1) / 2, abs=1e-9)


def test_clip_higher_widens_only_the_upper_bound():
    logp, old, mask = inputs()
    loss, metrics = clipped_surrogate_loss(logp, old, ADV, mask, beta=0.0, clip_eps_high=0.6)
    # 1.5 is now inside [0.8, 1.6]: row 0 becomes (-1.5 - 1 - 0.5) / 3
    assert loss.item() == pytest.approx((-1.0 + 0.95) / 2, abs=1e-9)
    assert metrics["clip_ratio"] == pytest.approx(1 / 5)


def test_gradient_is_zero_exactly_where_clipping_is_active():
    logp, old, mask = inputs()
    loss, _ = clipped_surrogate_loss(logp, old, ADV, mask, beta=0.0)
    loss.backward()
    g = logp.grad
    assert g[0, 0] == 0 and g[1, 0] == 0  # clipped: ratio 1.5 with A > 0, ratio 0.7 with A < 0
    assert g[0, 1] != 0 and g[0, 2] != 0 and g[1, 1] != 0
    assert g[1, 2] == 0  # masked


def test_kl_estimator_is_nonnegative_and_zero_at_equality():
    x = torch.linspace(-5, 5, 101)
    assert (kl_k3(x, x.flip(0)) >= 0).all()
    assert torch.equal(kl_k3(x, x), torch.zeros_like(x))


def test_the_kl_term_is_there_exactly_when_a_reference_is_given():
    logp, old, mask = inputs()
    without, m0 = clipped_surrogate_loss(logp, old, ADV, mask, beta=0.04)
    same, _ = clipped_surrogate_loss(
        logp, old, ADV, mask, ref_logp=logp.detach(), beta=0.04
    )  # KL of a policy to itself is 0
    far, m1 = clipped_surrogate_loss(logp, old, ADV, mask, ref_logp=logp.detach() - 1.0, beta=0.04)
    assert "kl" not in m0 and torch.allclose(without, same)
    # k3 at d = ref - logp = -1 is exp(-1) + 1 - 1 = exp(-1) on every token
    assert m1["kl"] == pytest.approx(math.exp(-1), rel=1e-5)
    assert float((far - without).detach()) == pytest.approx(0.04 * math.exp(-1), rel=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ratio_level": "tokens"}, "ratio_level"),
        ({"aggregation": "mean"}, "aggregation"),
        ({"clip_eps": 0.0}, "clip_eps"),
        ({"beta": -1.0}, "beta"),
    ],
)
def test_bad_options_raise(kwargs, message):
    logp, old, mask = inputs()
    with pytest.raises(ValueError, match=message):
        clipped_surrogate_loss(logp, old, ADV, mask, ref_logp=logp.detach(), **kwargs)


def test_shape_errors_name_the_tensor():
    logp, old, mask = inputs()
    with pytest.raises(ValueError, match="old_logp"):
        clipped_surrogate_loss(logp, old[:, :2], ADV, mask, beta=0.0)
    with pytest.raises(ValueError, match="advantages"):
        clipped_surrogate_loss(logp, old, ADV[:1], mask, beta=0.0)


@st.composite
def batches(draw):
    n, t = draw(st.integers(1, 5)), draw(st.integers(1, 7))
    f = st.floats(-3, 0, allow_nan=False)

    def grid():
        return torch.tensor(draw(st.lists(f, min_size=n * t, max_size=n * t)), dtype=torch.float64).view(n, t)

    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n * t, max_size=n * t))).view(n, t)
    mask[:, 0] = True  # every completion has at least one token
    adv = torch.tensor(draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=n, max_size=n)), dtype=torch.float64)
    return grid(), grid(), grid(), adv, mask.to(torch.float64)


OPTIONS = st.tuples(st.sampled_from(["token", "sequence"]), st.sampled_from(["grpo", "bnpo", "dr_grpo"]))


@settings(max_examples=200)
@given(batches())
def test_on_policy_without_kl_the_loss_is_minus_mean_advantage(b):
    logp, _, _, adv, mask = b
    for level in ("token", "sequence"):
        loss, metrics = clipped_surrogate_loss(logp, logp.clone(), adv, mask, beta=0.0, ratio_level=level)
        assert loss.item() == pytest.approx(-adv.mean().item(), abs=1e-9)
        assert metrics["clip_ratio"] == 0.0


@settings(max_examples=200)
@given(batches(), OPTIONS, st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e6]))
def test_masked_tokens_never_change_the_loss_or_gradient(b, options, junk):
    logp, old, ref, adv, mask = b
    level, agg = options
    dirty = [x.clone() for x in (logp, old, ref)]
    for x in dirty:
        x[mask == 0] = junk
    results = []
    for lp, o, r in ((logp, old, ref), tuple(dirty)):
        lp = lp.clone().requires_grad_(True)
        loss, _ = clipped_surrogate_loss(lp, o, adv, mask, ref_logp=r, beta=0.04, ratio_level=level, aggregation=agg)
        loss.backward()
        results.append((loss.detach(), lp.grad * mask))
    assert torch.isfinite(results[1][0])
    assert torch.allclose(results[0][0], results[1][0], atol=1e-9)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-9)


@settings(max_examples=100)
@given(batches())
def test_clipped_tokens_get_no_policy_gradient(b):
    logp, old, _, adv, mask = b
    lp = logp.clone().requires_grad_(True)
    loss, _ = clipped_surrogate_loss(lp, old, adv, mask, beta=0.0, aggregation="bnpo")
    loss.backward()
    ratio = (logp - old).exp()
    a = adv.unsqueeze(1)
    clipped = (((ratio < 0.8) & (a < 0)) | ((ratio > 1.2) & (a > 0))) & mask.bool()
    assert (lp.grad[clipped] == 0).all()


# --- KL estimators, KL in the reward, entropy bonus ------------------------------------------------


def test_the_three_kl_estimators_by_hand():
    from grpoflow.rl.losses import KL_ESTIMATORS

    logp, ref = torch.tensor([math.log(0.5)], dtype=torch.float64), torch.tensor([math.log(0.25)], dtype=torch.float64)
    # log-ratio logp - ref = log 2; k1 = log 2, k2 = (log 2)^2 / 2, k3 = 1/2 - 1 + log 2
    assert KL_ESTIMATORS["k1"](logp, ref).item() == pytest.approx(math.log(2))
    assert KL_ESTIMATORS["k2"](logp, ref).item() == pytest.approx(math.log(2) ** 2 / 2)
    assert KL_ESTIMATORS["k3"](logp, ref).item() == pytest.approx(0.5 - 1 + math.log(2))


def test_kl_estimators_average_to_the_true_kl_on_samples_of_the_policy():
    # pi = (0.7, 0.3), ref = (0.4, 0.6): KL(pi || ref) exactly, against the estimators' expectation under pi.
    pi, ref = torch.tensor([0.7, 0.3], dtype=torch.float64), torch.tensor([0.4, 0.6], dtype=torch.float64)
    true_kl = float((pi * (pi / ref).log()).sum())
    from grpoflow.rl.losses import KL_ESTIMATORS

    for name in ("k1", "k3"):  # the unbiased two
        assert float((pi * KL_ESTIMATORS[name](pi.log(), ref.log())).sum()) == pytest.approx(true_kl)
    assert float((pi * KL_ESTIMATORS["k2"](pi.log(), ref.log())).sum()) != pytest.approx(true_kl)  # k2 is biased


def test_the_loss_uses_the_chosen_estimator_for_its_kl_term():
    logp = torch.tensor([[math.log(0.5), math.log(0.5)]], dtype=torch.float64, requires_grad=True)
    ref = torch.full((1, 2), math.log(0.25), dtype=torch.float64)
    zeros = torch.zeros(1, dtype=torch.float64)
    for name, per_token in (("k1", math.log(2)), ("k2", math.log(2) ** 2 / 2), ("k3", math.log(2) - 0.5)):
        loss, m = clipped_surrogate_loss(
            logp, logp.detach(), zeros, torch.ones(1, 2), ref_logp=ref, beta=0.1, kl_estimator=name
        )
        assert m["kl"] == pytest.approx(per_token) and loss.item() == pytest.approx(0.1 * per_token)
    with pytest.raises(ValueError, match="kl_estimator"):
        clipped_surrogate_loss(logp, logp.detach(), zeros, torch.ones(1, 2), ref_logp=ref, beta=0.1, kl_estimator="k4")


def test_kl_in_the_reward_subtracts_beta_times_each_completions_summed_kl():
    from grpoflow.rl.losses import kl_penalised_rewards

    logp = torch.tensor([[0.0, -1.0, float("-inf")], [-2.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    rewards, kl = kl_penalised_rewards(torch.tensor([1.0, 0.0]), logp, ref, mask, beta=0.5, estimator="k1")
    # k1 = logp - ref on kept tokens: (1, 0) and (-2); padding (even -inf) counts 0
    assert torch.equal(kl, torch.tensor([[1.0, 0.0, 0.0], [-2.0, 0.0, 0.0]]))
    assert torch.allclose(rewards, torch.tensor([1.0 - 0.5 * 1.0, 0.0 + 0.5 * 2.0]))


def test_the_entropy_bonus_lowers_the_loss_and_its_gradient_raises_entropy():
    logits = torch.tensor([[[2.0, 0.0, -1.0]]], requires_grad=True)
    logp_all = logits.log_softmax(-1)
    logp, entropy = logp_all[..., 0], -(logp_all.exp() * logp_all).sum(-1)
    zeros = torch.zeros(1)
    plain, _ = clipped_surrogate_loss(logp, logp.detach(), zeros, torch.ones(1, 1))
    bonus, _ = clipped_surrogate_loss(logp, logp.detach(), zeros, torch.ones(1, 1), entropy=entropy, entropy_coef=0.1)
    assert bonus.item() == pytest.approx(plain.item() - 0.1 * entropy.item())
    bonus.backward()
    stepped = (logits - 1.0 * logits.grad).log_softmax(-1)  # one gradient step on the loss
    assert -(stepped.exp() * stepped).sum().item() > entropy.item()
    with pytest.raises(ValueError, match="entropy"):
        clipped_surrogate_loss(logp, logp.detach(), zeros, torch.ones(1, 1), entropy_coef=0.1)


# --- rollout/trainer mismatch: TIS and MIS, against a perturbed sampler -----------------------------


def _mismatch_case():
    trainer = torch.zeros(2, 3, dtype=torch.float64)
    # The sampler was off by these log-probs: rho = exp(trainer - sampler) = exp(-delta).
    delta = torch.tensor([[-1.0, 0.0, 0.5], [0.25, -0.25, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)  # the 9.0 is padding
    return trainer, trainer + delta, mask


def test_the_mismatch_is_measured_on_kept_tokens_whatever_the_mode():
    from grpoflow.rl.losses import rollout_correction

    trainer, sampler, mask = _mismatch_case()
    weights, kept, m = rollout_correction(trainer, sampler, mask, "none", 2.0)
    assert weights is None and torch.equal(kept, mask)
    assert m["rollout_logp_diff"] == pytest.approx((1 + 0 + 0.5 + 0.25 + 0.25) / 5)
    assert m["rollout_ratio_max"] == pytest.approx(math.exp(1.0))


def test_tis_truncates_token_and_sequence_ratios_at_the_cap_by_hand():
    from grpoflow.rl.losses import rollout_correction

    trainer, sampler, mask = _mismatch_case()
    w, _, _ = rollout_correction(trainer, sampler, mask, "token_truncate", 2.0)
    assert torch.allclose(w[0], torch.tensor([2.0, 1.0, math.exp(-0.5)], dtype=torch.float64))  # e^1 capped at 2
    w, _, _ = rollout_correction(trainer, sampler, mask, "sequence_truncate", 2.0)
    # sequence log-rho: 1 + 0 - 0.5 = 0.5 -> e^0.5; -0.25 + 0.25 = 0 (padding ignored) -> 1
    assert torch.allclose(w[:, 0], torch.tensor([math.exp(0.5), 1.0], dtype=torch.float64))


def test_mis_masks_tokens_and_sequences_outside_the_band_by_hand():
    from grpoflow.rl.losses import rollout_correction

    trainer, sampler, mask = _mismatch_case()
    _, kept, m = rollout_correction(trainer, sampler, mask, "token_mask", 2.0)  # band: |log rho| <= log 2
    assert kept.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]] and m["rollout_masked_frac"] == pytest.approx(1 / 5)
    _, kept, _ = rollout_correction(trainer, sampler, mask, "sequence_mask", 1.5)  # log 1.5 = 0.405 < 0.5
    assert kept.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]


def test_tis_weights_scale_the_policy_gradient_of_each_token():
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    adv, mask = torch.ones(1, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    loss, _ = clipped_surrogate_loss(
        logp, logp.detach(), adv, mask, token_weights=torch.tensor([[2.0, 0.5]], dtype=torch.float64)
    )
    loss.backward()  # d(-ratio * A)/d logp = -1 per token, mean over 2 tokens, times the weight
    assert logp.grad.tolist() == [[-1.0, -0.25]]
