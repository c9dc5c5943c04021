"""Which verifier judges each kind of row, and so which verifiers a set's stages build: from the params and
the verifiers' catalog alone (a built-in verifier's tasks are read from :data:`verifiers.catalog.BUILTIN_TASKS`,
without importing it), so dvc.yaml can name each stage's verifier code as its dependencies."""

from __future__ import annotations

import verifiers
from grpoflow.config.params import Params
from grpoflow.config.rewards import RM_REWARD


def judge_name(params: Params, task: str) -> str:
    """The verifier that says whether an answer to a ``task`` row is right, routed by the row tasks
    each verifier class declares (its ``tasks``): ``evaluate.verifier`` when it judges the task,
    else the first verifier of rewards that does, else the task's own registered verifier
    (:func:`task_verifier`). So code rows go to the code verifier by their tests, whatever
    ``evaluate.verifier`` says of math rows."""
    chosen = [params.evaluate.verifier] if params.evaluate.verifier else []
    chosen += [r.name for r in params.rewards if r.name != RM_REWARD]
    return next((n for n in chosen if task in verifiers.tasks_of(n)), None) or task_verifier(task)


def task_verifier(task: str) -> str:
    """The registered verifier a ``task`` row falls back to: the one named after the task (``math``,
    ``code``), else the only one that judges it."""
    judges = [n for n in verifiers.names() if task in verifiers.tasks_of(n)]
    if task in judges:
        return task
    if len(judges) == 1:
        return judges[0]
    raise ValueError(f"no single verifier judges {task!r} rows: {judges or 'none'} declare it")


def data_tasks(params: Params) -> list[str]:
    """The row tasks of a set's data (sources and benchmarks): code for code rows, math for the rest."""
    d = params.data
    kinds = [(src.kind, src.format) for src in (*d.sources, *d.benchmarks)]
    return sorted({"code" if kind == "synthetic_code" or fmt == "code" else "math" for kind, fmt in kinds})


def built_verifiers(params: Params) -> dict[str, list[str]]:
    """The verifiers a set's stages build by name: ``judges`` (correctness: SFT's and evaluate's accuracy)
    and ``rewards`` (the reward's verifiers with the judges: the RL stages and the verifier gate)."""
    judges = sorted({judge_name(params, task) for task in data_tasks(params)})
    rewards = sorted({*judges, *(r.name for r in params.rewards if r.name != RM_REWARD)})
    return {"judges": judges, "rewards": rewards}
