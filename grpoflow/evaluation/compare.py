"""The comparison of the algorithms (GRPO against the PPO baseline, and any other of the catalog):
accuracy, curve stability, time, memory and where memory goes. Algorithms are named by the caller."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import mean, pstdev, stdev

from grpoflow import metric_names as M


def stability(rows: list[dict], key: str, window: int = M.RECENT_STEPS) -> float:
    """Std of ``key`` over the last ``window`` steps: how much the curve still swings."""
    values = [float(r[key]) for r in rows[-window:] if r.get(key) not in ("", None)]
    return pstdev(values) if len(values) > 1 else 0.0


def summarize(algorithm: str, train: dict, history: list[dict], evaluation: dict, k: int) -> dict:
    """One algorithm's row of the comparison: test scores, curve stability, cost."""
    test = evaluation.get("test", {})
    accs = [float(r["val_accuracy"]) for r in history if r.get("val_accuracy") not in ("", None)]
    return {
        "algorithm": algorithm,
        "test_pass@1": test.get("pass@1"),
        "test_pass@1_se": test.get(M.stderr_of(M.PASS_AT_1)),
        f"test_pass@{k}": test.get(f"pass@{k}"),
        f"test_maj@{k}": test.get(f"maj@{k}"),
        "val_accuracy_final": train.get("val_accuracy"),
        "val_accuracy_best": max(accs) if accs else None,
        M.REWARD_MEAN_RECENT: mean(float(r["reward_mean"]) for r in history[-M.RECENT_STEPS :]) if history else None,
        f"reward_std_last{M.RECENT_STEPS}": stability(history, "reward_mean"),
        f"loss_std_last{M.RECENT_STEPS}": stability(history, "loss"),
        "kl_final": float(history[-1]["kl"]) if history else None,
        "reward_step_spread": step_spread(history, M.REWARD_MEAN),
        "kl_step_spread": step_spread(history, M.KL),
        "group_reward_std_mean": mean(float(r[M.GROUP_REWARD_STD]) for r in history) if history else None,
        "health_raised": ", ".join(sorted(h["name"] for h in train.get(M.HEALTH, []))) or "none",
        "health_cleared": ", ".join(sorted(h["name"] for h in train.get(M.HEALTH, []) if h["status"] == "cleared"))
        or "none",
        "seconds_per_step": train.get("seconds_per_step"),
        "rollout_tokens_per_s": train.get("rollout_tokens_per_s"),
        "peak_memory_mb": train.get("peak_memory_mb"),
        "heldout_loss_increase": evaluation.get("heldout_loss_increase"),
        **{f"seconds_per_step/{phase}": v["mean_s"] for phase, v in train.get(M.PHASE_SPLIT, {}).items()},
    }


def arm_memory(record: dict) -> dict:
    """One run's peak memory split (a :func:`grpoflow.rl.memory.memory_record`): its models' weights,
    gradients and optimizer states, counted from their tensors; the runtime, what was in use before
    step 1 besides the weights (interpreter, libraries, tokenizer, an in-process rollout engine); and
    the activations, what the peak holds beyond all of those (the passes' activations and temporary
    buffers, allocator slack). On a GPU the runtime is near zero: only allocations are counted."""
    models = record["models"].values()
    weights, grads, optim = (sum(m[k] for m in models) for k in ("weights_mb", "gradients_mb", "optimizer_mb"))
    before, peak = record["before_training_mb"], record["peak_mb"]
    return {
        "peak_mb": peak,
        "weights_mb": weights,
        "gradients_mb": grads,
        "optimizer_mb": optim,
        "activations_mb": peak - before - grads - optim,
        "runtime_mb": before - weights,
    }


def ratio_key(a: str, b: str) -> str:
    """The key of ``a``'s peak memory over ``b``'s in a :func:`memory_breakdown` (``grpo_over_ppo``)."""
    return f"{a}_over_{b}"


def memory_breakdown(base: dict, critic_run: dict, names: tuple[str, str]) -> dict:
    """The peak memory of a run without a critic (``base``'s memory record) against one with one
    (``critic_run``'s), named ``names``: each run's split (:func:`arm_memory`), the critic's share
    (its model state, counted, and the activations the second run holds beyond the first's), and
    the ratio as measured beside two predictions: ``theory_peak``, the first run's peak plus only the
    critic's model state (what the ratio would be if the critic cost no activations), and
    ``theory_model_state``, the ratio of the two runs' model states alone (what it tends to when the
    models dominate the memory, as at scale)."""
    a, b = names
    arms = {a: arm_memory(base), b: arm_memory(critic_run)}
    critic = critic_run["models"]["critic"]
    critic_state = critic["weights_mb"] + critic["gradients_mb"] + critic["optimizer_mb"]
    state = {n: arms[n]["weights_mb"] + arms[n]["gradients_mb"] + arms[n]["optimizer_mb"] for n in names}
    peak_a, peak_b = arms[a]["peak_mb"], arms[b]["peak_mb"]
    ratio = ratio_key(a, b)
    return {
        "pair": [a, b],
        f"{a}_peak_mb": peak_a,
        f"{b}_peak_mb": peak_b,
        ratio: peak_a / peak_b,
        f"{ratio}_theory_peak": peak_a / (peak_a + critic_state),
        f"{ratio}_theory_model_state": state[a] / state[b],
        "difference_mb": peak_b - peak_a,
        "critic_parameters": critic["parameters"],
        "critic_trainable_parameters": critic["trainable_parameters"],
        "critic_weights_mb": critic["weights_mb"],
        "critic_gradients_mb": critic["gradients_mb"],
        "critic_optimizer_mb": critic["optimizer_mb"],
        "critic_model_state_mb": critic_state,
        "critic_activations_mb": arms[b]["activations_mb"] - arms[a]["activations_mb"],
        "other_mb": peak_b - peak_a - critic_state,
        "arms": arms,
    }


