import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.rl.advantages import gae, group_advantages, masked_whiten

R = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])


def close(a, b, tol=1e-4):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol)


def test_group_scale_population_std_hand_computed():
    adv = group_advantages(R, 4, eps=0.0)
    s = 0.25 / math.sqrt(0.75 * 0.25)
    assert close(adv, [1, -1, -1, 1, s, s, s, -3 * s])


def test_group_scale_bessel_std_hand_computed():
    adv = group_advantages(R, 4, ddof=1, eps=0.0)
    a = 0.5 / math.sqrt(1 / 3)
    b = 0.25 / math.sqrt(0.25)  # group 2: sample std = sqrt(0.75/3) = 0.5
    assert close(adv, [a, -a, -a, a, b, b, b, -3 * b])


def test_batch_scale_uses_batch_std_but_group_mean():
    adv = group_advantages(R, 4, scale="batch", eps=0.0)
    std = math.sqrt(0.625 * 0.375)
    assert close(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75]) / std)


def test_none_scale_is_dr_grpo_centering():
    assert close(group_advantages(R, 4, scale="none"), [0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75])


def test_identical_rewards_give_zero_advantage():
    assert close(group_advantages(torch.ones(6), 3), torch.zeros(6))


def test_eps_bounds_the_scale():
    adv = group_advantages(torch.tensor([0.0, 1.0]), 2, eps=0.5)
    assert close(adv, [-0.5, 0.5])  # std 0.5 + eps 0.5 = 1


@pytest.mark.parametrize(
    "rewards, g, message",
    [
        (torch.ones(5), 2, "not divisible"),
        (torch.ones(4), 1, "group_size must be >= 2"),
        (torch.tensor([1.0, float("nan")]), 2, "non-finite"),
        (torch.tensor([1.0, float("inf")]), 2, "non-finite"),
        (torch.ones(2, 2), 2, "1-D"),
    ],
)
def test_bad_rewards_raise_clear_errors(rewards, g, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, g)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="scale"):
        group_advantages(R, 4, scale="groups")
    with pytest.raises(ValueError, match="ddof"):
        group_advantages(R, 4, ddof=2)


rewards_st = st.integers(2, 8).flatmap(
    lambda g: st.tuples(
        st.just(g),
        st.integers(1, 6).flatmap(
            lambda n: st.lists(st.floats(-100, 100, allow_nan=False), min_size=n * g, max_size=n * g)
        ),
    )
)


@settings(max_examples=200)
@given(rewards_st, st.sampled_from(["group", "batch", "none"]), st.sampled_from([0, 1]))
def test_group_mean_of_advantages_is_zero(gr, scale, ddof):
    g, values = gr
    adv = group_advantages(torch.tensor(values, dtype=torch.float64), g, scale=scale, ddof=ddof)
    assert torch.allclose(adv.view(-1, g).mean(1), torch.zeros(len(values) // g, dtype=torch.float64), atol=1e-6)


@settings(max_examples=200)
@given(rewards_st, st.floats(0.1, 50), st.floats(-50, 50))
def test_group_scale_is_invariant_to_affine_reward_changes(gr, a, b):
    g, values = gr
    r = torch.tensor(values, dtype=torch.float64)
    spread = r.view(-1, g).std(1, correction=0)
    if (spread < 1e-3).any():  # eps dominates degenerate groups; invariance holds where std >> eps
        return
    base = group_advantages(r, g, eps=1e-12)
    moved = group_advantages(a * r + b, g, eps=1e-12)
    assert torch.allclose(base, moved, atol=1e-6)


def test_gae_hand_computed():
    adv, ret = gae(
        torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]]), torch.ones(1, 3), gamma=1.0, lam=0.5
    )
    assert close(adv, [[0.225, 0.25, 0.3]])
    assert close(ret, [[0.725, 0.85, 1.0]])


def test_gae_stops_at_the_mask_and_ignores_padding_values():
    adv, ret = gae(
        torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([[0.5, 0.6, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]]), lam=0.5
    )
    assert close(adv, [[0.3, 0.4, 0.0]])
    assert close(ret, [[0.8, 1.0, 0.0]])


def test_gae_gamma_discounts():
    adv, _ = gae(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.ones(1, 2), gamma=0.5, lam=1.0)
    assert close(adv, [[0.5, 1.0]])


