"""The learner's contract guards what an update could get silently wrong (grpoflow/rl/learner.py):
old log-probs for more than one pass, one iteration of the micro-batches, one value per metric; and
the update's metrics are read from the device at once, per device, in order; a non-finite loss or
gradient norm stops the step before any weight moves."""

from __future__ import annotations

import pytest
import torch

from grpoflow.config import validate_params
from grpoflow.rl.algorithm import ALGORITHMS
from grpoflow.rl.health import TrainingDiverged
from grpoflow.rl.learner import Tally, host_values
from grpoflow.rl.losses import rollout_correction
from grpoflow.rl.run import build_rl_run
from tests.unit import rl_workspace

TINY = {
    "rl": {
        "steps": 1,
        "prompts_per_step": 2,
        "num_generations": 2,
        "sampling": {"max_completion_length": 4},
        "engine": {"micro_batch_size": 2, "lr": 0.01},
    }
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return rl_workspace.build(tmp_path_factory.mktemp("learner"))


def learner_and_batch(workspace, **rl):
    params = validate_params({"rl": {**TINY["rl"], **rl}})
    run = build_rl_run(params, ALGORITHMS["grpo"], data_dir=workspace / "data", reference_dir=workspace / "ref")
    trainer = run.trainer
    batch = trainer.batch_of(trainer.batches.scored(0, 2), 2)
    trainer.learner.size_engine(len(batch.ids))
    return trainer.learner, batch


def test_more_than_one_pass_needs_the_old_log_probs(workspace):
    learner, batch = learner_and_batch(workspace, num_iterations=2)
    with pytest.raises(ValueError, match="pass learner.old_logprobs"):
        learner.micro_batches(batch)
    assert len(list(learner.micro_batches(batch, learner.old_logprobs(batch)))) == 2 * len(learner.plan(batch))


def test_the_micro_batches_are_iterated_once(workspace):
    learner, batch = learner_and_batch(workspace)
    micro_batches = learner.micro_batches(batch)
    for mb in micro_batches:
        learner.step(mb, (mb.logp * mb.mask).sum() * 0.0)
    assert micro_batches.metrics()["loss"] == 0.0
    with pytest.raises(RuntimeError, match="iterated once"):
        next(iter(micro_batches))


def test_a_metric_is_one_value_and_its_graph_is_not_kept():
    tally = Tally(passes=2)
    weight = torch.ones(3, requires_grad=True)
    tally.add("kl", (weight * 2).sum(), times=0.5)
    assert not tally.terms["kl"][0][0].requires_grad
    with pytest.raises(ValueError, match="metric 'kl': one value per micro-batch"):
        tally.add("kl", weight)
    tally.add("kl", 1.0, times=0.5)
    assert tally.means() == {"kl": (6.0 * 0.5 + 1.0 * 0.5) / 2}


def test_host_values_keep_the_order_and_the_floats():
    values = [torch.tensor(1.5), 2.0, torch.tensor([3.25]), torch.tensor(4.0, dtype=torch.float64)]
    assert host_values(values) == [1.5, 2.0, 3.25, 4.0]
    assert host_values([]) == []


def test_rollout_correction_of_no_completion_tokens_is_no_correction():
    empty = torch.zeros(2, 0)
    weights, mask, metrics = rollout_correction(empty, empty, empty, "token_truncate", 2.0)
    assert weights is not None and weights.shape == (2, 0) and mask.shape == (2, 0)
    assert float(metrics["rollout_ratio_max"]) == 1.0


def _weights(learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.engine.module.parameters()]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_stops_the_step_before_any_weight_moves(workspace, bad):
    """The first micro-batch's loss is bad, the second's fine: the guard reads at the optimizer step
    (once a step, not once a micro-batch) and names the bad loss, the weights as they were."""
    learner, batch = learner_and_batch(workspace, engine={"micro_batch_size": 1, "lr": 0.01})
    before, micro_batches = _weights(learner), iter(learner.micro_batches(batch))
    first = next(micro_batches)
    learner.step(first, (first.logp * first.mask).sum() * bad)
    with pytest.raises(TrainingDiverged, match=f"loss is -?{bad}"):
        for mb in micro_batches:
            learner.step(mb, (mb.logp * mb.mask).sum())
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(learner)))


def test_a_non_finite_gradient_norm_stops_the_step_before_any_weight_moves(workspace):
    """A finite loss whose gradient is not (on one process, all-reduced to every one: each stops here)."""
    learner, batch = learner_and_batch(workspace)
    before = _weights(learner)
    first = next(p for p in learner.engine.module.parameters() if p.requires_grad)
    first.register_hook(lambda grad: grad * float("nan"))
    with pytest.raises(TrainingDiverged, match="grad_norm is nan"):
        for mb in learner.micro_batches(batch):
            learner.step(mb, (mb.logp * mb.mask).sum())
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(learner)))


def test_an_update_cut_short_by_a_back_off_leaves_no_unchecked_loss_to_the_next(workspace):
    """An update that stopped mid-accumulation (out of memory) and whose gradients the back-off dropped
    does not hand its losses to the next."""
    learner, batch = learner_and_batch(workspace, engine={"micro_batch_size": 1, "lr": 0.01})
    mb = next(iter(learner.micro_batches(batch)))
    learner.step(mb, (mb.logp * mb.mask).sum() * float("nan"))  # not the boundary: nothing read yet
    learner.zero_grad()
    for mb in learner.micro_batches(batch):
        learner.step(mb, (mb.logp * mb.mask).sum())
    assert learner.engine.get_global_grad_norm() is not None


def test_an_update_that_stops_early_hands_its_unchecked_loss_to_the_next(workspace):
    """An update that stops before the boundary leaves its gradients, a NaN loss's among them: the
    next update's optimizer step checks that loss too, before any weight moves."""
    learner, batch = learner_and_batch(workspace, engine={"micro_batch_size": 1, "lr": 0.01})
    before = _weights(learner)
    for mb in learner.micro_batches(batch):
        learner.step(mb, (mb.logp * mb.mask).sum() * float("nan"))
        break
    with pytest.raises(TrainingDiverged, match="loss is -?nan"):
        for mb in learner.micro_batches(batch):
            learner.step(mb, (mb.logp * mb.mask).sum())
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(learner)))


def test_an_update_that_stops_early_keeps_the_entropy_of_its_last_micro_batch(workspace):
    """An update may stop before the last micro-batch (a KL limit, say): the one it stopped on was
    handed to it, and its entropy is in the metrics, as its loss is."""
    learner, batch = learner_and_batch(workspace, engine={"micro_batch_size": 1, "lr": 0.01})
    micro_batches = learner.micro_batches(batch)
    for mb in micro_batches:
        learner.step(mb, (mb.logp * mb.mask).sum() * 0.0)
        first = mb
        break
    tally = micro_batches.tally
    assert len(tally.terms["entropy"]) == len(tally.terms["loss"]) == 1, tally.terms
    assert micro_batches.metrics()["entropy"] > 0 and first.scales.share < 1
