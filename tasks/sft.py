"""Stage ``sft``: train the reference policy on the train split's worked solutions.

    python -m tasks.sft --params params/default.yaml --data data/prepared --out models/sft --metrics metrics/sft.json

For the default it trains a tokenizer and a tiny model from scratch; with ``model.name_or_path``
it fine-tunes that model, or (``sft.enabled: false``) takes it as the reference unchanged.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Any

from grpoflow.config import Params
from tasks.cli import check_interrupted, run_stage_cli, stage_parser


def initial_model(params: Params, train: list[dict], base_dir: Path):
    """The starting model (the base_model stage's), or the tiny model with a tokenizer trained here."""
    from grpoflow.models.base_model import base_model_path
    from grpoflow.models.device import describe
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.trainers.sft import tiny_from_scratch

    print(f"sft: {describe()}", flush=True)  # where it computes (grpoflow.models.device)
    base = base_model_path(base_dir)
    return load_pretrained(base) if base else tiny_from_scratch(params, train)


def fine_tune(params: Params, model, tokenizer, prompter, train: list[dict]) -> tuple[Any, list[dict]]:
    """``model`` trained on the train split's worked solutions (``params.sft``), logging every
    10th step, and the history of its steps (step, loss, lr)."""
    from grpoflow import metric_names as M
    from grpoflow.trainers import sft
    from tasks import events, tracking

    history: list[dict] = []
    steps_log = tracking.StepLogger()

    def on_step(step: int, m: dict) -> None:
        check_interrupted()  # a Ctrl-C a finalizer swallowed stops the stage here, as in the RL loop
        total = m.pop("steps")
        history.append({"step": step, **m})
        if step % 10 == 0 or step + 1 == total:
            steps_log.log(step, {M.SFT_LOSS: m["loss"], M.LR: m["lr"]})
            print(f"sft step {step + 1}/{total}: loss {m['loss']:.4f}", flush=True)
            events.emit(events.PROGRESS, "sft", step=step + 1, total=total)

    module = sft.fine_tune(params, model, tokenizer, prompter, train, on_step=on_step)
    steps_log.finish()
    return module, history


def run_name(params: Params) -> str | None:
    """The stage's MLflow run name: the stage's own (None) where SFT trains; else the stage only scores and
    saves the model as shipped, and its run says which (``sft/SmolLM2-135M-Instruct, as shipped``, as
    evaluate names its runs)."""
    from tasks.notes import starting_model

    return None if params.sft.enabled else f"sft/{starting_model(params)}, as shipped"


def main(args: argparse.Namespace, params: Params) -> None:
    # Here, not above: --help answers without loading torch, DeepSpeed or MLflow.
    import mlflow
    import torch

    from grpoflow.evaluation.accuracy import greedy_accuracy
    from grpoflow.io import atomic_write, read_jsonl, write_json, write_jsonl
    from grpoflow.models.modeling import count_parameters, save_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.rl.rewards import correctness_scorer
    from grpoflow.rollout import build_rollout
    from tasks import notes, tracking

    torch.manual_seed(params.experiment.seed)
    data, out = Path(args.data), Path(args.out)
    train, val = read_jsonl(data / "train.jsonl"), read_jsonl(data / "val.jsonl")
    cfg = params.sft
    with tracking.stage_run("sft", params, args.params, run_name(params)):
        start = time.perf_counter()
        model, tokenizer = initial_model(params, train, Path(args.base))
        prompter = prompter_for(model, tokenizer, params.prompt)
        history: list[dict] = []
        if cfg.enabled:
            model, history = fine_tune(params, model, tokenizer, prompter, train)
        save_pretrained(model, tokenizer, out)
        engine = build_rollout(
            params.rl.rollout_engine,
            model,
            tokenizer,
            out,
            seed=params.experiment.seed,
            max_model_len=params.model.max_length,
            stop_ids=prompter.stop_ids,
            decode=params.rl.decode,
        )
        result = greedy_accuracy(
            engine,
            val[: cfg.eval_examples],
            correctness_scorer(params),
            prompter,
            max_new_tokens=params.rl.sampling.max_completion_length,
        )
        write_jsonl(out / "val_outputs.jsonl", result.outputs)
        with atomic_write(out / "history.csv") as fh:
            writer = csv.DictWriter(fh, fieldnames=["step", "loss", "lr"])
            writer.writeheader()
            writer.writerows(history)
        metrics = {
            "val_accuracy": result.accuracy,
            "val_examples": len(result.outputs),
            "final_loss": history[-1]["loss"] if history else None,
            "steps": len(history),
            "parameters": count_parameters(model),
            "seconds": round(time.perf_counter() - start, 1),
        }
        write_json(args.metrics, metrics)
        mlflow.set_tag(tracking.NOTE, notes.sft_note(metrics))
        tracking.log_summary(metrics)
        mlflow.log_artifact(args.metrics)
    print(f"sft: val accuracy {result.accuracy:.1%} on {len(result.outputs)} prompts, {metrics['seconds']} s -> {out}")


if __name__ == "__main__":
    parser = stage_parser("sft", __doc__)
    run_stage_cli(parser, main)
