"""What GRPO and the PPO baseline share: rollouts, rewards, the step's metrics, the loop with its
checkpoint and evaluation hooks. Each algorithm supplies only its update (:meth:`update`).

Prompts are sharded across processes by whole groups, so group advantages never need
communication; batch-level statistics and the loss's means are the whole step's
(:mod:`grpoflow.rl.ranks`); metrics are averaged across processes before they are reported.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import gcd
from typing import Any

import torch
import torch.distributed as dist

from grpoflow import metric_names as M
from grpoflow.config import RLConfig
from grpoflow.models import rng
from grpoflow.models.engine import optimizer_step
from grpoflow.models.prompting import Prompter
from grpoflow.rl import micro_batches
from grpoflow.rl import shared_prefix as sp
from grpoflow.rl.batch import Batch, MicroBatch, Scored, masked_mean
from grpoflow.rl.health import HealthMonitor, Symptom
from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rl.loop_state import LoopState
from grpoflow.rl.losses import rollout_correction
from grpoflow.rl.oom_backoff import OutOfMemoryAfterBackoff, next_backoff
from grpoflow.rl.ranks import Ranks
from grpoflow.rl.reference_sync import reference_refresh_due, refresh_reference
from grpoflow.rl.rewards import WeightedReward, overlong_penalty
from grpoflow.rl.step_timing import PhaseTimer, peak_memory_mb
from grpoflow.rollout import RolloutEngine, Rollouts, Sampling

# A micro-batch's rollout correction: (token weights or None, the loss mask it leaves).
Corrected = tuple[torch.Tensor | None, torch.Tensor]


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
    return {k: float(v) / world for k, v in zip(keys, t)}


@dataclass
class TrainerInputs:
    """What every algorithm's trainer is built from (:func:`grpoflow.rl.run.build_rl_run` fills it):
    the ``rl`` section, the policy's engine, the frozen reference (present exactly when the run
    needs one, :func:`grpoflow.rl.run.needs_reference`), the rollout engine, the reward and the
    train prompts; ``seed`` orders prompts and sampling; ``rank``/``world`` shard them."""

    cfg: RLConfig
    engine: Any  # a DeepSpeed engine
    ref_model: torch.nn.Module | None
    rollout: RolloutEngine
    tokenizer: Any
    reward: WeightedReward
    prompts: Sequence[dict]
    seed: int
    prompter: Prompter | None = None
    rank: int = 0
    world: int = 1
    health: HealthMonitor | None = None


class PolicyTrainer:
    """The loop shared by GRPO and PPO, built from :class:`TrainerInputs`; ``cfg`` is the ``rl``
    section: the budget both use. ``kl_coef`` is the algorithm's own KL coefficient; ``ref`` is the
    frozen reference it penalises against."""

    def __init__(self, inputs: TrainerInputs, *, kl_coef: float):
        i = inputs
        self.cfg, self.engine, self.ref, self.rollout = i.cfg, i.engine, i.ref_model, i.rollout
        self.tok, self.reward, self.prompts = i.tokenizer, i.reward, list(i.prompts)
        self.prompter = i.prompter or Prompter(i.tokenizer)
        self.seed, self.rank, self.world = i.seed, i.rank, i.world
        # The engine's device is the process's (grpoflow.models.device; build_engine checks they agree):
        # rollouts, rewards and every tensor of the update are moved or built there.
        self.device = i.engine.device
        self.ranks = Ranks(i.rank, i.world, self.device)  # the step's statistics over every process
        self.health = i.health or HealthMonitor()
        self.state = LoopState(beta=kl_coef)
        self.timer = PhaseTimer()  # the current step's phases (rank 0's are the ones logged)

    # -- one step ---------------------------------------------------------------------------
    def _rollouts(self, step: int, g: int, draw: int = 0) -> tuple[Rollouts, list[dict]]:
        """This process's share of the step's prompts, G completions each, and each completion's row.
        ``draw`` > 0: another set of prompts for the same step (dynamic sampling), fixed by it too."""
        # Ints only: their hash is the same in every process (a str's is salted per process).
        seed = self.seed if draw == 0 else hash((self.seed, 1_000_003, draw)) % 2**31
        idx = prompt_indices(len(self.prompts), self.cfg.prompts_per_step, step, seed)[self.rank :: self.world]
        rows = [self.prompts[i] for i in idx]
        s = self.cfg.sampling
        correcting = self.cfg.rollout_correction.mode != "none"
        sampling = Sampling(s.temperature, s.top_p, self.max_completion_length, logprobs=correcting)
        ro = self.rollout.generate(
            [self.prompter.prompt(r["prompt"]) for r in rows],
            g,
            sampling,
            seed=hash((self.seed, step, self.rank) + ((draw,) if draw else ())) % 2**31,
        )
        return ro.to(self.device), [r for r in rows for _ in range(g)]

    def _scored(self, step: int, g: int, draw: int = 0) -> Scored:
        """Rollouts (an out-of-memory error on any process raised on all) and their rewards."""
        with self.timer.phase(M.PHASE_ROLLOUT):
            ro, rows = self._rollouts_on_every_rank(step, g, draw)
        with self.timer.phase(M.PHASE_REWARD):
            total, parts = self.reward(ro.texts, rows)
        return Scored(ro, rows, total.to(self.device), {k: v.to(self.device) for k, v in parts.items()})

    def _informative(self, step: int, g: int, first: Scored) -> tuple[Scored, dict[str, float]]:
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
            if draws == self.cfg.dynamic_sampling.max_draws or not self._anyone(len(kept) < want):
                break
            draws += 1
            batches.append(self._scored(step, g, draws))
        chosen = (kept + spare)[:want]
        sampled = sum(len(b.rows) // g for b in batches)
        return Scored.join([b.group(i, g) for b, i in ((batches[j], i) for j, i in chosen)], self.tok.pad_token_id), {
            M.DYNAMIC_SAMPLING_DRAWS: float(draws),
            M.FRAC_DROPPED_GROUPS: (sampled - want) / sampled,  # sampled, then left out of the step
        }

    def _anyone(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any process (every process must call this together)."""
        if self.world == 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.engine.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def _inputs(self, ro: Rollouts):
        ids = torch.cat([ro.prompt_ids, ro.completion_ids], dim=1)
        attn = torch.cat([ro.prompt_mask, ro.completion_mask], dim=1)
        mask = ro.completion_mask.float()
        if self.cfg.mask_truncated_completions:
            mask = mask * (~ro.truncated).float().unsqueeze(1)
        return ids, attn, mask, ro.prompt_ids.shape[1]

    def _plan(self, b: Batch) -> list[slice]:
        """This batch's micro-batches (:func:`grpoflow.rl.micro_batches.plan`)."""
        packed = self.cfg.engine.shared_prefix and sp.unsupported(self.engine.module) is None
        micro = self.engine.train_micro_batch_size_per_gpu()
        return micro_batches.plan(b.ids, b.attn, b.start, micro, self.token_budget, packed)

    @torch.no_grad()
    def _frozen_logprobs(self, model, b: Batch) -> torch.Tensor:
        """Per-token log-probs without gradients: of the reference, or of the policy before its
        update (the old/sampler log-probs), each timed as its own phase of the step."""
        key = M.PHASE_REF_LOGPROBS if model is self.ref else M.PHASE_OLD_LOGPROBS
        with self.timer.phase(key):
            parts = [
                completion_logprobs(model, b.ids[sl], b.attn[sl], b.start, shared_prefix=self.cfg.engine.shared_prefix)[
                    0
                ]
                for sl in self._plan(b)
            ]
            return torch.cat(parts)

    def _policy_logprobs(self, eng, b: Batch, sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The update's ``(log-probs, entropies)`` of micro-batch ``sl`` under the policy, with
        gradient (the entropies with it only under an entropy bonus)."""
        cfg = self.cfg
        return completion_logprobs(
            eng,
            b.ids[sl],
            b.attn[sl],
            b.start,
            with_entropy=True,
            entropy_grad=cfg.entropy_coef > 0,
            shared_prefix=cfg.engine.shared_prefix,
        )

    def _micro_batch(
        self,
        b: Batch,
        sl: slice,
        old_logp: torch.Tensor | None,
        corrected: Corrected | None,
        seen: dict[str, list[float]],
        *scales: float,
    ) -> MicroBatch:
        """Micro-batch ``sl`` as the loss sees it: the policy's log-probs and entropies, the old
        log-probs (the current ones, detached, when the update takes none: with mu = 1 they are
        equal), the token weights and loss mask after rollout correction (``corrected``, else made here
        from those old log-probs), and its ``scales``."""
        logp, ent = self._policy_logprobs(self.engine, b, sl)
        old = old_logp[sl] if old_logp is not None else logp.detach()
        weights, mask = corrected if corrected is not None else self._corrected(old, b, sl, seen)
        return MicroBatch(sl, logp, ent, old, mask, weights, *scales)

    def _corrected(self, old: torch.Tensor, b: Batch, sl: slice, seen: dict[str, list[float]]):
        """``(token weights or None, loss mask)`` of micro-batch ``sl`` under ``rl.rollout_correction``,
        recording the mismatch in ``seen`` (:func:`grpoflow.rl.losses.rollout_correction`)."""
        if b.sampler_logp is None:
            return None, b.mask[sl]
        c = self.cfg.rollout_correction
        weights, mask, metrics = rollout_correction(old, b.sampler_logp[sl].to(old.dtype), b.mask[sl], c.mode, c.cap)
        for key, value in metrics.items():
            seen.setdefault(key, []).append(value)
        return weights, mask

    def _masking_split(self, b: Batch, slices: list[slice]) -> bool:
        """Whether a masking correction decides per token from the old log-probs while the step's tokens
        are split (micro-batches, processes): a token mean's weights must then count the kept tokens of
        the whole step before its first micro-batch steps, so the old log-probs are taken first."""
        masking = b.sampler_logp is not None and self.cfg.rollout_correction.mode.endswith("_mask")
        return masking and (len(slices) > 1 or self.world > 1)

    def _step_corrections(
        self, b: Batch, slices: list[slice], old_logp: torch.Tensor | None, seen: dict[str, list[float]]
    ) -> list[Corrected] | None:
        """Each micro-batch's ``(token weights or None, loss mask)`` after rollout correction, made once for
        the step where its old log-probs are known before the update: every pass of mu uses the same.
        None where the update's own log-probs are the old ones (mu = 1): each micro-batch makes its own."""
        if old_logp is None:
            return None
        return [self._corrected(old_logp[sl], b, sl, seen) for sl in slices]

    def _loss_scales(
        self, b: Batch, slices: list[slice], gas: int, corrected: list[Corrected] | None, tokens: list[float]
    ) -> list[float]:
        """Each micro-batch's factor of its loss. grpo and dr_grpo are row means (dr_grpo's N x T too: every
        engine pads completions to the cap): its share of the step's rows. bnpo is a token mean: its share
        of the step's loss tokens, those a masking correction keeps where it decided them up front."""
        if self.cfg.aggregation != "bnpo":
            return self.ranks.row_scales(slices, gas)
        if corrected is None or not self._masking_split(b, slices):
            return tokens
        kept = b.mask.clone()
        for sl, (_, mask) in zip(slices, corrected):
            kept[sl] = mask
        return self.ranks.token_scales(kept, slices, gas)

    def _micro_batch_loop(
        self,
        step: int,
        b: Batch,
        old_logp: torch.Tensor | None,
        policy_loss: Callable[[MicroBatch], tuple[torch.Tensor, dict[str, float]]],
        *,
        tallies: tuple[str, ...] = (),
        critic: Any = None,
        critic_step: Callable[[MicroBatch], dict[str, float]] | None = None,
    ) -> dict[str, float]:
        """The update loop GRPO and PPO share: ``num_iterations`` passes over ``b`` in micro-batches.
        Each computes ``policy_loss`` (the loss, and the metrics it adds up: ``clip_ratio`` and the
        ``tallies``), steps the policy, then runs ``critic_step`` (PPO's critic, on its own engine
        ``critic``). Returns the step's metrics: each tally's mean over the step's tokens."""
        eng = self.engine
        engines = (eng,) if critic is None else (eng, critic)
        slices, gas = self._plan(b), eng.gradient_accumulation_steps()
        tokens = self.ranks.token_scales(b.mask, slices, gas)  # the tallies and PPO's value loss: token means
        seen: dict[str, list[float]] = {}
        if self.cfg.aggregation == "bnpo" and old_logp is None and self._masking_split(b, slices):
            old_logp = self._frozen_logprobs(self.engine.module, b)
        corrected = self._step_corrections(b, slices, old_logp, seen)
        scales = self._loss_scales(b, slices, gas, corrected, tokens)
        sums = {M.LOSS: 0.0, **dict.fromkeys(tallies, 0.0), M.CLIP_RATIO: 0.0, M.ENTROPY: 0.0}
        for engine in engines:
            engine.train()
        for _ in range(self.cfg.num_iterations):
            for i, sl in enumerate(micro_batches.accumulation(slices, *engines)):
                fixed = corrected[i] if corrected is not None else None
                mb = self._micro_batch(b, sl, old_logp, fixed, seen, scales[i], tokens[i])
                loss, tally = policy_loss(mb)
                self._policy_step(step, loss, mb.scale)
                if critic_step is not None:
                    tally = tally | critic_step(mb)
                # Shares of the step's loss and tokens on every process (_all_mean averages the ranks).
                share = mb.token_scale / gas  # each tally is a mean over the micro-batch's tokens
                sums[M.LOSS] += loss.item() * mb.scale / gas
                for key, value in tally.items():
                    sums[key] += value * share
                sums[M.ENTROPY] += masked_mean(mb.entropy, b.mask[sl]) * share
        return {k: v / self.cfg.num_iterations for k, v in sums.items()} | self._mismatch(seen)

    def _policy_step(self, step: int, loss: torch.Tensor, scale: float = 1.0) -> None:
        """Backward (of ``loss * scale``) and optimizer step of the policy; a non-finite loss stops
        the run first."""
        if not torch.isfinite(loss):
            self.health.observe(step, {M.LOSS: float(loss)})  # raises TrainingDiverged
        self.engine.backward(loss * scale)  # times 1.0 is exact: equal micro-batches are unchanged
        optimizer_step(self.engine)

    @staticmethod
    def _mismatch(seen: dict[str, list[float]]) -> dict[str, float]:
        """The micro-batches' mismatch metrics as the step's: the largest ratio, the mean of the rest."""
        return {k: max(v) if k == M.ROLLOUT_RATIO_MAX else sum(v) / len(v) for k, v in seen.items()}

    def update(self, step: int, batch: Batch) -> dict[str, float]:
        """The algorithm's optimizer step(s) on ``batch``; returns its own metrics."""
        raise NotImplementedError

    def updates_policy(self, step: int) -> bool:
        """Whether ``step`` updates the policy (PPO's critic warm-up steps do not): adaptive KL control
        moves on those only."""
        return True

    # -- budget under out-of-memory back-off ------------------------------------------------
    def generations(self, step: int) -> int:
        """G at ``step``: the schedule's, capped by any out-of-memory back-off."""
        return min(self.cfg.generations_at(step), self.state.backoff.get("num_generations", 10**9))

    @property
    def max_completion_length(self) -> int:
        """The completion cap, after any out-of-memory back-off."""
        return min(self.cfg.sampling.max_completion_length, self.state.backoff.get("max_completion_length", 10**9))

    @property
    def micro_batch_size(self) -> int:
        """The micro-batch, after any out-of-memory back-off."""
        return min(self.cfg.engine.micro_batch_size, self.state.backoff.get("micro_batch_size", 10**9))

    @property
    def token_budget(self) -> int | None:
        """``rl.engine.max_tokens_per_micro_batch``, shrunk with the micro-batch by any back-off."""
        budget = self.cfg.engine.max_tokens_per_micro_batch
        if budget is None:
            return None
        return max(1, budget * self.micro_batch_size // self.cfg.engine.micro_batch_size)

    def _set_batch(self, sequences: int) -> None:
        """Size the engine's step for ``sequences`` per process: the configured (or backed-off)
        micro-batch, shrunk to divide the batch when G changed it."""
        self.engine.set_train_micro_batch_size(gcd(self.micro_batch_size, sequences))
        self.engine.set_train_batch_size(sequences * self.world)

    def _back_off(self, step: int, exc: BaseException) -> None:
        """Shrink the next setting after an OOM at ``step``, record it as a health event, drop
        any half-accumulated gradients; raise when nothing is left to shrink."""
        g, max_len, micro = self.generations(step), self.max_completion_length, self.micro_batch_size
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
        self.engine.zero_grad()
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

    def _rollouts_on_every_rank(self, step: int, g: int, draw: int = 0) -> tuple[Rollouts, list[dict]]:
        """Rollouts, with an out-of-memory error on any process raised on all of them: before
        the update's first collective, so that every process backs off together."""
        try:
            out, error = self._rollouts(step, g, draw), None
        except torch.OutOfMemoryError as exc:
            out, error = None, exc
        if self._anyone(error is not None) and error is None:
            error = torch.OutOfMemoryError(f"out of memory during rollouts on another process at step {step + 1}")
        if error is not None or out is None:
            raise error or RuntimeError(f"no rollouts at step {step + 1}")
        return out

    def step(self, step: int) -> dict[str, float]:
        """One optimizer step: rollouts, rewards, the algorithm's update, weight sync; its metrics."""
        g = self.generations(step)
        t0 = time.perf_counter()
        self.timer = PhaseTimer()
        scored, sampling_metrics = self._step_batch(step, g)
        t_rollout = time.perf_counter() - t0
        self._penalise_overlong(scored)
        local, t_update, tokens = self._update_on(step, scored, g)
        with self.timer.phase(M.PHASE_WEIGHT_SYNC):
            self.rollout.sync_weights(self.engine.module)
        local.update(self._batch_metrics(scored, g, tokens / max(t_update, 1e-9), sampling_metrics, self.ranks))
        metrics = _all_mean(local, self.world, self.engine.device)
        metrics.update(self._loop_metrics(g, time.perf_counter() - t0, t_rollout, t_update))
        if (
            self.cfg.adaptive_kl.enabled and self.ref is not None and self.updates_policy(step)
        ):  # grpoflow.config.rules: enabled only with a coefficient; a frozen policy's KL says nothing
            a = self.cfg.adaptive_kl
            self.state.beta = adapt_beta(self.state.beta, metrics[M.KL], a.target_kl, a.horizon)
        return metrics

    def _step_batch(self, step: int, g: int) -> tuple[Scored, dict[str, float]]:
        """The step's scored rollouts (the informative groups, under dynamic sampling) and dynamic
        sampling's metrics."""
        scored, sampling_metrics = self._scored(step, g), dict[str, float]()
        if self.cfg.dynamic_sampling.enabled:
            scored, sampling_metrics = self._informative(step, g, scored)
        return scored, sampling_metrics

    def _penalise_overlong(self, scored: Scored) -> None:
        """DAPO's overlong penalty (``rl.overlong_buffer``), added to the rewards as a component of its own."""
        cfg = self.cfg
        if cfg.overlong_buffer and self.max_completion_length > 1:
            buffer = min(cfg.overlong_buffer, self.max_completion_length - 1)  # a back-off may shorten the cap
            with self.timer.phase(M.PHASE_REWARD):
                scored.parts["overlong"] = overlong_penalty(
                    scored.rollouts.completion_mask.sum(1), self.max_completion_length, buffer, cfg.overlong_penalty
                )
                scored.total = scored.total + scored.parts["overlong"]

    def _update_on(self, step: int, scored: Scored, g: int) -> tuple[dict[str, float], float, float]:
        """The algorithm's update on the step's batch: ``(its metrics, its seconds, the tokens each
        of its passes computes)``."""
        ro = scored.rollouts
        ids, attn, mask, start = self._inputs(ro)
        t1 = time.perf_counter()
        self._set_batch(len(ids))  # G may change with the schedule or a back-off
        # The update's own log-prob passes (reference, old policy) are timed apart, inside it.
        with self.timer.phase(M.PHASE_UPDATE):
            local = self.update(step, Batch(ids, attn, mask, start, scored.total, g, ro.sampler_logprobs))
        if self.cfg.num_iterations == 1:  # one optimizer step per batch: the ratio is 1, nothing can be clipped
            local.pop(M.CLIP_RATIO, None)
        return local, time.perf_counter() - t1, float(attn.sum()) * self.cfg.num_iterations

    @staticmethod
    def _batch_metrics(
        scored: Scored, g: int, update_tokens_per_s: float, sampling: dict, ranks: Ranks
    ) -> dict[str, float]:
        """The step's rewards and lengths (every process's), this process's throughput."""
        ro, total = scored.rollouts, ranks.gathered(scored.total)  # a std or max of per-rank ones is neither
        grouped = total.view(-1, g)
        lengths = ranks.gathered(ro.completion_mask.sum(1).float())
        return {
            M.REWARD_MEAN: float(total.mean()),
            M.REWARD_STD: float(total.std(correction=0)),
            M.GROUP_REWARD_STD: float(grouped.std(dim=1, correction=0).mean()),
            M.FRAC_ZERO_STD_GROUPS: float((grouped.std(dim=1, correction=0) < 1e-6).float().mean()),
            M.COMPLETION_LENGTH_MEAN: float(lengths.mean()),
            M.COMPLETION_LENGTH_MAX: float(lengths.max()),
            M.FRAC_TRUNCATED: float(ranks.gathered(ro.truncated.float()).mean()),
            M.ROLLOUT_TOKENS_PER_S: ro.num_completion_tokens / max(ro.seconds, 1e-9),
            M.UPDATE_TOKENS_PER_S: update_tokens_per_s,
            **sampling,
            **{f"{M.REWARD_PREFIX}{k}": float(v.mean()) for k, v in scored.parts.items()},
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
            M.MAX_COMPLETION_LENGTH: self.max_completion_length,
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
        """Continue from a checkpoint's loop state (step, KL coefficient, RNG, back-off)."""
        self.state = state
        rng.restore(state.rng)
