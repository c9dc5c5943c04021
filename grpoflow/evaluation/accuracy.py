"""Sampled pass@1, pass@k and maj@k of a policy on prompts with reference answers, greedy
exact-match accuracy, and the standard error of each."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grpoflow.data.records import BatchScorer, row_task
from grpoflow.models.prompting import Prompter
from grpoflow.rollout import RolloutEngine, Sampling


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean of per-prompt scores, ``s / sqrt(n)`` with the sample std ``s``
    (n - 1). The prompt is the unit: a prompt's samples are correlated, so its mean over its
    samples is one observation (the clustered standard error of Miller 2024, "Adding error bars to
    evals", arXiv 2411.00640, eq. 4). 0.0 with fewer than two prompts (no spread to measure)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


@dataclass
class EvalResult:
    """Greedy accuracy, its standard error over prompts, and the per-example outputs behind it."""

    accuracy: float
    outputs: list[dict]
    stderr: float = 0.0


def greedy_accuracy(
    engine: RolloutEngine,
    rows: Sequence[dict],
    score: BatchScorer,
    prompter: Prompter,
    *,
    max_new_tokens: int,
    seed: int = 0,
) -> EvalResult:
    """Share of ``rows`` (dicts with ``prompt`` and ``reference_answer``) answered right greedily."""
    prompts = [prompter.prompt(r["prompt"]) for r in rows]
    rollouts = engine.generate(prompts, 1, Sampling(temperature=0.0, max_new_tokens=max_new_tokens), seed)
    scores = score(rollouts.texts, rows)
    outputs = [
        {"id": r["id"], "completion": t, "reference": r["reference_answer"], "correct": s >= 0.5}
        for r, t, s in zip(rows, rollouts.texts, scores)
    ]
    correct = [float(o["correct"]) for o in outputs]
    return EvalResult(sum(correct) / max(len(outputs), 1), outputs, standard_error(correct))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, eq. 1):
    ``1 - C(n - c, k) / C(n, k)``, as a stable product."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The most common non-empty answer; ties go to the one seen first."""
    counts: dict[str, int] = {}
    for a in answers:
        if a:
            counts[a] = counts.get(a, 0) + 1
    return max(counts, key=lambda a: (counts[a], -answers.index(a))) if counts else None


@dataclass
class SampledResult:
    """pass@1 (the mean over a prompt's n samples, then over prompts), pass@k and maj@k, the
    standard errors over prompts, and the per-example samples."""

    pass_at_1: float
    pass_at_k: float
    maj_at_k: float | None  # None on a set without answers to vote on (code)
    outputs: list[dict]
    pass_at_1_stderr: float = 0.0
    pass_at_k_stderr: float = 0.0


def sampled_metrics(
    engine: RolloutEngine,
    rows: Sequence[dict],
    score: BatchScorer,
    canonical: Callable[[str], str | None],
    prompter: Prompter,
    *,
    n: int,
    k: int,
    sampling: Sampling,
    seed: int = 0,
) -> SampledResult:
    """pass@1 and pass@k (unbiased, from n samples: pass@1 is the share of a prompt's samples that
    are right, averaged over prompts) and maj@k (vote over the first k samples' answers, on the rows
    with a final answer to vote on: not code, whose programs differ in form, not in answer)."""
    prompts = [prompter.prompt(r["prompt"]) for r in rows]
    ro = engine.generate(prompts, n, sampling, seed)
    scores = score(ro.texts, [r for r in rows for _ in range(n)])
    votes = [row_task(r) != "code" for r in rows]
    voted = [
        majority_answer([canonical(t) for t in ro.texts[i * n : i * n + k]]) if votes[i] else None
        for i in range(len(rows))
    ]
    voters = [i for i in range(len(rows)) if votes[i]]
    vote_scores = dict(
        zip(
            voters,
            score([f"#### {voted[i]}" if voted[i] is not None else "" for i in voters], [rows[i] for i in voters]),
        )
    )
    outputs, per_prompt, firsts = [], [], []
    for i, r in enumerate(rows):
        correct = sum(s >= 0.5 for s in scores[i * n : (i + 1) * n])
        p = pass_at_k(n, correct, k)
        per_prompt.append(p)
        firsts.append(correct / n)
        outputs.append(
            {
                "id": r["id"],
                "reference": r["reference_answer"],
                "samples": ro.texts[i * n : (i + 1) * n],
                "samples_correct": correct,
                f"pass@{k}": p,
                "majority": voted[i],
                "majority_correct": vote_scores[i] >= 0.5 if i in vote_scores else None,
            }
        )
    voting = [o["majority_correct"] for o in outputs if o["majority_correct"] is not None]
    maj = sum(voting) / len(voting) if voting else None
    count = max(len(rows), 1)
    return SampledResult(
        sum(firsts) / count, sum(per_prompt) / count, maj, outputs, standard_error(firsts), standard_error(per_prompt)
    )


def heldout_loss(model, prompter: Prompter, rows: Sequence[dict], batch_size: int = 16) -> float:
    """Mean next-token loss (nats/token) of each row's worked solution given its prompt: the
    forgetting check compares it between a policy and its reference."""
    import torch

    from grpoflow.models.device import model_device, on
    from grpoflow.trainers.sft import build_examples, collate

    examples = build_examples(rows, prompter, max_length=10**9)
    tokenizer = prompter.tokenizer
    total, tokens = 0.0, 0
    model.eval()
    device = model_device(model)
    with torch.no_grad():
        for lo in range(0, len(examples), batch_size):
            batch = on(collate(examples[lo : lo + batch_size], tokenizer.pad_token_id), device)
            n = int((batch["labels"][:, 1:] != -100).sum())
            total += float(model(**batch).loss) * n
            tokens += n
    return total / max(tokens, 1)
