"""The trainer's GRPO step against the paper's, restated in plain torch (tests/unit/reference_grpo.py).

Both start from the same tiny model and reference, and see the same rollouts and rewards, injected
in place of sampling and scoring. The real step (grpoflow.rl.trainer.Trainer.step with GRPO's update,
on its DeepSpeed engine, on the CPU) must leave the same weights as the reference's AdamW step(s),
and report the same loss. The reference is moved away from the policy first: at the start they are
equal, and the KL term would add no gradient.

Adam's first step is nearly sign(gradient) per weight, so the weights alone miss an error that
scales the loss; the reported loss catches that one.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpoflow import metric_names as M
from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
from grpoflow.config import validate_params
from grpoflow.rl.batch import Scored
from grpoflow.rl.run import build_rl_run
from grpoflow.rollout import Rollouts
from tests.unit import rl_workspace
from tests.unit.reference_grpo import reference_step

G = 4
PROMPT_LENGTHS = (5, 3)  # the second group's prompt is left-padded
COMPLETION_LENGTHS = (6, 2, 4, 3, 5, 1, 6, 2)  # right-padded: lengths differ within a group
REWARDS = (1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0, 0.25)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    # the default tiny model's shape
    return rl_workspace.build(tmp_path_factory.mktemp("reference_step"), 4, validate_params({}).model)


def injected_rollouts(vocab: int, pad: int) -> Rollouts:
    """Two groups of G completions with fixed tokens, as a rollout engine would return them."""
    gen = torch.Generator().manual_seed(7)
    n, p, c = G * len(PROMPT_LENGTHS), max(PROMPT_LENGTHS), max(COMPLETION_LENGTHS)
    prompt_ids, prompt_mask = torch.full((n, p), pad), torch.zeros(n, p, dtype=torch.long)
    for group, length in enumerate(PROMPT_LENGTHS):
        prompt = torch.randint(3, vocab, (length,), generator=gen)
        prompt_ids[group * G : (group + 1) * G, p - length :] = prompt
        prompt_mask[group * G : (group + 1) * G, p - length :] = 1
    completion_ids, completion_mask = torch.full((n, c), pad), torch.zeros(n, c, dtype=torch.long)
    for i, length in enumerate(COMPLETION_LENGTHS):
        completion_ids[i, :length] = torch.randint(3, vocab, (length,), generator=gen)
        completion_mask[i, :length] = 1
    return Rollouts(
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask,
        [f"c{i}" for i in range(n)],
        torch.zeros(n, dtype=torch.bool),
    )


# A token budget of 15 positions splits the batch 3 + 1 + 4 (tests/unit/test_micro_batches.py): micro-
# batches of unequal size must still add up to the batch's objective.
@pytest.mark.parametrize(
    "iterations, micro, budget", [(1, 8, None), (1, 4, None), (2, 8, None), (1, 8, 15), (2, 8, 15)]
)
def test_one_trainer_step_equals_the_reference_grpo_step(workspace, iterations, micro, budget):
    params = validate_params(
        {
            "rl": {
                "prompts_per_step": len(PROMPT_LENGTHS),
                "num_generations": G,
                "num_iterations": iterations,
                "engine": {"micro_batch_size": micro, "max_tokens_per_micro_batch": budget},
            }
        }
    )
    run = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    trainer = run.trainer
    with torch.no_grad():  # a reference apart from the policy, so that the KL term has a gradient
        gen = torch.Generator().manual_seed(1)
        for w in trainer.ref.parameters():
            w.add_(0.05 * torch.randn(w.shape, generator=gen))
    ro = injected_rollouts(len(run.tokenizer), run.tokenizer.pad_token_id)
    rewards = torch.tensor(REWARDS)
    trainer.batches.scored = lambda step, g, draw=0: Scored(
        ro, [{"id": str(i // G)} for i in range(len(REWARDS))], rewards, {"math": rewards}
    )

    policy = AutoModelForCausalLM.from_pretrained(workspace / "ref", dtype=torch.float32)
    ref = copy.deepcopy(trainer.ref)
    e, g = params.rl.engine, params.grpo
    optimizer = torch.optim.AdamW(policy.parameters(), lr=e.lr, betas=e.betas, weight_decay=e.weight_decay)
    losses = reference_step(
        policy,
        ref,
        optimizer,
        ro,
        rewards,
        g=G,
        beta=g.beta,
        clip_eps=params.rl.clip_eps,
        adv_eps=g.advantage_eps,
        max_grad_norm=e.gradient_clipping,
        iterations=iterations,
    )

    planned, plan = [], trainer.learner.plan
    trainer.learner.plan = lambda b: planned.append(plan(b)) or planned[-1]
    metrics = trainer.step(0)
    sizes = [sl.stop - sl.start for sl in planned[-1]]
    assert sizes == ([3, 1, 4] if budget else [micro] * (len(REWARDS) // micro))

    # AdamW moves each weight by about lr * g / (|g| + 1e-8): where a gradient is ~1e-9 (the median is
    # ~1e-4), fp32 rounding in it (the trainer packs each group's shared prompt, the reference does not)
    # changes the move by a few % of lr (2.4% measured). A wrong sign moves a weight by 2 lr.
    trained = dict(trainer.engine.module.named_parameters())
    for name, w in policy.named_parameters():
        torch.testing.assert_close(trained[name], w, rtol=1e-5, atol=0.1 * e.lr, msg=lambda m, n=name: f"{n}: {m}")
    assert metrics[M.LOSS] == pytest.approx(sum(losses) / len(losses), rel=1e-5, abs=1e-7)