@settings(max_examples=100)
@given(st.integers(1, 4), st.integers(1, 8), st.data())
def test_gae_with_lambda_one_returns_monte_carlo_returns(n, t, data):
    floats = st.floats(-10, 10, allow_nan=False)
    rewards = torch.tensor(data.draw(st.lists(floats, min_size=n * t, max_size=n * t)), dtype=torch.float64).view(n, t)
    values = torch.tensor(data.draw(st.lists(floats, min_size=n * t, max_size=n * t)), dtype=torch.float64).view(n, t)
    _, returns = gae(rewards, values, torch.ones(n, t, dtype=torch.float64), gamma=1.0, lam=1.0)
    mc = rewards.flip(1).cumsum(1).flip(1)
    assert torch.allclose(returns, mc, atol=1e-9)


def test_gae_shape_mismatch_raises():
    with pytest.raises(ValueError, match="share one"):
        gae(torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 3))


def test_gae_with_decoupled_lambdas_hand_computed():
    # gamma 1; the actor's lambda 0 (one-step TD errors), the critic's 0.5. Row 0, values 0.5 0.4 0.8:
    #   delta_2 = 1.0 + 0   - 0.8 =  0.2     delta_1 = -0.1 + 0.8 - 0.4 = 0.3     delta_0 = 0 + 0.4 - 0.5 = -0.1
    #   actor  (lam 0):   A = delta                         = [-0.1, 0.3, 0.2]
    #   critic (lam 0.5): A'_2 = 0.2, A'_1 = 0.3 + 0.5 * 0.2 = 0.4, A'_0 = -0.1 + 0.5 * 0.4 = 0.1
    #   returns = A' + V = [0.1 + 0.5, 0.4 + 0.4, 0.2 + 0.8] = [0.6, 0.8, 1.0]
    # Row 1 ends after two tokens (its third value, 9.0, is padding and never read):
    #   delta_1 = 1.0 + 0 - 0.6 = 0.4     delta_0 = 0 + 0.6 - 0.2 = 0.4
    #   actor: [0.4, 0.4, 0]; critic: A'_1 = 0.4, A'_0 = 0.4 + 0.5 * 0.4 = 0.6; returns [0.8, 1.0, 0]
    rewards = torch.tensor([[0.0, -0.1, 1.0], [0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.4, 0.8], [0.2, 0.6, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.0, lam_critic=0.5)
    assert close(adv, [[-0.1, 0.3, 0.2], [0.4, 0.4, 0.0]])
    assert close(ret, [[0.6, 0.8, 1.0], [0.8, 1.0, 0.0]])
    # VAPO's critic lambda 1: the returns are the rewards still to come, whatever the values.
    _, mc = gae(rewards, values, mask, gamma=1.0, lam=0.0, lam_critic=1.0)
    assert close(mc, [[0.9, 0.9, 1.0], [1.0, 1.0, 0.0]])


@settings(max_examples=100)
@given(st.integers(1, 3), st.integers(1, 6), st.floats(0, 1), st.floats(0, 1), st.data())
def test_decoupled_gae_takes_its_advantages_from_one_lambda_and_its_returns_from_the_other(n, t, lam_a, lam_c, data):
    floats = st.floats(-10, 10, allow_nan=False)
    rewards = torch.tensor(data.draw(st.lists(floats, min_size=n * t, max_size=n * t)), dtype=torch.float64).view(n, t)
    values = torch.tensor(data.draw(st.lists(floats, min_size=n * t, max_size=n * t)), dtype=torch.float64).view(n, t)
    lengths = data.draw(st.lists(st.integers(0, t), min_size=n, max_size=n))
    mask = (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).double()
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=lam_a, lam_critic=lam_c)
    assert torch.equal(adv, gae(rewards, values, mask, gamma=0.9, lam=lam_a)[0])
    assert torch.equal(ret, gae(rewards, values, mask, gamma=0.9, lam=lam_c)[1])


def test_the_ppo_section_decouples_its_lambdas_and_each_unset_one_is_ppo_lam():
    from grpoflow.config import validate_params
    from grpoflow.rl.advantages import CRITIC_ESTIMATOR_FNS

    rewards, values = torch.tensor([[0.0, -0.1, 1.0]]), torch.tensor([[0.5, 0.4, 0.8]])
    mask = torch.ones(1, 3)
    ppo = validate_params({"ppo": {"lam": 0.3, "lam_actor": 0.0, "lam_critic": 0.5}}).ppo
    adv, ret = CRITIC_ESTIMATOR_FNS["gae"](rewards, values, mask, ppo)
    assert close(adv, [[-0.1, 0.3, 0.2]]) and close(ret, [[0.6, 0.8, 1.0]])  # the hand-computed row above
    shared = validate_params({"ppo": {"lam": 0.5}}).ppo  # both unset: ppo.lam for both, as before the split
    assert (shared.estimator_options().actor_lam, shared.estimator_options().critic_lam) == (0.5, 0.5)
    adv, ret = CRITIC_ESTIMATOR_FNS["gae"](rewards, values, mask, shared)
    expected = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert torch.equal(adv, expected[0]) and torch.equal(ret, expected[1])
    only_critic = validate_params({"ppo": {"lam": 0.0, "lam_critic": 0.5}}).ppo.estimator_options()
    assert (only_critic.actor_lam, only_critic.critic_lam) == (0.0, 0.5)


def test_masked_whiten_zero_mean_unit_var_on_mask():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = masked_whiten(x, m)
    assert close(w[0, :3].mean(), 0.0) and close(w[0, :3].pow(2).mean(), 1.0, tol=1e-3)
    assert w[0, 3] == 0


# --- the critic-free relatives, each against a computation written out independently --------------


def _cfg(**kw):
    from grpoflow.config import validate_params

    return validate_params({"grpo": kw}).grpo


def test_rloo_is_each_reward_minus_the_mean_of_the_others_by_hand():
    from grpoflow.rl.advantages import ESTIMATORS

    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 0.0, 6.0])
    # group 1: 1 - (0+0+1)/3 = 2/3, 0 - 2/3, 0 - 2/3, 1 - 1/3; group 2: 3 - 3, 3 - 3, 0 - 4, 6 - 2
    expected = torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0, 0.0, -4.0, 4.0])
    assert torch.allclose(ESTIMATORS["rloo"](rewards, 4, _cfg()), expected)


