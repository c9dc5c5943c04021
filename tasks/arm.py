"""Stage ``arm_<arm>_s<seed>``: one arm of the ablation at one training seed. The arm's overrides
(grpoflow.config.ARMS, or the set's ablation.custom_arms) are applied to the set, its algorithm
trains from the SFT reference on the shared data and budget (as the grpo and ppo stages do), and
the trained policy's test pass@1 (evaluate's samples and temperature) joins the stage's metrics.

    python -m tasks.arm --params params/default.yaml --arm rloo --seed 1     # paths: the arm's own
"""

from __future__ import annotations

import argparse
from pathlib import Path

from grpoflow.config import Params
from tasks.cli import run_stage_cli, stage_parser
from tasks.stages import arm_stage


def test_scores(params: Params, data: Path, reference: Path):
    """What an arm adds to its metrics once trained: pass@1 on (up to evaluate.max_examples of) the
    test split, from evaluate.n_samples samples at evaluate.temperature with the verifier evaluate
    uses, as the evaluate stage scores it; and the forgetting check's held-out loss increase over
    the SFT reference (what a reference refresh, rl.ref_sync_every, changes)."""

    def score(rl_run) -> dict:
        from grpoflow.evaluation.accuracy import heldout_loss, sampled_metrics
        from grpoflow.models.modeling import load_pretrained
        from grpoflow.rl.rewards import correctness_scorer
        from grpoflow.rollout import Sampling
        from tasks.evaluate import canonical, eval_sets, heldout_rows

        cfg, seed = params.evaluate, params.experiment.seed
        rows = eval_sets(data, cfg.max_examples, seed)["test"]
        sampling = Sampling(cfg.temperature, 1.0, params.rl.sampling.max_completion_length)
        result = sampled_metrics(
            rl_run.trainer.batches.rollout,
            rows,
            correctness_scorer(params),
            canonical,
            rl_run.prompter,
            n=cfg.n_samples,
            k=1,
            sampling=sampling,
            seed=seed,
        )
        heldout = heldout_rows(data)
        # The SFT model as saved, not rl_run's reference: a refresh moves that one.
        increase = heldout_loss(rl_run.engine.module, rl_run.prompter, heldout) - heldout_loss(
            load_pretrained(reference)[0], rl_run.prompter, heldout
        )
        return {
            "test_pass@1": result.pass_at_1,
            "test_pass@1_se": result.pass_at_1_stderr,
            "test_examples": len(rows),
            "heldout_loss_increase": increase,
        }

    return score


def main(args: argparse.Namespace, params: Params) -> None:
    from grpoflow.config import arm_params
    from grpoflow.rl.algorithm import ALGORITHMS
    from tasks import rl_stage

    arm = params.ablation.arm(args.arm)
    arm_set = arm_params(params, args.arm)
    hooks = rl_stage.ArmHooks(
        stage="arm",
        run_name=f"arm/{args.arm}/s{args.seed}",
        params={"arm": args.arm, "arm_overrides": str(arm.overrides) or "{}"},
        scores=test_scores(arm_set, Path(args.data), Path(args.reference)),
    )
    rl_stage.run(args, arm_set, ALGORITHMS[arm.algorithm], arm=hooks)


if __name__ == "__main__":
    # The arm and seed first: the paths default to that arm's own (its declaration in tasks/stages.py).
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--arm", default="ARM")
    first.add_argument("--seed", type=int, default=0)
    chosen, _ = first.parse_known_args()
    parser = stage_parser("arm", __doc__, declared=arm_stage(chosen.arm, chosen.seed))
    parser.add_argument("--arm", required=True, help="the arm's name (grpoflow.config.ARMS or ablation.custom_arms)")
    parser.add_argument("--seed", type=int, required=True, help="the training seed (the data and reference are shared)")
    run_stage_cli(parser, main)
