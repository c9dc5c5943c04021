"""Training health: the troubleshooting table of the GRPO spec as rules over the metric history, and
one rule of the PPO baseline's own: a critic that does not learn (its explained variance).

Each rule names a symptom, the evidence (metric, step, value), the likely cause and the remedy.
A symptom is reported once, at the first step it is seen; at the end of the run
:meth:`HealthMonitor.verdict` replays the whole history, so a symptom that stopped holding is
reported as cleared (and from which step) rather than standing as the run's verdict. Non-finite
loss or gradients are not a symptom but a stop: :class:`TrainingDiverged` carries the diagnosis.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import mean, median, pstdev

from grpoflow import metric_names as M


class TrainingDiverged(RuntimeError):
    """Training cannot go on (non-finite loss or gradients); the message is the diagnosis."""

    pass


@dataclass(frozen=True)
class Symptom:
    """A troubleshooting-table row seen in training: evidence, likely cause, remedy."""

    name: str
    step: int
    evidence: str
    cause: str
    remedy: str

    def to_dict(self) -> dict:
        """The symptom as a JSON-able dict."""
        return asdict(self)


# The spec's rows, then the PPO baseline's own: a critic whose values explain too little of the returns.
RULES = (
    "kl_rising_fast",
    "reward_flat",
    "unstable_loss",
    "degenerate_groups",
    "entropy_collapse",
    "length_cap",
    "critic_not_learning",
)
STANDING, CLEARED = "standing", "cleared"


def _numbers(row: dict) -> dict:
    """A history row's numeric values (a CSV row's strings read back; empty cells left out)."""
    out = {}
    for key, value in row.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def _window(history: list[dict], key: str, n: int) -> list[float]:
    return [h[key] for h in history[-n:] if key in h and h[key] is not None]


def diverged(step: int, what: str) -> TrainingDiverged:
    """The stop at ``step`` for ``what`` went non-finite, with its likely causes and remedy."""
    return TrainingDiverged(
        f"step {step}: {what}. Likely causes: learning rate too high, bf16 overflow, a reward of inf/NaN. "
        "Remedy: lower rl.engine.lr, raise rl.engine.gradient_clipping, check the verifiers; the last "
        "checkpoint is intact."
    )


@dataclass
class HealthMonitor:
    """Watches the metric history for the GRPO spec's symptoms, each reported once."""

    window: int = 10
    kl_limit: float = 0.5
    flat_after: int = M.RECENT_STEPS
    min_explained_variance: float = 0.2  # a critic below it after its warm-up explains too little
    history: list[dict] = field(default_factory=list)
    symptoms: dict[str, Symptom] = field(default_factory=dict)
    pending: list[Symptom] = field(default_factory=list)
    last_held: dict[str, int] = field(default_factory=dict)  # each rule's symptom: the last step it held at

    def record(self, symptom: Symptom) -> None:
        """An event seen outside the metrics (an out-of-memory back-off, a corrupt checkpoint):
        kept with the symptoms, and returned by the next :meth:`observe` as new."""
        self.symptoms[symptom.name] = symptom
        self.pending.append(symptom)

    @staticmethod
    def check_finite(step: int, metrics: dict) -> None:
        """Raise :class:`TrainingDiverged` when the loss or the gradient norm in ``metrics`` is not finite."""
        for key in (M.LOSS, M.GRAD_NORM):
            value = metrics.get(key)
            if value is not None and not math.isfinite(value):
                raise diverged(step, f"{key} is {value}")

    def observe(self, step: int, metrics: dict) -> list[Symptom]:
        """Record one step's metrics; returns the symptoms first seen at this step."""
        self.check_finite(step, metrics)
        self.history.append({"step": step, **metrics})
        held = self._rules(step)
        self.last_held.update((s.name, step) for s in held)
        new = [s for s in held if s.name not in self.symptoms]
        for s in new:
            self.symptoms[s.name] = s
        new, self.pending = self.pending + new, []
        return new

    def _rules(self, step: int) -> list[Symptom]:
        """Every rule's symptom at ``step``, in the order of :data:`RULES`."""
        return [s for s in (getattr(self, f"_{name}")(step) for name in RULES) if s is not None]

    def verdict(self, rows: list[dict]) -> list[dict]:
        """Every symptom seen, with its final status over the whole history ``rows`` (each step's
        metrics, as the history CSV keeps them): a rule's symptom that no longer holds at the last
        step is ``cleared``, ``cleared_by`` the first step after the last one it held at; one
        that still holds, and an event (a back-off, a corrupt checkpoint), is ``standing``."""
        replay = HealthMonitor(self.window, self.kl_limit, self.flat_after, self.min_explained_variance)
        held: dict[str, int] = {}
        steps: list[int] = []
        for row in rows:
            values = _numbers(row)
            steps.append(int(values.get(M.STEP, len(steps))))
            replay.history.append(values)
            held |= {s.name: steps[-1] for s in replay._rules(steps[-1])}
        out = []
        for name, symptom in self.symptoms.items():
            last = held.get(name, symptom.step)
            stands = name not in RULES or not steps or last >= steps[-1]
            after = next((st for st in steps if st > last), None)
            status = {"status": STANDING} if stands else {"status": CLEARED, "cleared_by": after}
            out.append(symptom.to_dict() | status)
        return out

    def _kl_rising_fast(self, step: int) -> Symptom | None:
        kl = _window(self.history, M.KL, self.window)
        if not (len(kl) >= 3 and kl[-1] > self.kl_limit and kl[-1] > 2 * max(kl[0], 1e-3)):
            return None
        return Symptom(
            "kl_rising_fast",
            step,
            f"kl {kl[0]:.3g} -> {kl[-1]:.3g} over {len(kl)} steps",
            "KL coefficient too small, policy drifting from the reference",
            "raise the KL coefficient (grpo.beta or ppo.kl_coef) or enable rl.adaptive_kl, lower rl.engine.lr",
        )

    def _reward_flat(self, step: int) -> Symptom | None:
        rewards = [h[M.REWARD_MEAN] for h in self.history if M.REWARD_MEAN in h]
        n = self.flat_after
        if len(rewards) < 2 * n:
            return None
        first, last = rewards[:n], rewards[-n:]
        # Rising means: the last window beats the first by more than one standard error.
        se = math.sqrt((pstdev(first) ** 2 + pstdev(last) ** 2) / n)
        if not mean(last) - mean(first) <= max(se, 1e-3):
            return None
        return Symptom(
            "reward_flat",
            step,
            f"reward_mean {mean(first):.3f} (first {n} steps) -> {mean(last):.3f} (last {n}), standard error {se:.3f}",
            "noisy verifier or misaligned reward",
            "hand-check verifier labels on samples; fix the verifier",
        )

    def _unstable_loss(self, step: int) -> Symptom | None:
        loss = _window(self.history, M.LOSS, self.window)
        g = self.history[-1].get(M.NUM_GENERATIONS, 0)
        if not (len(loss) >= self.window and pstdev(loss) > 2 * abs(mean(loss)) + 0.05 and g and g < 8):
            return None
        return Symptom(
            "unstable_loss",
            step,
            f"loss std {pstdev(loss):.3g} vs mean {mean(loss):.3g} with G={g}",
            "G too small: unstable group statistics",
            "raise rl.num_generations or rl.sampling.temperature",
        )

    def _degenerate_groups(self, step: int) -> Symptom | None:
        zero = _window(self.history, M.FRAC_ZERO_STD_GROUPS, 5)
        if not (len(zero) >= 5 and mean(zero) >= 0.9):
            return None
        return Symptom(
            "degenerate_groups",
            step,
            f"{mean(zero):.0%} of groups have zero reward std",
            "groups degenerate (greedy-like sampling, or the task too easy/hard)",
            "sample with more randomness (temperature, top_p); adjust task difficulty",
        )

    def _entropy_collapse(self, step: int) -> Symptom | None:
        ent = _window(self.history, M.ENTROPY, len(self.history))
        if not (len(ent) >= 5 and ent[-1] < max(0.05, 0.2 * ent[0])):
            return None
        return Symptom(
            "entropy_collapse",
            step,
            f"entropy {ent[0]:.3g} -> {ent[-1]:.3g}",
            "the policy became nearly deterministic",
            "raise rl.sampling.temperature, lower rl.engine.lr, raise the KL coefficient",
        )

    def _length_cap(self, step: int) -> Symptom | None:
        trunc = _window(self.history, M.FRAC_TRUNCATED, 5)
        if not (len(trunc) >= 5 and mean(trunc) > 0.3):
            return None
        return Symptom(
            "length_cap",
            step,
            f"{mean(trunc):.0%} of completions hit max_completion_length",
            "completions longer than the cap",
            "raise rl.sampling.max_completion_length, or set rl.mask_truncated_completions",
        )

    def _critic_not_learning(self, step: int) -> Symptom | None:
        """PPO's critic after its warm-up (the steps that updated the policy too): the median explained
        variance of the last ``window`` of them below ``min_explained_variance``. The median, so that
        one noisy step neither raises the symptom nor clears it."""
        ev = [
            h[M.EXPLAINED_VARIANCE]
            for h in self.history
            if h.get(M.EXPLAINED_VARIANCE) is not None and not h.get(M.CRITIC_WARMUP)
        ][-self.window :]
        if len(ev) < self.window or median(ev) >= self.min_explained_variance:
            return None
        return Symptom(
            "critic_not_learning",
            step,
            f"explained_variance median {median(ev):.3f} over the last {len(ev)} steps after the critic's warm-up "
            f"(below {self.min_explained_variance})",
            "the critic does not predict the returns, so GAE's advantages are mostly its noise: a value head that "
            "starts untrained, too low a critic learning rate, targets biased by its own values, or a task whose "
            "returns a critic this size cannot foresee",
            "fit the critic first (ppo.critic_warmup_steps), give it Monte Carlo targets (ppo.lam_critic: 1.0), "
            "raise ppo.critic_engine.lr; see what a converged critic reaches on the task "
            "(python -m benchmarks.bench_critic_ceiling --work .)",
        )

    def report(self, verdict: list[dict] | None = None) -> str:
        """The symptoms seen, as a markdown table; with their :meth:`verdict`, each one's status."""
        if not self.symptoms:
            return "No symptoms seen."
        status = {v["name"]: status_text(v) for v in verdict or []}
        lines = ["| symptom | first step | evidence | status | likely cause | remedy |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {s.name} | {s.step} | {s.evidence} | {status.get(s.name, STANDING)} | {s.cause} | {s.remedy} |"
            for s in self.symptoms.values()
        ]
        return "\n".join(lines)


def status_text(entry: dict) -> str:
    """A :meth:`HealthMonitor.verdict` entry's status in words: "standing", or "cleared by step 80"."""
    if entry["status"] != CLEARED:
        return STANDING
    return f"cleared by step {entry['cleared_by']}" if entry.get("cleared_by") is not None else "cleared"