def test_dr_grpo_only_centres_and_reinforce_pp_normalises_over_the_batch_by_hand():
    from grpoflow.rl.advantages import ESTIMATORS

    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0])
    assert torch.allclose(
        ESTIMATORS["dr_grpo"](rewards, 2, _cfg(advantage_scale="group")), torch.tensor([0.5, -0.5, 0.0, 0.0])
    )
    # batch mean 1.25, population std sqrt(((-.25)^2 + 1.25^2 + .75^2 + .75^2) / 4) = sqrt(0.6875)
    std = 0.6875**0.5
    expected = torch.tensor([-0.25, -1.25, 0.75, 0.75]) / (std + 1e-4)
    assert torch.allclose(ESTIMATORS["reinforce_pp"](rewards, 2, _cfg()), expected)


@given(
    st.integers(2, 6).flatmap(
        lambda g: st.tuples(
            st.just(g), st.lists(st.floats(-5, 5), min_size=g, max_size=4 * g).filter(lambda r: len(r) % g == 0)
        )
    )
)
def test_rloo_is_dr_grpo_scaled_by_g_over_g_minus_one(case):
    from grpoflow.rl.advantages import ESTIMATORS

    g, values = case
    rewards = torch.tensor(values, dtype=torch.float64)
    rloo, dr = ESTIMATORS["rloo"](rewards, g, _cfg()), ESTIMATORS["dr_grpo"](rewards, g, _cfg())
    assert torch.allclose(rloo, dr * g / (g - 1), atol=1e-9)
    assert torch.allclose(rloo.view(-1, g).sum(1), torch.zeros(len(values) // g, dtype=torch.float64), atol=1e-9)


def test_every_estimator_is_a_setting_and_an_unknown_one_is_refused():
    from grpoflow.config import ConfigError, validate_params

    for name in ("grpo", "dr_grpo", "rloo", "reinforce_pp"):
        assert validate_params({"grpo": {"advantage_estimator": name}}).grpo.advantage_estimator == name
    with pytest.raises(ConfigError, match="rloo"):
        validate_params({"grpo": {"advantage_estimator": "rlo"}})


def test_the_schema_knows_every_registered_estimator_by_name():
    from grpoflow.algorithms.grpo.config import ADVANTAGE_ESTIMATORS
    from grpoflow.rl.advantages import ESTIMATORS, estimator

    assert sorted(ESTIMATORS.registered()) == sorted(ADVANTAGE_ESTIMATORS)
    with pytest.raises(ValueError, match="ADVANTAGE_ESTIMATORS"):
        estimator("unlisted")(lambda rewards, group_size, cfg: rewards)


def test_each_estimator_receives_only_its_own_typed_options_from_the_flat_keys():
    from grpoflow.algorithms.grpo.config import BatchNormOptions, GroupNormOptions, NoAdvantageOptions
    from grpoflow.rl.advantages import ESTIMATORS, grpo_estimator

    cfg = _cfg(advantage_scale="batch", advantage_ddof=1, advantage_eps=0.5)
    assert cfg.estimator_options("grpo") == GroupNormOptions(scale="batch", ddof=1, eps=0.5)
    assert cfg.estimator_options("reinforce_pp") == BatchNormOptions(ddof=1, eps=0.5)
    assert cfg.estimator_options("rloo") == cfg.estimator_options("dr_grpo") == NoAdvantageOptions()
    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0])
    # The section and the estimator's own options give one result.
    assert torch.equal(ESTIMATORS["grpo"](rewards, 2, cfg), grpo_estimator(rewards, 2, cfg.estimator_options("grpo")))
    assert torch.equal(
        ESTIMATORS["grpo"](rewards, 2, cfg.estimator_options("grpo")),
        group_advantages(rewards, 2, scale="batch", ddof=1, eps=0.5),
    )


