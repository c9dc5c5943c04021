"""The learner: the policy's side of an update, which an algorithm's update is written against
(:mod:`grpoflow.rl.algorithm`). Its public contract is small:

- the frozen log-probs of a batch: the reference's (:meth:`Learner.reference_logprobs`) and the
  policy's before the update (:meth:`Learner.old_logprobs`);
- the update's micro-batches (:meth:`Learner.micro_batches`): ``rl.num_iterations`` passes over the
  batch, each micro-batch with the policy's log-probs (with gradient), its loss mask and token weights
  after rollout correction, and its named :class:`Scales`;
- the reduction of a micro-batch's per-token loss the scales assume (:meth:`Learner.aggregate`);
- one optimizer step on a micro-batch's loss (:meth:`Learner.step`), which also tallies its metrics
  and, at the accumulation boundary, stops on a non-finite loss or gradient norm before weights move;
- the batch's micro-batch plan (:meth:`Learner.plan`) and shared-prefix layout (:meth:`Learner.rows`),
  for an update's passes of its own (a critic's): read from the device once per batch;
- the ranks (:class:`~grpoflow.rl.ranks.Ranks`): the step's statistics over every process.

What the update owns: its loss, reduced with :meth:`Learner.aggregate` (or
:func:`grpoflow.rl.losses.clipped_surrogate_loss`, which does), the rollout correction's token
weights (``MicroBatch.weights``, None without one) and the entropy bonus (``rl.entropy_coef``, the
clipped loss's ``entropy_coef``) in it, and, with ``rl.num_iterations`` > 1, the old log-probs
(:meth:`Learner.old_logprobs`) that each pass's ratio or correction is taken against. The batch's
rows are whole groups of ``Batch.group_size`` consecutive completions, each process holding whole
groups; a statistic over the batch goes through ``ranks`` (``batch_wide``, ``summed``).

Everything that makes one step's update the same on 1 process and on W, with any micro-batching, is
here (the loss scales, the accumulation boundary), so an update never computes a scale itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from math import gcd
from typing import Any, TypeAlias

import torch

from grpoflow import metric_names as M
from grpoflow.config import RLConfig
from grpoflow.models.engine import optimizer_step, unkept_grad_norm
from grpoflow.rl import micro_batches
from grpoflow.rl import shared_prefix as sp
from grpoflow.rl.batch import Batch, masked_mean
from grpoflow.rl.health import HealthMonitor, diverged
from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.rl.loop_state import LoopState
from grpoflow.rl.losses import AGGREGATIONS, rollout_correction
from grpoflow.rl.ranks import Ranks
from grpoflow.rl.step_timing import PhaseTimer

# A micro-batch's rollout correction: (token weights or None, the loss mask it leaves).
Corrected = tuple[torch.Tensor | None, torch.Tensor]


@dataclass(frozen=True)
class Scales:
    """What a micro-batch's numbers are weighed by, so that the step's micro-batches on every process
    add up to the step's objective under DeepSpeed's accumulation and averaging
    (:func:`grpoflow.rl.micro_batches.loss_scales`)."""

    loss: float = 1.0  # its policy loss's factor before backward: its share of the step's rows (or tokens)
    tokens: float = 1.0  # the same for a mean over its loss tokens (the tallies, PPO's value loss)
    accumulation: int = 1  # the engine's accumulation steps, which DeepSpeed divides every loss by

    @property
    def share(self) -> float:
        """Its share of the step's loss tokens, as a metric's mean over the step weighs it."""
        return self.tokens / self.accumulation


# A metric's value: a float, or a 0-dim tensor on the device, read with the update's others.
Value: TypeAlias = float | torch.Tensor


def host_values(values: list[Value]) -> list[float]:
    """``values`` as floats, the tensors among them read at once per device: one wait for the
    stream instead of one per value (on a GPU each read stalls the host)."""
    read: dict[int, float] = {}
    for device in {v.device for v in values if isinstance(v, torch.Tensor)}:
        at = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.device == device]
        stacked = torch.stack([values[i].detach().reshape(()).double() for i in at])  # type: ignore[union-attr]
        read.update(zip(at, stacked.tolist()))
    return [read[i] if isinstance(v, torch.Tensor) else float(v) for i, v in enumerate(values)]


def _scalar(key: str, value: Value) -> Value:
    """``value`` as a tally keeps it: a float, or a one-element tensor without its graph."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"metric {key!r}: one value per micro-batch, got a tensor of shape {tuple(value.shape)}")
        return value.detach()
    return float(value)


