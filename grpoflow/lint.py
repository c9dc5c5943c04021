"""Before training: how the chosen settings differ from the DeepSeekMath paper and from TRL's
defaults, and whether the batch arithmetic can work at all."""

from __future__ import annotations

from dataclasses import dataclass

from grpoflow.config import GRPOConfig

# DeepSeekMath (Shao et al. 2024), section 4.2: beta 0.04, 64 samples per question, one update
# per exploration stage, lr 1e-6, loss = mean over tokens of a sequence, then over sequences.
PAPER = {"beta": 0.04, "num_generations": 64, "aggregation": "grpo", "num_iterations": 1, "lr": 1e-6}
# TRL's GRPOConfig defaults (1.x): no KL term, the DAPO token-level loss (our "bnpo").
TRL = {"beta": (0.0, "0.0"), "aggregation": ("bnpo", "bnpo (TRL 'dapo')"), "num_iterations": (1, "1"), "num_generations": (8, "8")}


@dataclass(frozen=True)
class Finding:
    level: str  # "error" | "warning" | "info"
    message: str


def lint(cfg: GRPOConfig, world_size: int = 1) -> list[Finding]:
    found: list[Finding] = []
    ours = {"beta": cfg.beta, "num_generations": cfg.num_generations, "aggregation": cfg.aggregation,
            "num_iterations": cfg.num_iterations, "lr": cfg.engine.lr}
    for key, ref in PAPER.items():
        if ours[key] != ref:
            found.append(Finding("info", f"{key} = {ours[key]} (DeepSeekMath: {ref})"))
    for key, (ref, label) in TRL.items():
        if ours[key] != ref:
            found.append(Finding("info", f"{key} = {ours[key]} (TRL default: {label})"))
    if cfg.prompts_per_step % world_size:
        found.append(Finding("error", f"prompts_per_step={cfg.prompts_per_step} is not divisible by {world_size} processes"))
    micro = cfg.engine.micro_batch_size
    for g in sorted({cfg.num_generations, *(e.num_generations for e in cfg.generation_schedule)}):
        per_rank = cfg.prompts_per_step // max(world_size, 1) * g
        if per_rank % min(micro, per_rank):
            found.append(Finding("error", f"{per_rank} sequences per process (prompts/process x G={g}) are not a multiple of micro_batch_size={micro}"))
    if cfg.sampling.temperature == 0:
        found.append(Finding("error", "temperature 0 makes every completion of a group identical: all advantages are 0"))
    elif cfg.sampling.temperature < 0.3:
        found.append(Finding("warning", f"temperature {cfg.sampling.temperature} is near-greedy: expect degenerate groups"))
    if cfg.adaptive_beta.enabled and cfg.beta == 0:
        found.append(Finding("error", "adaptive_beta needs a starting beta > 0"))
    if cfg.clip_eps_high is not None and cfg.clip_eps_high < cfg.clip_eps:
        found.append(Finding("warning", f"clip_eps_high {cfg.clip_eps_high} < clip_eps {cfg.clip_eps}: clip-higher is meant to widen"))
    if cfg.num_iterations == 1 and cfg.clip_eps:
        found.append(Finding("info", "num_iterations = 1: the ratio is 1 at every update, so clipping never activates (as in the paper)"))
    return found


def format_findings(findings: list[Finding]) -> str:
    return "\n".join(f"[{f.level}] {f.message}" for f in findings) or "[info] settings match the paper and TRL defaults"
