"""Stage ``reward_model``: a Bradley-Terry reward model, for sets whose rewards name ``rm``.

    python -m tasks.reward_model --params params/code-rm.yaml --data data/prepared --policy models/sft \
        --out models/reward_model --report reports/reward_model --metrics metrics/reward_model.json

Pairs come from ``data.pairs`` (ingested, quarantined and leak-checked by the prepare stage:
data/prepared/pairs.jsonl) and, with ``reward_model.self_pairs``, from the SFT policy's own samples
of train prompts ranked by the verifiers in ``rewards`` (a prompt's best sample against its worst,
and its gold solution against the worst), so the stage runs offline. The reward model is the SFT
policy with one score head, trained with the Bradley-Terry loss on DeepSpeed. Pairs held out by
prompt hash give its pairwise accuracy and margin distribution, which the verifier gate checks
(``verifier_gate.min_rm_accuracy``).
"""

from __future__ import annotations

import argparse
import csv
import random
import time
from pathlib import Path

from grpoflow.config import Params
from tasks.cli import EXIT_BAD_INPUT, check_interrupted, run_stage_cli, stage_parser


def file_pairs(data: Path) -> list:
    """The prepared ``data.pairs`` rows as pairs (none when the set names no pairs source)."""
    from grpoflow.data.pairs import Pair
    from grpoflow.data.prepare import PAIRS_FILE
    from grpoflow.io import read_jsonl

    path = data / PAIRS_FILE
    rows = read_jsonl(path) if path.is_file() else []
    return [Pair(r["prompt"], r["chosen"], r["rejected"], r["id"], r["source"]) for r in rows]


def self_built_pairs(params: Params, policy_dir: Path, train: list[dict]) -> list:
    """Pairs from the SFT policy's samples of ``reward_model.prompts`` train prompts, ranked by the
    verifiers of ``rewards`` (never by a reward model: it is what is being trained)."""
    from grpoflow.data.pairs import pairs_from_samples
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.rl.rewards import build_reward
    from grpoflow.rollout import Sampling, build_rollout

    cfg, seed = params.reward_model, params.experiment.seed
    rows = random.Random(seed).sample(train, min(cfg.prompts, len(train)))
    model, tokenizer = load_pretrained(policy_dir)
    prompter = prompter_for(model, tokenizer, params.prompt)
    engine = build_rollout(
        params.rl.rollout_engine,
        model,
        tokenizer,
        policy_dir,
        seed=seed,
        max_model_len=params.model.max_length,
        stop_ids=prompter.stop_ids,
        decode=params.rl.decode,
    )
    n = cfg.samples_per_prompt
    sampling = Sampling(cfg.temperature, 1.0, params.rl.sampling.max_completion_length)
    texts = engine.generate([prompter.prompt(r["prompt"]) for r in rows], n, sampling, seed).texts
    total, _ = build_reward(params, models=False)(texts, [r for r in rows for _ in range(n)])
    scores = total.view(len(rows), n).tolist()
    return pairs_from_samples(rows, [texts[i * n : (i + 1) * n] for i in range(len(rows))], scores, gold=cfg.gold_pairs)


def plot_margins(margins: list[float], out: Path) -> Path:
    """``out/margins.png``: the held-out margins r(chosen) - r(rejected); right of 0 is right."""
    from tasks.plots import plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(margins, bins=30, color="tab:blue")
    ax.axvline(0.0, color="black", linewidth=1)
    ax.set_title("held-out reward margin r(chosen) - r(rejected)")
    ax.set_xlabel("margin")
    fig.tight_layout()
    path = out / "margins.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def train(params: Params, pairs: list, policy_dir: Path, history: list[dict]):
    """The reward model trained on ``pairs`` (each step appended to ``history``), its tokenizer and
    prompter, and how many pairs were too long."""
    from grpoflow import metric_names as M
    from grpoflow.data.pairs import encode_pairs
    from grpoflow.models.engine import build_engine
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.models.reward_model import reward_model_from_policy
    from grpoflow.trainers.reward_model import train_reward_model
    from tasks import events, tracking

    cfg = params.reward_model
    policy, tokenizer = load_pretrained(policy_dir)
    prompter = prompter_for(policy, tokenizer, params.prompt)
    encoded, too_long = encode_pairs(pairs, prompter, params.model.max_length)
    model = reward_model_from_policy(policy, tokenizer)
    engine = build_engine(model, cfg.engine, cfg.batch_size)
    steps_log = tracking.StepLogger()

    def on_step(step: int, m: dict) -> None:
        check_interrupted()  # a Ctrl-C a finalizer swallowed stops the stage here, as in the RL loop
        total = m.pop("steps")
        history.append({"step": step, **m})
        steps_log.log(step, {M.LOSS: m["loss"], "learning/pair_accuracy": m["accuracy"], M.LR: m["lr"]})
        if step % 10 == 0 or step + 1 == total:
            print(
                f"reward_model step {step + 1}/{total}: loss {m['loss']:.4f} accuracy {m['accuracy']:.3f}", flush=True
            )
            events.emit(events.PROGRESS, "reward_model", step=step + 1, total=total)

    train_reward_model(
        engine,
        encoded,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        pad_id=tokenizer.pad_token_id,
        seed=params.experiment.seed,
        on_step=on_step,
    )
    steps_log.finish()
    return engine.module, tokenizer, prompter, too_long


