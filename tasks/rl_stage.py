"""The RL training stages (``grpo`` and the ``ppo`` baseline) share this body: the same data,
rollout budget, engine, metrics, health checks, checkpoints and tracking; only the trainer (and
PPO's critic) differ. ``tasks.grpo`` and ``tasks.ppo`` are the CLIs.

Re-running an interrupted stage continues from the last checkpoint in ``--checkpoints`` when it
was made from the same parameters, data, reference and code; otherwise training starts over.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from grpoflow import checkpoint
from grpoflow.config import Params
from grpoflow.engine import build_engine, init_distributed
from grpoflow.evaluation import greedy_accuracy
from grpoflow.grpo import GRPOTrainer
from grpoflow.health import HealthMonitor, Symptom, TrainingDiverged
from grpoflow.io import atomic_write, read_jsonl, sha256_paths, write_json
from grpoflow.lint import format_findings, lint
from grpoflow.modeling import load_pretrained
from grpoflow.ppo import PPOTrainer, ValueModel
from grpoflow.provenance import code_hash
from grpoflow.rl import LoopState, OutOfMemoryAfterBackoff
from grpoflow.rollout.hf import HFRolloutEngine
from tasks import tracking
from tasks.cli import EXIT_VERDICT, run_stage_cli, stage_parser
from tasks.models import build_reward, build_rollout, load_frozen, math_scorer

HISTORY_FIELDS = [
    "step", "reward_mean", "reward_std", "group_reward_std", "frac_zero_std_groups", "kl", "beta", "loss", "clip_ratio",
    "entropy", "grad_norm", "completion_length_mean", "completion_length_max", "frac_truncated", "rollout_tokens_per_s",
    "update_tokens_per_s", "step_seconds", "peak_memory_mb", "num_generations", "val_accuracy",
    "value_loss", "explained_variance",
]


def fingerprint(params: Params, data: Path, reference: Path, algorithm: str, seed: int) -> str:
    """What a checkpoint must match to be resumed: the training params, the data, the reference,
    and the code (training and verifiers): anything that would make the continuation differ."""
    sections = {"experiment", "grpo", "rewards", "model"} | ({"ppo"} if algorithm == "ppo" else set())
    h = hashlib.sha256(json.dumps(params.model_dump(mode="json", include=sections), sort_keys=True).encode())
    h.update(f"{algorithm}:{seed}".encode())
    h.update(sha256_paths([data / "train.jsonl", reference / "model.safetensors"]).encode())
    h.update(code_hash("grpoflow", "verifiers", "tasks/rl_stage.py").encode())
    return h.hexdigest()[:16]


class History:
    """The per-step CSV that DVC plots. Its rows also travel in each checkpoint, because DVC
    deletes the stage's outputs before re-running it."""

    def __init__(self, path: Path, rows: list[dict]):
        self.path = path
        self.rows = list(rows)

    def add(self, step: int, metrics: dict) -> None:
        self.rows.append({k: metrics.get(k, "") for k in HISTORY_FIELDS} | {"step": step})
        self.write()

    def write(self) -> None:
        with atomic_write(self.path) as fh:
            writer = csv.DictWriter(fh, fieldnames=HISTORY_FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)


def build_trainer(algorithm: str, params: Params, engine, reference, rollout, tokenizer, train, rank, world, health, ref_dir, seed):
    """The algorithm's trainer and the engines it checkpoints (name -> DeepSpeed engine)."""
    common = dict(seed=seed, rank=rank, world=world, health=health)
    args = (params.grpo, engine, reference, rollout, tokenizer, build_reward(params), train)
    if algorithm == "grpo":
        return GRPOTrainer(*args, **common), {}
    critic_model = ValueModel.from_pretrained(str(ref_dir))
    max_batch = engine.train_batch_size()
    critic = build_engine(critic_model, params.ppo.critic_engine.model_copy(update={"micro_batch_size": params.grpo.engine.micro_batch_size}), max_batch)
    return PPOTrainer(*args, ppo=params.ppo, critic_engine=critic, **common), {"critic": critic}