@dataclass
class Tally:
    """An update's metrics, micro-batch by micro-batch: each term ``value * times / over`` of a mean
    over the step's tokens per pass, and the rollout-correction mismatch of every micro-batch. The
    values stay on the device until :meth:`means` reads them all at once; the arithmetic is then the
    host's, in the order the terms came."""

    passes: int
    terms: dict[str, list[tuple[Value, float, float]]] = field(default_factory=dict)
    seen: dict[str, list[Value]] = field(default_factory=dict)

    def add(self, key: str, value: Value, times: float = 1.0, over: float = 1.0) -> None:
        """Add the term ``value * times / over`` to ``key``'s sum (a tensor's graph is not kept)."""
        self.terms.setdefault(key, []).append((_scalar(key, value), times, over))

    def means(self) -> dict[str, float]:
        """Each sum as a mean over the passes; the mismatch as the step's (the largest ratio, the
        mean of the rest)."""
        read = iter(host_values([v for t in self.terms.values() for v, _, _ in t] + sum(self.seen.values(), [])))
        sums = {}
        for key, terms in self.terms.items():
            total = 0.0
            for _, times, over in terms:
                total += next(read) * times / over
            sums[key] = total
        seen = {k: [next(read) for _ in v] for k, v in self.seen.items()}
        mismatch = {k: max(v) if k == M.ROLLOUT_RATIO_MAX else sum(v) / len(v) for k, v in seen.items()}
        return {k: v / self.passes for k, v in sums.items()} | mismatch


@dataclass
class MicroBatch:
    """One micro-batch of the update, as an algorithm's loss sees it."""

    sl: slice  # its rows of the batch
    logp: torch.Tensor  # (n, C) policy log-probs, with gradient
    entropy: torch.Tensor  # (n, C)
    old: torch.Tensor  # (n, C) log-probs of the policy that sampled them
    mask: torch.Tensor  # (n, C) the loss mask after rollout correction
    weights: torch.Tensor | None  # (n, C) token weights of rollout correction, if any
    scales: Scales
    tally: Tally  # the update's metrics, which Learner.step adds to


