"""The config check a training stage prints before it starts: how the chosen settings depart from
the DeepSeekMath paper and from TRL's defaults (advice: info and warnings), and whether the batch
splits over this many processes (an error only the stage can find: it alone knows its world size).
Every other cross-field rule is in :mod:`grpoflow.config.rules`, checked when the params file is loaded;
the one case loading cannot cover, an algorithm whose stage the set does not list (run by hand),
gets that algorithm's own rules here, from the same module."""

from __future__ import annotations

from dataclasses import dataclass

from grpoflow import catalog
from grpoflow.config import Params, batch_problems, rules, value_at

# DeepSeekMath (Shao et al. 2024), section 4.2: beta 0.04, 64 samples per question, one update
# per exploration stage, lr 1e-6, loss = mean over tokens of a sequence, then over sequences.
# Its estimators: the group z-score advantage, the k3 KL estimate as a loss term; no entropy bonus,
# no length shaping, no dynamic sampling (DAPO came later), no importance correction of the rollouts.
PAPER = {
    "grpo.beta": 0.04,
    "rl.num_generations": 64,
    "rl.aggregation": "grpo",
    "rl.num_iterations": 1,
    "rl.engine.lr": 1e-6,
    "grpo.advantage_estimator": "grpo",
    "grpo.kl_estimator": "k3",
    "grpo.kl_placement": "loss",
    "rl.entropy_coef": 0.0,
    "rl.overlong_buffer": 0,
    "rl.dynamic_sampling.enabled": False,
    "rl.rollout_correction.mode": "none",
    "rl.ref_sync_every": 0,  # its iterative GRPO (section 4.1.3) swaps in the policy as reference between rounds
}
# TRL's GRPOConfig defaults (1.x): no KL term, the DAPO token-level loss (our "bnpo").
TRL = {
    "grpo.beta": (0.0, "0.0"),
    "rl.aggregation": ("bnpo", "bnpo (TRL 'dapo')"),
    "rl.num_iterations": (1, "1"),
    "rl.num_generations": (8, "8"),
}


@dataclass(frozen=True)
class Finding:
    """One line of the config check."""

    level: str  # "error" | "warning" | "info"
    message: str


def lint(params: Params, algorithm: str | None = None, world_size: int = 1) -> list[Finding]:
    """The findings for training ``algorithm`` (default: the catalog's default) on ``world_size`` processes."""
    algorithm = algorithm or catalog.default()
    found: list[Finding] = []
    rl = params.rl
    # The paper and TRL describe GRPO: another algorithm is compared on the shared budget (rl.*) only.
    own = ("rl", *catalog.entry(algorithm).sections)
    keys = [k for k in PAPER if k.split(".")[0] in own]
    for key in keys:
        if value_at(params, key) != PAPER[key]:
            found.append(Finding("info", f"{key} = {value_at(params, key)} (DeepSeekMath: {PAPER[key]})"))
    for key, (ref, label) in TRL.items():
        if key in keys and value_at(params, key) != ref:
            found.append(Finding("info", f"{key} = {value_at(params, key)} (TRL default: {label})"))
    found += [Finding("error", problem) for problem in batch_problems(rl, world_size)]
    if algorithm not in rules.trained_algorithms(params):
        # Its stage is not in experiment.stages (run by hand, or an arm's merged set): loading the
        # set checked every shared rule but not this algorithm's own.
        found += [Finding("error", p) for p in rules.algorithm_violations(params, algorithm)]
    if 0 < rl.sampling.temperature < 0.3:
        found.append(
            Finding(
                "warning", f"rl.sampling.temperature {rl.sampling.temperature} is near-greedy: expect degenerate groups"
            )
        )
    if rl.clip_eps_high is not None and rl.clip_eps_high < rl.clip_eps:
        found.append(
            Finding(
                "warning",
                f"rl.clip_eps_high {rl.clip_eps_high} < rl.clip_eps {rl.clip_eps}: clip-higher is meant to widen",
            )
        )
    if rl.num_iterations == 1:
        found.append(
            Finding(
                "info",
                "rl.num_iterations = 1: the ratio is 1 at every update, so clipping never activates (as in the paper)",
            )
        )
    return found


def format_findings(findings: list[Finding]) -> str:
    """The findings as console lines, one per finding."""
    return "\n".join(f"[{f.level}] {f.message}" for f in findings) or "[info] settings match the paper and TRL defaults"
