"""Every cross-field rule of a parameter set, in one place, checked when the set is loaded.

A rule is a small function that returns the ways a set breaks it (empty: it holds), each message
starting with the dotted keys involved. Rules of the shared sections take ``(params)``; rules that
depend on the algorithm take ``(params, algorithm)`` and read that algorithm's own keys (its KL
coefficient, :data:`grpoflow.catalog.Entry.kl_key`), so one algorithm's rule never passes because
of another's default. An algorithm's rules about its own section live beside that section (its
catalog entry's ``rules`` module, ``RULES``); :func:`check` runs them with these. It runs every
rule for every algorithm the set trains: the algorithm stages it runs (``experiment.stages``; null:
all of :mod:`grpoflow.catalog`), and each ablation arm's algorithm on the arm's merged params
(:func:`grpoflow.config.arm_params`). The schema
(:class:`grpoflow.config.Params`) calls it, so no stage starts on a set that breaks a rule; code
that runs later asks the built run what it has (``trainer.ref is None``) instead of re-deriving
a rule.

This module imports no maths library (no torch): loading a params file stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pydantic_core import InitErrorDetails, PydanticCustomError

from grpoflow import catalog
from grpoflow.config.base import ConfigError
from grpoflow.config.loader import arm_params
from grpoflow.config.params import Params
from grpoflow.config.rl import batch_problems

# The adaptive controller multiplies the coefficient by 1 + e * 10 / horizon with |e| <= 0.2
# (grpoflow.rl.trainer.adapt_beta): below this horizon one step can take it to 0 or below.
MIN_ADAPTIVE_HORIZON = 3


def kl_coef(params: Params, algorithm: str) -> float:
    """The KL coefficient ``algorithm`` starts from: its own key (its catalog entry's ``kl_key``)."""
    return catalog.kl_coef(params, algorithm)


def kl_key(algorithm: str) -> str:
    """How a message names ``algorithm``'s KL coefficient: its key, or that it has none."""
    return catalog.entry(algorithm).kl_key or f"{algorithm}'s KL coefficient (it has no key)"


def needs_reference(params: Params, algorithm: str) -> bool:
    """Whether a run of ``algorithm`` loads the frozen reference: exactly when it penalises KL to it."""
    return kl_coef(params, algorithm) > 0


def trained_algorithms(params: Params) -> list[str]:
    """The algorithms whose stage the set runs (``experiment.stages``; null: every stage of a default run,
    :func:`grpoflow.catalog.default_run`)."""
    stages = params.experiment.stages
    return catalog.default_run() if stages is None else [a for a in catalog.names() if a in stages]


# -- rules of the shared sections -----------------------------------------------------------------


def launched_world_size(params: Params) -> int:
    """The processes a training stage of the set runs on: ``launch.nproc_per_node`` x ``launch.nnodes``
    where ``launch.stages`` names an algorithm the set trains, else 1."""
    launch = params.launch
    return launch.world_size if set(launch.stages) & set(trained_algorithms(params)) else 1


def batch_splits(params: Params) -> list[str]:
    """``rl.prompts_per_step`` must shard over the launched processes (whole groups per process), and
    each process's prompts x every G of the schedule must split into ``rl.engine.micro_batch_size``
    micro-batches (the stage checks its real world size again, :mod:`grpoflow.config.advice`)."""
    world = launched_world_size(params)
    launch = params.launch
    where = (
        f" (launch.nproc_per_node={launch.nproc_per_node} x launch.nnodes={launch.nnodes} = {world} processes "
        f"for {', '.join(launch.stages)})"
        if world > 1
        else ""
    )
    return [problem + where for problem in batch_problems(params.rl, world)]


def sampling_is_not_greedy(params: Params) -> list[str]:
    """``rl.sampling.temperature`` 0 samples G identical completions: no group has a signal."""
    if params.rl.sampling.temperature == 0:
        return ["rl.sampling.temperature 0 makes every completion of a group identical: all advantages are 0"]
    return []


def overlong_buffer_inside_the_cap(params: Params) -> list[str]:
    """``rl.overlong_buffer`` must be shorter than ``rl.sampling.max_completion_length``: the
    penalty ramps up across the buffer and reaches its full value at the cap."""
    rl = params.rl
    if rl.overlong_buffer >= rl.sampling.max_completion_length:
        return [
            f"rl.overlong_buffer={rl.overlong_buffer} must be shorter than "
            f"rl.sampling.max_completion_length={rl.sampling.max_completion_length}"
        ]
    return []


def unique_reward_names(params: Params) -> list[str]:
    """Each ``rewards`` component needs a name of its own: scores, normalisers and metrics are
    kept by name, so a second ``math`` would overwrite the first one's scores while the first
    one's options still judge."""
    first: dict[str, int] = {}
    problems = []
    for i, reward in enumerate(params.rewards):
        if reward.name in first:
            problems.append(
                f"rewards.{i}.name: {reward.name!r} is already rewards.{first[reward.name]}.name; each component's "
                "scores are kept under its name: merge the two into one (one weight, one set of options)"
            )
        first.setdefault(reward.name, i)
    return problems


def lora_reference_is_not_refreshed(params: Params) -> list[str]:
    """``rl.ref_sync_every`` moves the reference's own weights; a LoRA run's reference is the
    policy's base model with its adapters off, which a refresh cannot move."""
    if params.rl.ref_sync_every and params.model.lora is not None:
        return [
            "rl.ref_sync_every needs a reference of its own weights: with model.lora the reference is "
            "the policy's base model with its adapters off, which a refresh cannot move"
        ]
    return []


def adaptive_kl_horizon_keeps_the_coefficient_positive(params: Params) -> list[str]:
    """With ``rl.adaptive_kl.enabled``, a ``horizon`` below :data:`MIN_ADAPTIVE_HORIZON` lets one
    step drive the KL coefficient to 0 or below (a negative one rewards drifting away)."""
    a = params.rl.adaptive_kl
    if a.enabled and a.horizon < MIN_ADAPTIVE_HORIZON:
        return [
            f"rl.adaptive_kl.horizon={a.horizon} lets one step move the KL coefficient by up to "
            f"{200 // a.horizon}% (to 0 or below): use a horizon of at least {MIN_ADAPTIVE_HORIZON}"
        ]
    return []


SET_RULES: tuple[Callable[[Params], list[str]], ...] = (
    batch_splits,
    sampling_is_not_greedy,
    overlong_buffer_inside_the_cap,
    unique_reward_names,
    lora_reference_is_not_refreshed,
    adaptive_kl_horizon_keeps_the_coefficient_positive,
)


# -- rules of one algorithm -----------------------------------------------------------------------


def adaptive_kl_has_a_coefficient(params: Params, algorithm: str) -> list[str]:
    """``rl.adaptive_kl`` adapts the algorithm's own KL coefficient: at 0 no reference is loaded
    and there is nothing to adapt (another algorithm's coefficient does not count)."""
    if params.rl.adaptive_kl.enabled and not needs_reference(params, algorithm):
        return [
            f"rl.adaptive_kl needs a starting KL coefficient > 0, but {kl_key(algorithm)} is 0: {algorithm} "
            "trains without a KL term (set it > 0, or rl.adaptive_kl.enabled: false)"
        ]
    return []


def reference_refresh_has_a_reference(params: Params, algorithm: str) -> list[str]:
    """``rl.ref_sync_every`` refreshes the reference; with the algorithm's KL coefficient at 0
    none is loaded, so the refresh would do nothing."""
    if params.rl.ref_sync_every and not needs_reference(params, algorithm):
        return [
            f"rl.ref_sync_every={params.rl.ref_sync_every} refreshes the reference, but {kl_key(algorithm)} is 0: "
            f"{algorithm} loads no reference (set rl.ref_sync_every: 0, or {kl_key(algorithm)} > 0)"
        ]
    return []


ALGORITHM_RULES: tuple[Callable[[Params, str], list[str]], ...] = (
    adaptive_kl_has_a_coefficient,
    reference_refresh_has_a_reference,
)


# -- the check ------------------------------------------------------------------------------------

# Set while an arm's merged params are validated inside check(): that validation checks the schema
# only, and check() then applies the rules of the arm's own algorithm (no endless recursion).
_INSIDE_ARM: ContextVar[bool] = ContextVar("grpoflow_rules_inside_arm", default=False)


@contextmanager
def _arm_scope() -> Iterator[None]:
    token = _INSIDE_ARM.set(True)
    try:
        yield
    finally:
        _INSIDE_ARM.reset(token)


def own_rules(algorithm: str) -> tuple[Callable[[Params], list[str]], ...]:
    """The rules ``algorithm`` keeps beside its own section (its folder's settings, ``RULES``)."""
    return getattr(catalog.settings(algorithm), "RULES", ())


def algorithm_violations(params: Params, algorithm: str) -> list[str]:
    """Every rule of ``algorithm``'s that the set breaks: the shared ones, then its own."""
    shared = [p for rule in ALGORITHM_RULES for p in rule(params, algorithm)]
    return shared + [p for rule in own_rules(algorithm) for p in rule(params)]


def violations(params: Params, algorithms: list[str]) -> list[str]:
    """Every rule the set breaks: the shared ones, then each of ``algorithms``'s."""
    problems = [p for rule in SET_RULES for p in rule(params)]
    return problems + [p for algorithm in algorithms for p in algorithm_violations(params, algorithm)]


def arm_violations(params: Params, known: list[str]) -> list[str]:
    """Every rule each ablation arm breaks on its merged params, for its own algorithm (less
    ``known``: what the set itself already breaks)."""
    problems = []
    for name in params.ablation.arms:
        arm = params.ablation.arm(name)
        where = f"ablation arm {name!r} ({arm.algorithm}, overrides {arm.overrides})"
        try:
            with _arm_scope():
                merged = arm_params(params, name)
        except ConfigError as exc:  # an override the schema refuses
            problems.append(f"{where}: " + " ".join(line.strip() for line in str(exc).splitlines()))
            continue
        problems += [f"{where}: {p}" for p in violations(merged, [arm.algorithm]) if p not in known]
    return problems


class RulesBroken(ConfigError):
    """The rules a set breaks: ``problems``, one message each (the schema reports each as one line
    of its error, :func:`grpoflow.config.validate_params`)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems

    def line_errors(self) -> list[InitErrorDetails]:
        """The problems as pydantic error lines (at the top level; ``input`` a mapping, so that no
        value is echoed beside a message that already says it)."""
        return [{"type": PydanticCustomError("rule", "{p}", {"p": p}), "loc": (), "input": {}} for p in self.problems]


def check(params: Params) -> None:
    """Raise :class:`RulesBroken` (a :class:`~grpoflow.config.ConfigError`) listing every rule the
    set breaks, for every algorithm it trains and every ablation arm; return quietly when it breaks none."""
    if _INSIDE_ARM.get():
        return
    problems = violations(params, trained_algorithms(params))
    problems += arm_violations(params, problems)
    if problems:
        raise RulesBroken(problems)
