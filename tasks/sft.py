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

import mlflow
import torch

from grpoflow.config import Params
from grpoflow.engine import build_engine
from grpoflow.evaluation import greedy_accuracy
from grpoflow.io import atomic_write, read_jsonl, write_json, write_jsonl
from grpoflow.modeling import build_tiny_model, count_parameters, load_pretrained, save_pretrained, train_tokenizer
from grpoflow.prompting import format_prompt, sft_completion
from grpoflow.rewards import correctness_scorer
from grpoflow.rollout.hf import HFRolloutEngine
from grpoflow.sft import build_examples, train_sft
from tasks import events, tracking
from tasks.cli import run_stage_cli, stage_parser


def initial_model(params: Params, train: list[dict]):
    if params.model.name_or_path:
        return load_pretrained(params.model.name_or_path)
    texts = [format_prompt(r["prompt"]) + sft_completion(r["solution"]) for r in train]
    tokenizer = train_tokenizer(texts, params.model.vocab_size)
    return build_tiny_model(params.model, tokenizer, seed=params.experiment.seed), tokenizer


def main(args: argparse.Namespace, params: Params) -> None:
    torch.manual_seed(params.experiment.seed)
    data, out = Path(args.data), Path(args.out)
    train, val = read_jsonl(data / "train.jsonl"), read_jsonl(data / "val.jsonl")
    cfg = params.sft
    with tracking.stage_run("sft", params, args.params):
        start = time.perf_counter()
        model, tokenizer = initial_model(params, train)
        history: list[dict] = []
        if cfg.enabled:
            examples = build_examples(train, tokenizer, params.model.max_length)
            engine = build_engine(model, cfg.engine, cfg.batch_size)

            def on_step(step: int, m: dict) -> None:
                total = m.pop("steps")
                history.append({"step": step, **m})
                if step % 10 == 0 or step + 1 == total:
                    mlflow.log_metrics({"train_loss": m["loss"], "lr": m["lr"]}, step=step)
                    print(f"sft step {step + 1}/{total}: loss {m['loss']:.4f}", flush=True)
                    events.emit(events.PROGRESS, "sft", step=step + 1, total=total)

            train_sft(engine, examples, epochs=cfg.epochs, batch_size=cfg.batch_size, pad_id=tokenizer.pad_token_id,
                      seed=params.experiment.seed, on_step=on_step)
            model = engine.module
        result = greedy_accuracy(HFRolloutEngine(model, tokenizer), val[: cfg.eval_examples], correctness_scorer(params),
                                 max_new_tokens=params.rl.sampling.max_completion_length)
        save_pretrained(model, tokenizer, out)
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
        mlflow.log_metrics(tracking.numeric_metrics(metrics))
        mlflow.log_artifact(args.metrics)
    print(f"sft: val accuracy {result.accuracy:.1%} on {len(result.outputs)} prompts, {metrics['seconds']} s -> {out}")


if __name__ == "__main__":
    parser = stage_parser("sft", __doc__)
    run_stage_cli(parser, main)
