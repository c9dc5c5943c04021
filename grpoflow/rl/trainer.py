"""The RL loop every algorithm shares (:class:`Trainer`): each step draws its batch
(:mod:`grpoflow.rl.step_batch`: rollouts, rewards, dynamic sampling, the overlong penalty), hands
it to the algorithm's update with the :class:`~grpoflow.rl.learner.Learner` (the policy's side of
the update, :mod:`grpoflow.rl.algorithm`), syncs the rollout engine's weights and reports the
step's metrics, averaged across processes; around the steps, adaptive KL control, out-of-memory
back-off, evaluation, reference refreshes and checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import torch
import torch.distributed as dist

from grpoflow import metric_names as M
from grpoflow.models import rng
from grpoflow.models.prompting import Prompter
from grpoflow.rl.algorithm import Update, updates_policy
from grpoflow.rl.batch import Batch, Scored
from grpoflow.rl.health import HealthMonitor, Symptom
from grpoflow.rl.inputs import TrainerInputs
from grpoflow.rl.learner import Learner, host_values
from grpoflow.rl.loop_state import LoopState
from grpoflow.rl.oom_backoff import (
    OutOfMemoryAfterBackoff,
    OutOfMemoryInDistributedUpdate,
    distributed_update_oom,
    next_backoff,
)
from grpoflow.rl.ranks import Ranks
from grpoflow.rl.reference_sync import reference_refresh_due, refresh_reference
from grpoflow.rl.step_batch import StepBatches
from grpoflow.rl.step_timing import PhaseTimer, peak_memory_mb


def adapt_beta(beta: float, kl: float, target: float, horizon: int) -> float:
    """Adaptive KL controller (Ziegler et al. 2019): proportional, error clipped to +-20%."""
    error = max(-0.2, min(0.2, kl / target - 1.0))
    return beta * (1.0 + error / horizon * 10)


def _all_mean(values: dict[str, float], world: int, device: torch.device | str = "cpu") -> dict[str, float]:
    if world == 1:
        return values
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)  # NCCL reduces only CUDA tensors
    dist.all_reduce(t)
    return {k: v / world for k, v in zip(keys, t.tolist())}  # one read, not one per metric


class Trainer:
    """The loop, built from :class:`TrainerInputs` and the algorithm's ``update``; ``cfg`` is the
    ``rl`` section: the budget every algorithm uses. ``kl_coef`` is the algorithm's own KL
    coefficient (:func:`grpoflow.catalog.kl_coef`), which adaptive KL control then moves;
    ``engines`` the update's own (:class:`~grpoflow.rl.algorithm.Built`)."""

    def __init__(
        self, inputs: TrainerInputs, update: Update, *, kl_coef: float = 0.0, engines: dict[str, Any] | None = None
    ):
        i = inputs
        self.cfg, self.engine, self.algorithm = i.cfg, i.engine, update
        self.engines = dict(engines or {})  # the update's own engines (a critic's): a back-off clears them too
        self.world = i.world
        # The engine's device is the process's (grpoflow.models.device; build_engine checks they agree):
        # rollouts, rewards and every tensor of the update are moved or built there.
        self.ranks = Ranks(i.rank, i.world, i.engine.device)  # the step's statistics over every process
        self.health = i.health or HealthMonitor()
        self.state = LoopState(beta=kl_coef)  # shared with the batches and the learner: restore() keeps it
        self.timer = PhaseTimer()  # the current step's phases (rank 0's are the ones logged)
        self.batches = StepBatches(
            i.cfg,
            i.rollout,
            i.tokenizer,
            i.reward,
            i.prompts,
            prompter=i.prompter or Prompter(i.tokenizer),
            seed=i.seed,
            ranks=self.ranks,
            state=self.state,
            timer=self.timer,
        )
        self.learner = Learner(
            i.cfg, i.engine, i.ref_model, self.ranks, state=self.state, health=self.health, timer=self.timer
        )

    @property
    def ref(self) -> torch.nn.Module | None:
        """The frozen reference the run penalises KL to, or None."""
        return self.learner.ref

    # -- one step ---------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        """One optimizer step: the step's batch, the algorithm's update, weight sync; its metrics."""
        g = self.generations(step)
        t0 = time.perf_counter()
        self.timer.reset()
        scored, sampling_metrics = self.batches(step, g)
        t_rollout = time.perf_counter() - t0
        try:
            local, t_update, tokens = self._update_on(step, scored, g)
        except torch.OutOfMemoryError as exc:
            if self.world == 1:
                raise  # the loop backs off
            raise OutOfMemoryInDistributedUpdate(self._distributed_oom(step, g)) from exc
        with self.timer.phase(M.PHASE_WEIGHT_SYNC):
            self.batches.rollout.sync_weights(self.engine.module)
        local.update(self._batch_metrics(scored, g, (tokens, t_update), sampling_metrics, self.ranks))
        metrics = _all_mean(local, self.world, self.engine.device)
        metrics.update(self._loop_metrics(g, time.perf_counter() - t0, t_rollout, t_update))
        if (
            self.cfg.adaptive_kl.enabled and self.ref is not None and updates_policy(self.algorithm, step)
        ):  # grpoflow.config.rules: enabled only with a coefficient; a frozen policy's KL says nothing
            a = self.cfg.adaptive_kl
            self.state.beta = adapt_beta(self.state.beta, metrics[M.KL], a.target_kl, a.horizon)
        return metrics

    def _update_on(self, step: int, scored: Scored, g: int) -> tuple[dict[str, float], float, torch.Tensor]:
        """The algorithm's update on the step's batch: ``(its metrics, its seconds, the tokens its
        passes compute)``, the tokens still on the device (read with the batch's metrics)."""
        batch = self.batch_of(scored, g)
        t1 = time.perf_counter()
        # The update's own log-prob passes (reference, old policy) are timed apart, inside it.
        with self.timer.phase(M.PHASE_UPDATE):
            local = self.update(step, batch)
        if self.cfg.num_iterations == 1:  # one optimizer step per batch: the ratio is 1, nothing can be clipped
            local.pop(M.CLIP_RATIO, None)
        return local, time.perf_counter() - t1, batch.attn.sum() * self.cfg.num_iterations

    def batch_of(self, scored: Scored, g: int) -> Batch:
        """The scored rollouts as the update's batch (``rl.mask_truncated_completions`` applied)."""
        return Batch.of(scored, g, mask_truncated=self.cfg.mask_truncated_completions)

    def update(self, step: int, batch: Batch) -> dict[str, float]:
        """The algorithm's update of ``batch`` at ``step``, the engine sized for it; its metrics."""
        self.learner.size_engine(len(batch.ids))  # G may change with the schedule or a back-off
        self.learner.global_step = step
        return self.algorithm.update(batch, self.learner)

    # -- budget under out-of-memory back-off ------------------------------------------------
    def _distributed_oom(self, step: int, g: int) -> str:
        """Why a process among several stops on an out-of-memory error in its update, and what to set."""
        settings = {
            "num_generations": g,
            "max_completion_length": self.batches.max_completion_length,
            "micro_batch_size": self.learner.micro_batch_size,
        }
        return distributed_update_oom(step, self.ranks.rank, self.world, settings, self.cfg.oom_min_completion_length)

    def generations(self, step: int) -> int:
        """G at ``step``: the schedule's, capped by any out-of-memory back-off."""
        return self.state.capped("num_generations", self.cfg.generations_at(step))

    def _back_off(self, step: int, exc: BaseException) -> None:
        """Shrink the next setting after an OOM at ``step``, record it as a health event, drop
        any half-accumulated gradients; raise when nothing is left to shrink."""
        g, max_len, micro = self.generations(step), self.batches.max_completion_length, self.learner.micro_batch_size
        change = next_backoff(g, max_len, micro, self.cfg.oom_min_completion_length) if self.cfg.oom_backoff else None
        if change is None:
            raise OutOfMemoryAfterBackoff(
                f"out of memory at step {step + 1} with num_generations={g}, max_completion_length={max_len}, "
                f"micro_batch_size={micro}: nothing left to back off"
                + ("" if self.cfg.oom_backoff else " (rl.oom_backoff is false)")
                + "; use a smaller model or more GPUs (higher ZeRO stage), or lower rl.prompts_per_step"
            ) from exc
        key, value = change
        old = {"num_generations": g, "max_completion_length": max_len, "micro_batch_size": micro}[key]
        self.state.backoff[key] = value
        self.learner.zero_grad()  # a half-accumulated step leaves none behind
        for engine in self.engines.values():
            engine.zero_grad()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.health.record(
            Symptom(
                f"oom_backoff_{key}_{value}",
                step,
                f"out of memory ({str(exc).splitlines()[0][:120]}); {key} {old} -> {value}",
                "the step did not fit in accelerator memory",
                "fewer prompts per step, a smaller model, or more GPUs",
            )
        )

    @staticmethod
    def _batch_metrics(
        scored: Scored, g: int, update: tuple[torch.Tensor, float], sampling: dict, ranks: Ranks
    ) -> dict[str, float]:
        """The step's rewards and lengths (every process's), this process's throughput (``update``:
        the tokens the update's passes computed, and its seconds), read from the device at once."""
        ro, total = scored.rollouts, ranks.gathered(scored.total)  # a std or max of per-rank ones is neither
        group_std = total.view(-1, g).std(dim=1, correction=0)
        lengths = ranks.gathered(ro.completion_mask.sum(1).float())
        parts = {f"{M.REWARD_PREFIX}{k}": v.mean() for k, v in scored.parts.items()}
        stats = {
            M.REWARD_MEAN: total.mean(),
            M.REWARD_STD: total.std(correction=0),
            M.GROUP_REWARD_STD: group_std.mean(),
            M.FRAC_ZERO_STD_GROUPS: (group_std < 1e-6).float().mean(),
            M.COMPLETION_LENGTH_MEAN: lengths.mean(),
            M.COMPLETION_LENGTH_MAX: lengths.max(),
            M.FRAC_TRUNCATED: ranks.gathered(ro.truncated.float()).mean(),
        }
        generated, computed, *read = host_values(
            [ro.completion_mask.sum(), update[0], *stats.values(), *parts.values()]
        )
        return {
            **dict(zip(stats, read)),
            M.ROLLOUT_TOKENS_PER_S: generated / max(ro.seconds, 1e-9),
            M.UPDATE_TOKENS_PER_S: computed / max(update[1], 1e-9),
            **sampling,
            **dict(zip(parts, read[len(stats) :])),
        }

    def _loop_metrics(self, g: int, seconds: float, t_rollout: float, t_update: float) -> dict[str, float]:
        """The step's timings, schedule values (after back-off), memory and gradient norm."""
        eng = self.engine
        metrics = {
            M.STEP_SECONDS: seconds,
            M.ROLLOUT_SECONDS: t_rollout,
            M.UPDATE_SECONDS: t_update,
            M.KL_COEF: self.state.beta,
            M.NUM_GENERATIONS: g,
            M.MAX_COMPLETION_LENGTH: self.batches.max_completion_length,
            M.MICRO_BATCH_SIZE: eng.train_micro_batch_size_per_gpu(),
            M.LR: eng.get_lr()[0],
            M.PEAK_MEMORY_MB: peak_memory_mb(),
        }
        grad_norm = eng.get_global_grad_norm()
        if grad_norm is not None:  # DeepSpeed reports none for some optimizer set-ups: then none is logged
            metrics[M.GRAD_NORM] = float(grad_norm)
        return metrics

    # -- the loop ----------------------------------------------------------------------------
    def train(
        self,
        *,
        on_step: Callable[[int, dict], None] | None = None,
        on_checkpoint: Callable[[int, LoopState], None] | None = None,
        evaluate: Callable[[int], dict] | None = None,
    ) -> LoopState:
        """Run from ``self.state.step`` to ``cfg.steps``; ``on_checkpoint`` every ``checkpoint_every``."""
        while self.state.step < self.cfg.steps:
            step, t0 = self.state.step, time.perf_counter()
            try:
                metrics = self.step(step)
            except torch.OutOfMemoryError as exc:
                self._back_off(step, exc)
                continue  # the same step again, smaller
            if evaluate and ((step + 1) % self.cfg.eval_every == 0 or step + 1 == self.cfg.steps):
                with self.timer.phase(M.PHASE_EVALUATE):
                    metrics.update(evaluate(step))
            if self.ref is not None and reference_refresh_due(self.cfg, step):
                refresh_reference(self.ref, self.engine, self.cfg.ref_sync_alpha)
            new = self.health.observe(step, metrics)
            metrics[M.HEALTH_SYMPTOMS] = len(self.health.symptoms)
            # This process's split (rank 0's is logged): ranks wait for each other in the update's
            # collectives, so their walls agree and a slow rank shows up as update time on the rest.
            # The checkpoint comes after on_step; its caller times it (tasks/rl_stage.py).
            metrics.update(self.timer.split(time.perf_counter() - t0))
            self.state.step = step + 1
            if on_step:
                on_step(step, {**metrics, "new_symptoms": [s.to_dict() for s in new]})
            if on_checkpoint and self.checkpoint_due(self.state.step):  # the checkpoint captures the RNG itself
                on_checkpoint(self.state.step, self.state)
        return self.state

    def checkpoint_due(self, done: int) -> bool:
        """Whether the loop checkpoints after ``done`` steps: every ``checkpoint_every``, and at the end."""
        return done % self.cfg.checkpoint_every == 0 or done == self.cfg.steps

    def restore(self, state: LoopState) -> None:
        """Continue from a checkpoint's loop state (step, KL coefficient, RNG, back-off), copied into
        the state the batches and the learner share."""
        for f in fields(LoopState):
            setattr(self.state, f.name, getattr(state, f.name))
        rng.restore(state.rng)