def needs_reference(algorithm: str, params: Params) -> bool:
    return params.grpo.beta > 0 if algorithm == "grpo" else params.ppo.kl_coef > 0


def run(args: argparse.Namespace, params: Params, algorithm: str) -> None:
    rank, world = init_distributed()
    lead = rank == 0
    cfg = params.grpo
    findings = lint(cfg, world)
    if lead:
        print("grpo config check:\n" + format_findings(findings), flush=True)
    if any(f.level == "error" for f in findings):
        raise SystemExit(2)
    # The training seed (sampling, prompt order) defaults to experiment.seed; --seed varies it
    # alone, on the same data and reference, for the ablation's seed spread.
    seed = params.experiment.seed if args.seed is None else args.seed
    torch.manual_seed(seed + rank)
    data, ref_dir, out, ckpt_dir = Path(args.data), Path(args.reference), Path(args.out), Path(args.checkpoints)
    policy, tokenizer = load_pretrained(ref_dir)
    reference = load_frozen(str(ref_dir)) if needs_reference(algorithm, params) else None
    max_g = max([cfg.num_generations, *(e.num_generations for e in cfg.generation_schedule)])
    engine = build_engine(policy, cfg.engine, cfg.prompts_per_step * max_g)
    rollout = build_rollout(cfg.rollout_engine, engine.module, tokenizer, str(ref_dir), params)
    train, val = read_jsonl(data / "train.jsonl"), read_jsonl(data / "val.jsonl")
    health = HealthMonitor()
    trainer, extra_engines = build_trainer(algorithm, params, engine, reference, rollout, tokenizer, train, rank, world, health, ref_dir, seed)
    fp = fingerprint(params, data, ref_dir, algorithm, seed)
    resumed, skipped = checkpoint.load(engine, ckpt_dir, fp, extra_engines)
    for problem in skipped:
        tag = problem.split(":")[0]
        health.symptoms[f"checkpoint_corrupt_{tag}"] = Symptom(
            "checkpoint_corrupt", resumed.state.step if resumed else 0, problem,
            "the save was interrupted, or the file was damaged on disk", "none needed: the newest intact checkpoint was used")
        if lead:
            print(f"{algorithm}: HEALTH checkpoint skipped: {problem}", flush=True)
    extra: dict = {}
    if resumed:
        state, extra = resumed.state, resumed.extra
        trainer.restore(state)
        health.history = extra.get("health_history", [])
        health.symptoms |= {k: Symptom(**v) for k, v in extra.get("health_symptoms", {}).items()}
        rollout.sync_weights(engine.module)
        if lead:
            print(f"grpo: resuming from step {state.step} ({ckpt_dir})", flush=True)
    history = History(Path(args.history), extra.get("history_rows", [])) if lead else None
    score = math_scorer()

    def evaluate(step: int) -> dict:
        if not lead:
            return {}
        res = greedy_accuracy(HFRolloutEngine(engine.module, tokenizer), val[: params.sft.eval_examples], score,
                              max_new_tokens=cfg.sampling.max_completion_length)
        return {"val_accuracy": res.accuracy}

    run_ctx = tracking.stage_run(algorithm, params, args.params) if lead else contextlib.nullcontext()
    with run_ctx:
        import mlflow

        start = time.perf_counter()
        if lead:
            mlflow.set_tags({"algorithm": algorithm, "train_seed": str(seed), "resumed_from_step": str(trainer.state.step),
                             "world_size": str(world)})
            mlflow.log_text(format_findings(findings), "config_check.txt")
        val_start = extra.get("val_accuracy_start")
        if val_start is None and lead:
            val_start = evaluate(-1)["val_accuracy"]

        def on_step(step: int, m: dict) -> None:
            if not lead:
                return
            for s in m.pop("new_symptoms"):
                print(f"{algorithm}: HEALTH step {s['step']}: {s['name']}: {s['evidence']} -> {s['remedy']}", flush=True)
            history.add(step, m)
            mlflow.log_metrics(tracking.numeric_metrics({k: v for k, v in m.items() if isinstance(v, (int, float))}), step=step)
            print(f"{algorithm} step {step + 1}/{cfg.steps}: reward {m['reward_mean']:.3f} kl {m['kl']:.4f} "
                  f"entropy {m['entropy']:.3f} len {m['completion_length_mean']:.1f} {m['step_seconds']:.2f}s"
                  + (f" val_acc {m['val_accuracy']:.3f}" if "val_accuracy" in m else ""), flush=True)

        def on_checkpoint(step: int, state: LoopState) -> None:
            checkpoint.save(engine, ckpt_dir, state, fp, extra_engines=extra_engines, keep=cfg.keep_checkpoints, extra={
                "health_history": health.history,
                "health_symptoms": {k: s.to_dict() for k, s in health.symptoms.items()},
                "val_accuracy_start": val_start,
                "history_rows": history.rows if lead else [],
            })

        try:
            trainer.train(on_step=on_step, on_checkpoint=on_checkpoint, evaluate=evaluate)
        except (TrainingDiverged, OutOfMemoryAfterBackoff) as exc:
            if lead:
                mlflow.set_tag("health", "diverged" if isinstance(exc, TrainingDiverged) else "out_of_memory")
                print(f"{algorithm}: STOPPED: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_VERDICT) from None
        checkpoint.export_model(engine, tokenizer, out)
        if lead:
            history.write()  # also when a finished checkpoint was resumed and no step ran
            rows = history.rows
            final_acc = next((float(r["val_accuracy"]) for r in reversed(rows) if r["val_accuracy"] != ""), None)
            steps_timed = [float(r["step_seconds"]) for r in rows]
            metrics = {
                "val_accuracy_start": val_start,
                "val_accuracy": final_acc,
                "val_accuracy_gain": None if final_acc is None or val_start is None else final_acc - val_start,
                "reward_mean_last10": sum(float(r["reward_mean"]) for r in rows[-10:]) / max(len(rows[-10:]), 1),
                "seconds_per_step": sum(steps_timed) / max(len(steps_timed), 1),
                "rollout_tokens_per_s": sum(float(r["rollout_tokens_per_s"]) for r in rows) / max(len(rows), 1),
                "peak_memory_mb": max(float(r["peak_memory_mb"]) for r in rows),
                "steps": len(rows),
                "health_symptoms": sorted(health.symptoms),
                "world_size": world,
                "algorithm": algorithm,
                "train_seed": seed,
                "seconds": round(time.perf_counter() - start, 1),
            }
            write_json(args.metrics, metrics)
            report = (f"# {algorithm.upper()} run\n\nval accuracy {val_start} -> {final_acc}\n\n## Config check\n\n```\n"
                      f"{format_findings(findings)}\n```\n\n## Health\n\n{health.report()}\n")
            with atomic_write(out / "report.md") as fh:
                fh.write(report)
            mlflow.set_tag("health", ",".join(sorted(health.symptoms)) or "ok")
            mlflow.log_metrics(tracking.numeric_metrics({k: v for k, v in metrics.items() if k not in ("health_symptoms", "algorithm")}))
            mlflow.log_artifact(str(out / "report.md"))
            mlflow.log_artifact(args.metrics)
            print(f"{algorithm}: val accuracy {val_start} -> {final_acc} in {metrics['seconds']} s", flush=True)


def cli(algorithm: str, doc: str) -> None:
    parser = stage_parser(algorithm, doc)
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--reference", default="models/sft")
    parser.add_argument("--out", default=f"models/{algorithm}")
    parser.add_argument("--checkpoints", default=f"checkpoints/{algorithm}")
    parser.add_argument("--history", default=f"metrics/{algorithm}_history.csv", help="per-step metrics CSV (DVC plots)")
    parser.add_argument("--seed", type=int, default=None, help="training seed (default: experiment.seed); data unchanged")
    run_stage_cli(parser, lambda args, params: run(args, params, algorithm))
