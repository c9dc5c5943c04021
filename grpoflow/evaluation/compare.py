"""The comparison of the algorithms (GRPO against the PPO baseline, and any other of the catalog):
accuracy, curve stability, time, memory and where memory goes. Algorithms are named by the caller."""

from __future__ import annotations

import math
from statistics import mean, pstdev, stdev

from grpoflow import metric_names as M

ADAM_BYTES_PER_PARAM = 16  # fp32 weight + gradient + two Adam moments


def stability(rows: list[dict], key: str, window: int = M.RECENT_STEPS) -> float:
    """Std of ``key`` over the last ``window`` steps: how much the curve still swings."""
    values = [float(r[key]) for r in rows[-window:] if r.get(key) not in ("", None)]
    return pstdev(values) if len(values) > 1 else 0.0


def model_state_mb(parameters: int) -> float:
    """Weights + gradients + AdamW moments of ``parameters`` fp32 parameters, in MiB."""
    return parameters * ADAM_BYTES_PER_PARAM / 2**20


def summarize(algorithm: str, train: dict, history: list[dict], evaluation: dict, k: int) -> dict:
    """One algorithm's row of the comparison: test scores, curve stability, cost."""
    test = evaluation.get("test", {})
    accs = [float(r["val_accuracy"]) for r in history if r.get("val_accuracy") not in ("", None)]
    return {
        "algorithm": algorithm,
        "test_pass@1": test.get("pass@1"),
        f"test_pass@{k}": test.get(f"pass@{k}"),
        f"test_maj@{k}": test.get(f"maj@{k}"),
        "val_accuracy_final": train.get("val_accuracy"),
        "val_accuracy_best": max(accs) if accs else None,
        M.REWARD_MEAN_RECENT: mean(float(r["reward_mean"]) for r in history[-M.RECENT_STEPS :]) if history else None,
        f"reward_std_last{M.RECENT_STEPS}": stability(history, "reward_mean"),
        f"loss_std_last{M.RECENT_STEPS}": stability(history, "loss"),
        "kl_final": float(history[-1]["kl"]) if history else None,
        "seconds_per_step": train.get("seconds_per_step"),
        "rollout_tokens_per_s": train.get("rollout_tokens_per_s"),
        "peak_memory_mb": train.get("peak_memory_mb"),
        "heldout_loss_increase": evaluation.get("heldout_loss_increase"),
    }


def memory_breakdown(base: dict, critic_run: dict, critic_parameters: int, names: tuple[str, str]) -> dict:
    """Measured peak memory of a run without a critic (``base``) and one with (``critic_run``), named
    ``names``, the difference, and the part the critic's model state (weights, gradients, optimizer
    moments) explains; the rest is its activations, its engine's buffers and allocator slack."""
    diff = critic_run["peak_memory_mb"] - base["peak_memory_mb"]
    critic_state = model_state_mb(critic_parameters)
    a, b = names
    return {
        f"{a}_peak_mb": base["peak_memory_mb"],
        f"{b}_peak_mb": critic_run["peak_memory_mb"],
        f"{a}_over_{b}": base["peak_memory_mb"] / critic_run["peak_memory_mb"],
        "difference_mb": diff,
        "critic_parameters": critic_parameters,
        "critic_weights_mb": critic_parameters * 4 / 2**20,
        "critic_gradients_mb": critic_parameters * 4 / 2**20,
        "critic_optimizer_mb": critic_parameters * 8 / 2**20,
        "critic_model_state_mb": critic_state,
        "other_mb": diff - critic_state,
    }


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