def _split_or_exit(pairs: list, params: Params) -> tuple[list, list]:
    """Train and held-out pairs, or exit with what to change when there are too few of either."""
    from grpoflow.data.pairs import split_pairs

    if not pairs:
        print(
            "error: no preference pairs: the SFT policy's samples never differed in reward, and data.pairs is "
            "empty. Sample more (reward_model.prompts, samples_per_prompt, temperature) or give data.pairs."
        )
        raise SystemExit(EXIT_BAD_INPUT)
    train_pairs, heldout = split_pairs(pairs, params.reward_model.heldout_share, params.experiment.seed)
    if not train_pairs or not heldout:
        print(
            f"error: {len(pairs)} preference pairs leave {len(train_pairs)} to train on and {len(heldout)} to "
            "hold out: sample more prompts (reward_model.prompts) or give data.pairs"
        )
        raise SystemExit(EXIT_BAD_INPUT)
    return train_pairs, heldout


def main(args: argparse.Namespace, params: Params) -> None:
    # Here, not above: --help answers without loading torch, DeepSpeed or MLflow.
    import mlflow
    import torch

    from grpoflow.data.pairs import encode_pairs
    from grpoflow.evaluation.pairwise import pairwise_eval
    from grpoflow.io import atomic_write, read_jsonl, write_json, write_jsonl
    from grpoflow.models.device import describe
    from grpoflow.models.modeling import save_pretrained
    from tasks import notes, tracking

    print(f"reward_model: {describe()}", flush=True)  # where it computes (grpoflow.models.device)

    torch.manual_seed(params.experiment.seed)
    data, policy_dir, out, report = Path(args.data), Path(args.policy), Path(args.out), Path(args.report)
    cfg = params.reward_model
    with tracking.stage_run("reward_model", params, args.params):
        start = time.perf_counter()
        from_file = file_pairs(data)
        built = self_built_pairs(params, policy_dir, read_jsonl(data / "train.jsonl")) if cfg.self_pairs else []
        pairs = from_file + built
        train_pairs, heldout = _split_or_exit(pairs, params)
        report.mkdir(parents=True, exist_ok=True)
        write_jsonl(report / "pairs_train.jsonl", (vars(p) for p in train_pairs))
        write_jsonl(report / "pairs_heldout.jsonl", (vars(p) for p in heldout))
        history: list[dict] = []
        model, tokenizer, prompter, too_long = train(params, train_pairs, policy_dir, history)
        save_pretrained(model, tokenizer, out)
        held, held_too_long = encode_pairs(heldout, prompter, params.model.max_length)
        evaluation = pairwise_eval(model, held, tokenizer.pad_token_id)
        with atomic_write(report / "history.csv") as fh:
            writer = csv.DictWriter(fh, fieldnames=["step", "loss", "accuracy", "lr"])
            writer.writeheader()
            writer.writerows(history)
        metrics = {
            "heldout_accuracy": evaluation.summary["accuracy"],
            "margins": {k: v for k, v in evaluation.summary.items() if k != "accuracy"},
            "pairs": {
                "data": len(from_file),
                "self_built": len(built),
                "train": len(train_pairs),
                "heldout": len(heldout),
                "too_long": too_long + held_too_long,
            },
            "final_loss": history[-1]["loss"] if history else None,
            "steps": len(history),
            "seconds": round(time.perf_counter() - start, 1),
        }
        write_json(args.metrics, metrics)
        mlflow.set_tag(tracking.NOTE, notes.reward_model_note(metrics))
        tracking.log_summary(metrics)
        mlflow.log_artifact(str(plot_margins(evaluation.margins, report)))
        mlflow.log_artifact(args.metrics)
    print(
        f"reward_model: held-out pairwise accuracy {metrics['heldout_accuracy']:.1%} on {len(held)} pairs "
        f"({len(from_file)} from data.pairs, {len(built)} self-built), {metrics['seconds']} s -> {out}"
    )


if __name__ == "__main__":
    parser = stage_parser("reward_model", __doc__)
    run_stage_cli(parser, main)