class MicroBatches:
    """The update's micro-batches (:meth:`Learner.micro_batches`): iterate to get them, pass by pass;
    :meth:`metrics` afterwards gives the update's tallied metrics."""

    def __init__(self, learner: Learner, b: Batch, old_logp: torch.Tensor | None, engines: tuple):
        if old_logp is None and learner.cfg.num_iterations > 1:
            raise ValueError(
                "rl.num_iterations > 1: each pass's ratio and rollout correction are taken against the policy "
                "before the update; pass learner.old_logprobs(batch) to learner.micro_batches"
            )
        self.learner, self.b, self.engines, self.started = learner, b, engines, False
        self.slices, self.gas = learner.plan(b), learner.engine.gradient_accumulation_steps()
        self.tokens = learner.ranks.token_scales(b.mask, self.slices, self.gas)
        self.tally = Tally(learner.cfg.num_iterations)
        self.token_mean = AGGREGATIONS[learner.cfg.aggregation].token_mean
        if self.token_mean and old_logp is None and self._masking_split():
            old_logp = learner.old_logprobs(b)
        self.old_logp = old_logp
        self.corrected = self._step_corrections()
        self.scales = self._loss_scales()
        for engine in engines:
            engine.train()

    def __iter__(self) -> Iterator[MicroBatch]:
        if self.started:  # a second pass would tally every metric twice: rl.num_iterations sets the passes
            raise RuntimeError("an update's micro-batches are iterated once (rl.num_iterations passes are in it)")
        self.started, b = True, self.b
        for _ in range(self.learner.cfg.num_iterations):
            for i, sl in enumerate(micro_batches.accumulation(self.slices, *self.engines)):
                mb = self._micro_batch(i, sl)
                # Tallied before the update sees it: an update that stops early keeps the entropy of
                # every micro-batch it was handed.
                self.tally.add(M.ENTROPY, masked_mean(mb.entropy, b.mask[sl]), mb.scales.share)
                yield mb

    def metrics(self) -> dict[str, float]:
        """The update's metrics: the loss, the entropy and the update's own tallies, each a mean over
        the step's tokens per pass; the rollout mismatch."""
        return self.tally.means()

    def _micro_batch(self, i: int, sl: slice) -> MicroBatch:
        """Micro-batch ``sl``: the policy's log-probs and entropies, the old log-probs (the current ones,
        detached, when the update takes none: with mu = 1 they are equal), the token weights and loss
        mask after rollout correction (made once for the step, else here from those old log-probs)."""
        learner, b = self.learner, self.b
        logp, ent = learner.policy_logprobs(b, sl)
        old = self.old_logp[sl] if self.old_logp is not None else logp.detach()
        weights, mask = self.corrected[i] if self.corrected is not None else self._corrected(old, sl)
        scales = Scales(loss=self.scales[i], tokens=self.tokens[i], accumulation=self.gas)
        return MicroBatch(sl, logp, ent, old, mask, weights, scales, self.tally)

    def _corrected(self, old: torch.Tensor, sl: slice) -> Corrected:
        """``(token weights or None, loss mask)`` of micro-batch ``sl`` under ``rl.rollout_correction``,
        its mismatch tallied (:func:`grpoflow.rl.losses.rollout_correction`)."""
        b = self.b
        if b.sampler_logp is None:
            return None, b.mask[sl]
        c = self.learner.cfg.rollout_correction
        weights, mask, metrics = rollout_correction(old, b.sampler_logp[sl].to(old.dtype), b.mask[sl], c.mode, c.cap)
        for key, value in metrics.items():
            self.tally.seen.setdefault(key, []).append(value)
        return weights, mask

    def _masking_split(self) -> bool:
        """Whether a masking correction decides per token from the old log-probs while the step's tokens
        are split (micro-batches, processes): a token mean's weights must then count the kept tokens of
        the whole step before its first micro-batch steps, so the old log-probs are taken first."""
        masking = self.b.sampler_logp is not None and self.learner.cfg.rollout_correction.mode.endswith("_mask")
        return masking and (len(self.slices) > 1 or self.learner.ranks.world > 1)

    def _step_corrections(self) -> list[Corrected] | None:
        """Each micro-batch's correction, made once for the step where its old log-probs are known
        before the update: every pass of mu uses the same. None where the update's own log-probs are
        the old ones (mu = 1): each micro-batch makes its own."""
        if self.old_logp is None:
            return None
        return [self._corrected(self.old_logp[sl], sl) for sl in self.slices]

    def _loss_scales(self) -> list[float]:
        """Each micro-batch's factor of its loss: under a row-mean aggregation its share of the step's
        rows; under a token mean its share of the step's loss tokens, those a masking correction keeps
        where it decided them up front."""
        if not self.token_mean:
            return self.learner.ranks.row_scales(self.slices, self.gas)
        if self.corrected is None or not self._masking_split():
            return self.tokens
        kept = self.b.mask.clone()
        for sl, (_, mask) in zip(self.slices, self.corrected):
            kept[sl] = mask
        return self.learner.ranks.token_scales(kept, self.slices, self.gas)