def paired_test(a: Sequence[float], b: Sequence[float]) -> dict:
    """Two models scored on the same prompts (``a[i]``, ``b[i]``: each one's pass@1 on prompt i):
    the mean difference ``a - b``, its standard error over prompts (the sample std of the
    differences over sqrt(n)) and 95% interval (normal), and a two-sided p-value: McNemar's exact
    test (a binomial test on the discordant prompts) where every score is 0 or 1 (one sample per
    prompt), else the paired t-test. Pairing removes the prompts' own difficulty from the error,
    which two independent standard errors would count twice."""
    from scipy import stats

    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a paired test needs the same prompts on both sides, two or more: got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b)]
    n, diff = len(d), mean(d)
    se = stdev(d) / math.sqrt(n)
    out = {"prompts": n, "difference": diff, "se": se, "ci95": [diff - 1.96 * se, diff + 1.96 * se]}
    if all(v in (0.0, 1.0) for v in (*a, *b)):
        a_only = sum(1 for x, y in zip(a, b) if x > y)
        b_only = sum(1 for x, y in zip(a, b) if y > x)
        p = float(stats.binomtest(a_only, a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0
        return out | {"a_only": a_only, "b_only": b_only, "p_value": p, "test": "McNemar's exact test, two-sided"}
    p = float(stats.ttest_rel(a, b).pvalue) if se > 0 else (1.0 if diff == 0 else 0.0)
    return out | {"p_value": p, "test": "paired t-test over prompts, two-sided"}


def step_spread(rows: list[dict], key: str) -> float | None:
    """How much ``key`` jumps from one step to the next: the population std of its first
    differences over the run (None with fewer than three points). A smooth trend spreads little;
    a curve that swings step to step spreads much, whatever its level."""
    values = [float(r[key]) for r in rows if r.get(key) not in ("", None)]
    jumps = [y - x for x, y in zip(values, values[1:])]
    return pstdev(jumps) if len(jumps) > 1 else None


def winner(summaries: dict[str, dict], key: str = "test_pass@1") -> str:
    """The algorithm (a key of ``summaries``) with the highest ``key`` (test pass@1), "tie" where
    several share it, "undecided" where one has none."""
    if not summaries or any(s.get(key) is None for s in summaries.values()):
        return "undecided"
    scores = {name: float(s[key]) for name, s in summaries.items()}
    best = max(scores.values())
    leaders = [name for name, v in scores.items() if v == best]
    return leaders[0] if len(leaders) == 1 else "tie"


def arm_stats(values: list[float]) -> dict:
    """Mean, sample std (n - 1) and the 95% interval of the mean over seeds,
    ``mean +- t(0.975, n - 1) * std / sqrt(n)`` (Student's t; no interval from one seed)."""
    from scipy import stats

    n = len(values)
    if n == 0:
        raise ValueError("no values: an arm needs at least one seed")
    m = mean(values)
    sd = stdev(values) if n > 1 else None
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if sd is not None else None
    return {"mean": m, "std": sd, "ci95": None if half is None else [m - half, m + half], "n": n, "values": values}


VERDICT_TEST = "Welch's t-test on the seeds' values, two-sided, alpha 0.05"


def verdict(baseline: list[float], other: list[float], alpha: float = 0.05, higher_is_better: bool = True) -> dict:
    """``other`` against ``baseline``: "better" or "worse" when Welch's t-test rejects equal means
    at ``alpha``, else "tie"; "undecided" with fewer than two seeds on either side (no variance).
    ``higher_is_better=False`` for a cost, such as the forgetting check's held-out loss increase."""
    from scipy import stats

    diff = mean(other) - mean(baseline)
    if len(baseline) < 2 or len(other) < 2:
        return {"verdict": "undecided", "difference": diff, "p_value": None, "test": "needs >= 2 seeds per arm"}
    if stdev(baseline) == 0 and stdev(other) == 0:  # no spread at all: equal means tie, others differ surely
        p = 1.0 if diff == 0 else 0.0
    else:
        p = float(stats.ttest_ind(other, baseline, equal_var=False).pvalue)
    word = "tie" if p >= alpha else "better" if (diff > 0) == higher_is_better else "worse"
    return {"verdict": word, "difference": diff, "p_value": p, "test": VERDICT_TEST}
