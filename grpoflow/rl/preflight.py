"""Preflight: before the first RL step, sample the starting policy G times on a fixed sample of
train prompts and ask whether training can learn anything. GRPO learns only from groups whose
rewards differ (an all-equal group has every advantage 0), so the verdict is the share of such
groups, with the evidence a user needs to choose a remedy: reward per verifier, pass@G, the
completion lengths and how many hit the cap.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from grpoflow.config import RLConfig
from grpoflow.data.records import BatchScorer
from grpoflow.rl.rewards import WeightedReward
from grpoflow.rollout import RolloutEngine, Sampling

OK, WEAK, NONE = "ok", "weak", "none"


@dataclass
class Preflight:
    """What the starting policy does on the preflight prompts, and the verdict."""

    verdict: str
    signal: float  # share of groups whose rewards are not all equal
    reward_mean: float
    reward_by_verifier: dict[str, float]
    pass_at_g: float
    group_size: int
    prompts: int
    length_mean: float
    length_p90: float
    frac_truncated: float
    remedies: list[str] = field(default_factory=list)
    examples: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The result as JSON-able metrics."""
        return {k: v for k, v in asdict(self).items() if k != "examples"}

    def report(self) -> str:
        """The result as a markdown section."""
        rows = "\n".join(f"| reward/{k} | {v:.3f} |" for k, v in self.reward_by_verifier.items())
        remedies = "\n".join(f"- {r}" for r in self.remedies) or "- none needed"
        samples = "\n\n".join(
            f"**reward {e['reward']:.2f}** (reference {e['reference']}):\n```\n{e['completion'][:400]}\n```"
            for e in self.examples
        )
        return (
            f"## Preflight: {self.verdict.upper()}\n\n{self.prompts} train prompts x G={self.group_size}\n\n"
            f"| measure | value |\n|---|---|\n| groups with unequal rewards | {self.signal:.3f} |\n"
            f"| reward mean | {self.reward_mean:.3f} |\n{rows}\n| pass@G | {self.pass_at_g:.3f} |\n"
            f"| completion length mean / p90 | {self.length_mean:.1f} / {self.length_p90:.0f} |\n"
            f"| truncated (hit the cap) | {self.frac_truncated:.3f} |\n\n### Remedies\n\n{remedies}\n\n"
            f"### Samples\n\n{samples}\n"
        )


def _remedies(p: Preflight, rl: RLConfig, all_correct: float) -> list[str]:
    found = []
    if p.pass_at_g == 0:
        found.append(
            "no prompt was solved even once in G samples: easier data (data.synthetic), an SFT stage "
            "first (sft.enabled), or check the verifier against these samples"
        )
    if all_correct > 0.5:
        found.append("most groups are solved by every sample: harder data")
    if p.frac_truncated > 0.3:
        found.append(f"{p.frac_truncated:.0%} of completions hit the cap: raise rl.sampling.max_completion_length")
    if rl.sampling.temperature < 0.7:
        found.append(f"temperature {rl.sampling.temperature} makes samples alike: raise rl.sampling.temperature")
    if rl.num_generations < 8:
        found.append(f"G={rl.num_generations}: a larger G (rl.num_generations) makes a mixed group likelier")
    return found or ["hand-check the samples below against the verifier: a reward that cannot vary teaches nothing"]


def run_preflight(
    engine: RolloutEngine,
    prompt: Callable[[str], str],
    reward: WeightedReward,
    correct: BatchScorer,
    rows: Sequence[dict],
    rl: RLConfig,
    *,
    seed: int,
) -> Preflight:
    """Sample ``rl.preflight.prompts`` train rows (fixed by ``seed``) G times and judge the signal."""
    import torch

    chosen = random.Random(seed).sample(list(rows), min(rl.preflight.prompts, len(rows)))
    g, s = rl.num_generations, rl.sampling
    ro = engine.generate(
        [prompt(r["prompt"]) for r in chosen], g, Sampling(s.temperature, s.top_p, s.max_completion_length), seed
    )
    expanded = [r for r in chosen for _ in range(g)]
    total, parts = reward(ro.texts, expanded)
    groups = total.view(-1, g)
    equal = (groups.max(dim=1).values - groups.min(dim=1).values) < 1e-6
    solved = torch.tensor([c >= 0.5 for c in correct(ro.texts, expanded)]).view(-1, g)
    lengths = ro.completion_mask.sum(1).float()
    signal = 1.0 - float(equal.float().mean())
    p = Preflight(
        verdict=NONE if signal == 0 else WEAK if signal < rl.preflight.min_signal else OK,
        signal=signal,
        reward_mean=float(total.mean()),
        reward_by_verifier={k: float(v.mean()) for k, v in parts.items()},
        pass_at_g=float(solved.any(dim=1).float().mean()),
        group_size=g,
        prompts=len(chosen),
        length_mean=float(lengths.mean()),
        length_p90=float(lengths.quantile(0.9)),
        frac_truncated=float(ro.truncated.float().mean()),
        examples=[
            {"reward": float(total[i]), "reference": expanded[i].get("reference_answer"), "completion": ro.texts[i]}
            for i in range(0, len(ro.texts), max(1, len(ro.texts) // 3))
        ][:3],
    )
    if p.verdict != OK:
        p.remedies = _remedies(p, rl, float(solved.all(dim=1).float().mean()))
    return p
