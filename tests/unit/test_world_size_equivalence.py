"""One RL step on 1 process x 8 prompts and on 2 processes x 4 prompts (gloo, CPU), from the same seed
and the same recorded rollouts, leaves the same weights: every ``rl.aggregation``, every advantage
estimator (and grpo's batch scale), the KL in the reward with two iterations, micro-batches with
truncated completions masked, PPO with its critic, and DeepSpeed's ZeRO-2 (GRPO) and ZeRO-1 with
micro-batches (PPO) (tests/unit/world_size_equivalence.py).

All configurations run in one launch of the 2-process group (each rank rebuilds the run for each),
while this process runs the 1-process references; nothing is timed.

Tolerances. The two runs sum the same terms in another order (two partial sums, then DeepSpeed's
average; other padding widths), so the gradients differ by fp32 rounding: measured below 1e-6 of
the largest gradient, hence an absolute bound of 1e-5 of it. Adam's first step moves each weight by
about ``lr * g / (|g| + 1e-8)``: about ``lr`` wherever ``|g| >> 1e-8``, so a rounding error in a
gradient near 1e-8 moves a weight by a fraction of its engine's ``lr`` (measured: at most 0.2%),
while an error of sign or of a rank's weight moves one by up to ``2 lr`` (measured before the fixes:
1.8 to 2 lr): the weights are compared within ``lr / 50`` of their engine (and rtol 1e-5 of their
own size). Adam's step is blind to a scale error that every weight
shares, which the gradients and the reported loss catch.
"""

from __future__ import annotations

import pytest
import torch

from grpoflow import metric_names as M
from grpoflow.ports import free_port
from tests.unit import rl_workspace
from tests.unit import world_size_equivalence as eq


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return rl_workspace.build(tmp_path_factory.mktemp("equivalence"), problems=10)


def _both(workspace, out_dir, names: list[str]) -> tuple[dict, list[dict]]:
    """The single process's results (run here) and each rank's of a 2-process group (spawned; a
    rank that fails ends the other and raises here with its traceback)."""
    import torch.multiprocessing as mp

    args = (2, free_port(), str(workspace), str(out_dir), names)
    group = mp.start_processes(eq.worker, args=args, nprocs=2, join=False, start_method="spawn")
    try:
        single = eq.run_configs(names, workspace)
    finally:
        while not group.join():
            pass
    return single, [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(2)]


def _check_sharding(one: dict, ranks: list[dict]) -> None:
    """Each rank asked for 4 whole prompts (G samples each), none twice, together the step's 8."""
    asked = [r["asked"] for r in ranks]
    assert [len(a) for a in asked] == [eq.PROMPTS // 2] * 2
    assert not set(asked[0]) & set(asked[1]) and set(asked[0]) | set(asked[1]) == set(one["asked"])


def _check_gradients(name: str, one: dict, two: dict) -> None:
    if eq.zero_stage(name) > 0:  # ZeRO keeps the reduced gradients in its partitions, not in .grad:
        assert M.GRAD_NORM in one["metrics"], name  # their norm, compared with the metrics, stands for them
        return
    assert any(one["grads"].values()), name  # a warm-up step leaves the policy alone, not the critic
    for engine, steps in one["grads"].items():
        assert len(two["grads"][engine]) == len(steps), (name, engine)
        for one_step, two_step in zip(steps, two["grads"][engine]):
            largest = max(float(g.abs().max()) for g in one_step.values())
            assert largest > 0, (name, engine)
            for key, g in one_step.items():
                torch.testing.assert_close(two_step[key], g, rtol=1e-5, atol=1e-5 * largest, msg=f"{name} {key}")


def _check_weights(name: str, one: dict, two: dict) -> None:
    moved = max(float((one["weights"][k] - one["before"][k]).abs().max()) for k in one["before"])
    assert moved > min(one["lr"].values()) / 2, name  # the step moved weights, by about lr
    for key, w in one["weights"].items():
        atol = one["lr"][key.split(".")[0]] / 50
        torch.testing.assert_close(two["weights"][key], w, rtol=1e-5, atol=atol, msg=f"{name} {key}")


# The step's loss and gradient norm (scale errors that Adam's first step hides), and what is a mean,
# a std or a maximum over the step's rows or tokens: the adaptive KL controller reads the KL.
SAME_METRICS = (
    M.LOSS,
    M.GRAD_NORM,
    M.KL,
    M.ENTROPY,
    M.CLIP_RATIO,
    M.VALUE_LOSS,
    M.EXPLAINED_VARIANCE,
    M.RETURNS_MEAN,
    M.RETURNS_STD,
    M.REWARD_MEAN,
    M.REWARD_STD,
    M.GROUP_REWARD_STD,
    M.FRAC_ZERO_STD_GROUPS,
    M.COMPLETION_LENGTH_MEAN,
    M.COMPLETION_LENGTH_MAX,
    M.FRAC_TRUNCATED,
)


def _check(name: str, single: dict, ranks: list[dict]) -> None:
    one, two = single["results"][name], ranks[0]["results"][name]
    _check_sharding(one, [r["results"][name] for r in ranks])
    for key, w in two["weights"].items():  # DeepSpeed's average is the same on every rank
        assert torch.equal(ranks[1]["results"][name]["weights"][key], w), key
    _check_gradients(name, one, two)
    _check_weights(name, one, two)
    for key in SAME_METRICS:
        if key in one["metrics"]:
            assert two["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key


def test_one_step_on_two_processes_equals_one_step_on_one(workspace, tmp_path):
    names = list(eq.CONFIGS)
    single, ranks = _both(workspace, tmp_path, names)
    failed = []
    for name in names:
        try:
            _check(name, single, ranks)
        except AssertionError as exc:
            failed.append(f"{name}: {str(exc).splitlines()[0]}")
    assert not failed, "one step differs on 2 processes:\n" + "\n".join(failed)