class Learner:
    """The policy's engine and what an update does with it. ``cfg`` is the ``rl`` section; ``ref`` the
    frozen reference (None: the run has none); ``state`` the loop's (the KL coefficient, the back-off
    caps), shared with the loop; ``timer`` the step's phases, shared with the loop."""

    def __init__(
        self,
        cfg: RLConfig,
        engine: Any,
        ref: torch.nn.Module | None,
        ranks: Ranks,
        *,
        state: LoopState,
        health: HealthMonitor,
        timer: PhaseTimer,
    ):
        self.cfg, self.engine, self.ref, self.ranks = cfg, engine, ref, ranks
        self.state, self.health, self.timer = state, health, timer
        self.global_step = 0  # the step under way (0-based), set by the loop before each update
        # The losses since the last optimizer step, checked at the next: kept across updates (one that stopped
        # early left its gradients behind), dropped with those gradients (zero_grad).
        self._unchecked: list[torch.Tensor] = []
        # plan's last answer; the batch held weakly, so that a finished step's tensors are not kept for it
        self._planned: tuple[weakref.ref[Batch], tuple[int, int | None], list[slice]] | None = None
        self._rows: tuple[weakref.ref[Batch], sp.Rows | None] | None = None  # rows' last answer

    @property
    def kl_coef(self) -> float:
        """The KL coefficient now: the algorithm's, as adaptive KL control has moved it."""
        return self.state.beta

    @property
    def micro_batch_size(self) -> int:
        """The micro-batch, after any out-of-memory back-off."""
        return self.state.capped("micro_batch_size", self.cfg.engine.micro_batch_size)

    @property
    def token_budget(self) -> int | None:
        """``rl.engine.max_tokens_per_micro_batch``, shrunk with the micro-batch by any back-off."""
        budget = self.cfg.engine.max_tokens_per_micro_batch
        if budget is None:
            return None
        return max(1, budget * self.micro_batch_size // self.cfg.engine.micro_batch_size)

    def plan(self, b: Batch) -> list[slice]:
        """The batch's micro-batches (:func:`grpoflow.rl.micro_batches.plan`), planned once per batch and
        sizes: the reference's, the old policy's, the update's and a critic's passes all ask."""
        sizes = (self.engine.train_micro_batch_size_per_gpu(), self.token_budget)
        if self._planned is not None and self._planned[0]() is b and self._planned[1] == sizes:
            return list(self._planned[2])
        slices = micro_batches.plan(b.ids, b.attn, b.start, sizes[0], sizes[1], self._packs(), self.rows(b))
        self._planned = (weakref.ref(b), sizes, slices)
        return list(slices)

    def _packs(self) -> bool:
        """Whether the policy's passes pack shared prompts (:mod:`grpoflow.rl.shared_prefix`)."""
        return self.cfg.engine.shared_prefix and sp.unsupported(self.engine.module) is None

    def rows(self, b: Batch, sl: slice = slice(None)) -> sp.Rows | None:
        """Rows ``sl`` of the batch's shared-prefix layout, read from the device once per batch for every
        pass and micro-batch (an update's own passes, a critic's, hand them to
        :func:`~grpoflow.rl.shared_prefix.packed_for`); None where no pass packs and no token budget plans."""
        if self._rows is None or self._rows[0]() is not b:
            wanted = self._packs() or self.token_budget is not None
            self._rows = (weakref.ref(b), sp.read_rows(b.ids, b.attn, b.start) if wanted else None)
        rows = self._rows[1]
        return None if rows is None else rows[sl]

    def reference_logprobs(self, b: Batch) -> torch.Tensor | None:
        """The frozen reference's per-token log-probs of the batch; None where the run has no reference."""
        return None if self.ref is None else self._frozen(self.ref, b, M.PHASE_REF_LOGPROBS)[0]

    def old_logprobs(self, b: Batch) -> torch.Tensor:
        """The policy's per-token log-probs of the batch before the update, without gradients."""
        return self._frozen(self.engine.module, b, M.PHASE_OLD_LOGPROBS)[0]

    def old_logprobs_and_entropy(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`old_logprobs` and the per-token entropies (an update that leaves the policy alone)."""
        logp, entropy = self._frozen(self.engine.module, b, M.PHASE_OLD_LOGPROBS, with_entropy=True)
        assert entropy is not None
        return logp, entropy

    def policy_logprobs(self, b: Batch, sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's ``(log-probs, entropies)`` of rows ``sl``, with gradient (the entropies with it
        only under an entropy bonus)."""
        logp, entropy = completion_logprobs(
            self.engine,
            b.ids[sl],
            b.attn[sl],
            b.start,
            with_entropy=True,
            entropy_grad=self.cfg.entropy_coef > 0,
            shared_prefix=self.cfg.engine.shared_prefix,
            rows=self.rows(b, sl),
        )
        assert entropy is not None
        return logp, entropy

    def aggregate(self, per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A micro-batch's per-token loss reduced as ``rl.aggregation`` says: the reduction its loss
        scale assumes (a row mean's micro-batches are weighed by their rows, a token mean's by their
        tokens), so an update with a loss of its own reduces it here."""
        return AGGREGATIONS[self.cfg.aggregation](per_token, mask)

    def micro_batches(self, b: Batch, old_logp: torch.Tensor | None = None, *, engines: tuple = ()) -> MicroBatches:
        """The update's micro-batches: ``rl.num_iterations`` passes over ``b``. ``old_logp``: the
        policy's before the update (None: each micro-batch's own, detached; right only where the
        update takes one pass). ``engines``: more engines (a critic's) that step with the policy,
        micro-batch for micro-batch, so their accumulation boundary is set with the policy's."""
        return MicroBatches(self, b, old_logp, (self.engine, *engines))

    def step(self, mb: MicroBatch, loss: torch.Tensor, metrics: dict[str, Value] | None = None) -> None:
        """Backward of ``loss`` (times its loss scale) and the policy's optimizer step; the loss and
        ``metrics`` (each a mean over the micro-batch's tokens, a float or a 0-dim tensor) tallied."""
        self._unchecked.append(loss.detach())
        self.engine.backward(loss * mb.scales.loss)  # times 1.0 is exact: equal micro-batches are unchanged
        optimizer_step(self.engine, self._checked_grad_norm())
        mb.tally.add(M.LOSS, loss.detach(), mb.scales.loss, mb.scales.accumulation)
        self.record(mb, metrics or {})

    def _checked_grad_norm(self) -> float | None:
        """At the accumulation boundary, before any weight moves: stop the run on a non-finite loss of
        the accumulated micro-batches, on this process or another (their count summed over processes,
        so that every process stops here together, whatever optimizer DeepSpeed runs), or on a
        non-finite gradient norm; all read from the device at once, the one read an optimizer step
        makes. Returns the norm read where DeepSpeed keeps none (else None)."""
        if not self.engine.is_gradient_accumulation_boundary():
            return None
        losses, self._unchecked = torch.stack(self._unchecked), []
        bad = (~losses.isfinite()).long()
        # The first non-finite loss, if any (index_select: indexing with a device tensor would read it).
        shown = losses.index_select(0, bad.argmax().view(1))[0]
        elsewhere = self.ranks.summed(bad.sum()) - bad.sum()
        norm = unkept_grad_norm(self.engine)
        loss, others, *grad_norm = host_values([shown, elsewhere] if norm is None else [shown, elsewhere, norm])
        self.health.check_finite(self.global_step, {M.LOSS: loss})
        if others:
            raise diverged(self.global_step, f"loss is not finite in {others:.0f} micro-batch(es) of another process")
        self.health.check_finite(self.global_step, {M.GRAD_NORM: grad_norm[0] if grad_norm else None})
        return grad_norm[0] if grad_norm else None

    def zero_grad(self) -> None:
        """Drop the policy's half-accumulated gradients and the losses they came from (an update cut
        short by an out-of-memory error, to be retried smaller)."""
        self.engine.zero_grad()
        self._unchecked = []

    @staticmethod
    def record(mb: MicroBatch, metrics: dict[str, Value]) -> None:
        """Tally ``metrics`` of micro-batch ``mb``, each a mean over its tokens (a critic's loss, say)."""
        for key, value in metrics.items():
            mb.tally.add(key, value, mb.scales.share)

    def size_engine(self, sequences: int) -> None:
        """Size the engine's step for ``sequences`` per process: the configured (or backed-off)
        micro-batch, shrunk to divide the batch when G changed it."""
        self.engine.set_train_micro_batch_size(gcd(self.micro_batch_size, sequences))
        self.engine.set_train_batch_size(sequences * self.ranks.world)

    @torch.no_grad()
    def _frozen(
        self, model: torch.nn.Module, b: Batch, phase: str, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of ``model`` without gradients, timed as ``phase``."""
        with self.timer.phase(phase):
            parts = [
                completion_logprobs(
                    model,
                    b.ids[sl],
                    b.attn[sl],
                    b.start,
                    with_entropy=with_entropy,
                    shared_prefix=self.cfg.engine.shared_prefix,
                    rows=self.rows(b, sl),
                )
                for sl in self.plan(b)
            ]
        entropy = torch.cat([p[1] for p in parts if p[1] is not None]) if with_entropy else None
        return torch.cat([p[0] for p in parts]), entropy