def test_each_estimators_options_are_the_config_fields_it_reads_declared_once():
    """An option is declared once, as its section's field (the configuration reference's row): each
    estimator's option has that field's type, default, bounds and description, no option class declares
    one of its own (refused on import), and the estimators read every advantage key of the section."""
    from grpoflow.algorithms.grpo.config import ADVANTAGE_ESTIMATORS, GRPOConfig
    from grpoflow.algorithms.ppo.config import CRITIC_ESTIMATORS, PPOConfig
    from grpoflow.config.base import options_of

    def declared(field):
        return field.annotation, field.default, field.metadata, field.description

    for section, table in ((GRPOConfig, ADVANTAGE_ESTIMATORS), (PPOConfig, CRITIC_ESTIMATORS)):
        for name, options in table.items():
            assert options.model_fields.keys() == options.option_keys.keys(), name
            for option, key in options.option_keys.items():
                assert declared(options.model_fields[option]) == declared(section.model_fields[key]), (name, key)
    read = {key for options in ADVANTAGE_ESTIMATORS.values() for key in options.option_keys.values()}
    assert read == {k for k in GRPOConfig.model_fields if k.startswith("advantage_")} - {"advantage_estimator"}
    assert set(CRITIC_ESTIMATORS["gae"].option_keys.values()) == {"gamma", "lam", "lam_actor", "lam_critic"}
    with pytest.raises(TypeError, match=r"declares \['lam'\] itself"):

        class Twice(options_of(PPOConfig, "gamma")):
            lam: float = 0.9


def test_gae_is_a_registered_critic_estimator_with_its_own_options():
    from grpoflow.algorithms.ppo.config import CRITIC_ESTIMATORS, GaeOptions
    from grpoflow.config import validate_params
    from grpoflow.rl.advantages import CRITIC_ESTIMATOR_FNS

    assert sorted(CRITIC_ESTIMATOR_FNS) == sorted(CRITIC_ESTIMATORS) == ["gae"]
    ppo = validate_params({"ppo": {"gamma": 0.5, "lam": 1.0}}).ppo
    assert ppo.estimator_options() == GaeOptions(gamma=0.5, lam=1.0)
    rewards, values, mask = torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.ones(1, 2)
    for cfg in (ppo, GaeOptions(gamma=0.5, lam=1.0)):
        adv, ret = CRITIC_ESTIMATOR_FNS["gae"](rewards, values, mask, cfg)
        expected = gae(rewards, values, mask, gamma=0.5, lam=1.0)
        assert torch.equal(adv, expected[0]) and torch.equal(ret, expected[1])


def test_masked_whiten_takes_the_statistics_of_every_process():
    # This process: tokens 1, 2, 3 (one masked out); the other process: one token, 2. Over all four:
    # n = 4, mean 8 / 4 = 2, variance ((1-2)^2 + 0 + (3-2)^2 + 0) / 4 = 0.5, so 1 and 3 whiten to -/+sqrt(2).
    x, m = torch.tensor([[1.0, 2.0], [3.0, 9.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    others = iter([1.0, 2.0, 0.0])  # the other process's count, sum and squared deviations, as asked
    w = masked_whiten(x, m, eps=0.0, total=lambda t: t + next(others))
    assert close(w, [[-math.sqrt(2), 0.0], [math.sqrt(2), 0.0]], tol=1e-6)
    # the same as whitening both processes' tokens in one batch
    whole = masked_whiten(torch.tensor([[1.0, 2.0, 3.0, 2.0]]), torch.ones(1, 4), eps=0.0)
    assert close(w[m.bool()], whole[0, :3], tol=1e-6)
