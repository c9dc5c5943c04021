"""The step's batch, before any algorithm sees it: this process's share of the step's prompts, G
completions each from the rollout engine, their rewards, DAPO's dynamic sampling (Yu et al. 2025,
section 3.2) and its overlong penalty (section 3.4).

Prompts are sharded across processes by whole groups, so group advantages never need
communication; whatever spans processes goes through :class:`~grpoflow.rl.ranks.Ranks`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from grpoflow import metric_names as M
from grpoflow.config import RLConfig
from grpoflow.models.prompting import Prompter
from grpoflow.rl.batch import Scored
from grpoflow.rl.loop_state import LoopState
from grpoflow.rl.ranks import Ranks
from grpoflow.rl.rewards import WeightedReward, overlong_penalty
from grpoflow.rl.step_timing import PhaseTimer
from grpoflow.rollout import RolloutEngine, Rollouts, Sampling


def prompt_indices(n_prompts: int, per_step: int, step: int, seed: int) -> list[int]:
    """The prompts of ``step``: consecutive slices of per-epoch permutations, fixed by (seed, step)."""
    start = step * per_step
    out: list[int] = []
    while len(out) < per_step:
        epoch, offset = divmod(start + len(out), n_prompts)
        perm = list(range(n_prompts))
        random.Random(seed * 1_000_003 + epoch).shuffle(perm)
        out.extend(perm[offset : offset + per_step - len(out)])
    return out


class StepBatches:
    """Each step's scored rollouts. ``cfg`` is the ``rl`` section; ``seed`` orders prompts and sampling;
    ``state`` the loop's (its back-off caps the completion length); ``timer`` the step's phases."""

    def __init__(
        self,
        cfg: RLConfig,
        rollout: RolloutEngine,
        tokenizer: Any,
        reward: WeightedReward,
        prompts: Sequence[dict],
        *,
        prompter: Prompter,
        seed: int,
        ranks: Ranks,
        state: LoopState,
        timer: PhaseTimer,
    ):
        self.cfg, self.rollout, self.tok, self.reward, self.prompts = cfg, rollout, tokenizer, reward, list(prompts)
        self.prompter, self.seed, self.ranks, self.state, self.timer = prompter, seed, ranks, state, timer

    @property
    def max_completion_length(self) -> int:
        """The completion cap, after any out-of-memory back-off."""
        return self.state.capped("max_completion_length", self.cfg.sampling.max_completion_length)

    def __call__(self, step: int, g: int) -> tuple[Scored, dict[str, float]]:
        """The step's scored rollouts, G per prompt (the informative groups, under dynamic sampling;
        the overlong penalty among the rewards) and dynamic sampling's metrics."""
        scored, metrics = self.scored(step, g), dict[str, float]()
        if self.cfg.dynamic_sampling.enabled:
            scored, metrics = self.informative(step, g, scored)
        self.penalise_overlong(scored)
        return scored, metrics

    def scored(self, step: int, g: int, draw: int = 0) -> Scored:
        """One draw of the step's rollouts (an out-of-memory error on any process raised on all) and
        their rewards. ``draw`` > 0: another set of prompts for the same step (dynamic sampling)."""
        with self.timer.phase(M.PHASE_ROLLOUT):
            ro, rows = self._rollouts_on_every_rank(step, g, draw)
        with self.timer.phase(M.PHASE_REWARD):
            total, parts = self.reward(ro.texts, rows)
        device = self.ranks.device
        return Scored(ro, rows, total.to(device), {k: v.to(device) for k, v in parts.items()})

    def informative(self, step: int, g: int, first: Scored) -> tuple[Scored, dict[str, float]]:
        """DAPO's dynamic sampling: this process's groups with unequal rewards, drawing more prompts
        (at most ``max_draws`` times, every process drawing as long as one still needs to) until it
        has as many as it started with; short of that, groups of equal rewards fill the step."""
        want, batches, draws = len(first.rows) // g, [first], 0
        kept: list[tuple[int, int]] = []  # (batch, group) of groups with unequal rewards
        spare: list[tuple[int, int]] = []
        while True:
            batch = batches[-1]
            std = batch.total.view(-1, g).std(dim=1, correction=0)
            for i, informative in enumerate((std > 1e-6).tolist()):
                (kept if informative else spare).append((len(batches) - 1, i))
            if draws == self.cfg.dynamic_sampling.max_draws or not self.ranks.anyone(len(kept) < want):
                break
            draws += 1
            batches.append(self.scored(step, g, draws))
        chosen = (kept + spare)[:want]
        sampled = sum(len(b.rows) // g for b in batches)
        return Scored.join([batches[j].group(i, g) for j, i in chosen], self.tok.pad_token_id), {
            M.DYNAMIC_SAMPLING_DRAWS: float(draws),
            M.FRAC_DROPPED_GROUPS: (sampled - want) / sampled,  # sampled, then left out of the step
        }

    def penalise_overlong(self, scored: Scored) -> None:
        """DAPO's overlong penalty (``rl.overlong_buffer``), added to the rewards as a component of its own."""
        cfg, cap = self.cfg, self.max_completion_length
        if cfg.overlong_buffer and cap > 1:
            buffer = min(cfg.overlong_buffer, cap - 1)  # a back-off may shorten the cap
            with self.timer.phase(M.PHASE_REWARD):
                scored.parts["overlong"] = overlong_penalty(
                    scored.rollouts.completion_mask.sum(1), cap, buffer, cfg.overlong_penalty
                )
                scored.total = scored.total + scored.parts["overlong"]

    def _rollouts(self, step: int, g: int, draw: int) -> tuple[Rollouts, list[dict]]:
        """This process's share of the step's prompts, G completions each, and each completion's row."""
        # Ints only: their hash is the same in every process (a str's is salted per process).
        seed = self.seed if draw == 0 else hash((self.seed, 1_000_003, draw)) % 2**31
        rank, world = self.ranks.rank, self.ranks.world
        idx = prompt_indices(len(self.prompts), self.cfg.prompts_per_step, step, seed)[rank::world]
        rows = [self.prompts[i] for i in idx]
        s = self.cfg.sampling
        correcting = self.cfg.rollout_correction.mode != "none"
        sampling = Sampling(s.temperature, s.top_p, self.max_completion_length, logprobs=correcting)
        ro = self.rollout.generate(
            [self.prompter.prompt(r["prompt"]) for r in rows],
            g,
            sampling,
            seed=hash((self.seed, step, rank) + ((draw,) if draw else ())) % 2**31,
        )
        return ro.to(self.ranks.device), [r for r in rows for _ in range(g)]

    def _rollouts_on_every_rank(self, step: int, g: int, draw: int) -> tuple[Rollouts, list[dict]]:
        """Rollouts, with an out-of-memory error on any process raised on all of them: before
        the update's first collective, so that every process backs off together."""
        try:
            out, error = self._rollouts(step, g, draw), None
        except torch.OutOfMemoryError as exc:
            out, error = None, exc
        if self.ranks.anyone(error is not None) and error is None:
            error = torch.OutOfMemoryError(f"out of memory during rollouts on another process at step {step + 1}")
        if error is not None or out is None:
            raise error or RuntimeError(f"no rollouts at step {step + 1}")
        return out
