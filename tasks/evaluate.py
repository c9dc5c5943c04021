"""Stage ``evaluate``: every policy (SFT reference, GRPO, PPO) on the test split and every
benchmark: pass@1 and pass@k (unbiased, from n samples at the set's temperature), maj@k, greedy
accuracy, per-example outputs, and the forgetting check (held-out loss against the reference).

    python -m tasks.evaluate --params params/default.yaml --models sft=models/sft grpo=models/grpo ppo=models/ppo
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from pathlib import Path

from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.io import read_jsonl, write_json, write_jsonl
from grpoflow.metric_names import stderr_of
from tasks.cli import run_stage_cli, stage_parser
from tasks.notes import clock
from verifiers.math import canonical_answer as canonical  # maj@k's vote key (tasks.arm imports it from here)


def score_text(metric: str, scores: dict) -> str:
    """``pass@1 0.188 ± 0.012``: a score with its standard error over prompts, where it has one."""
    se = scores.get(stderr_of(metric))
    return f"{metric} {scores[metric]:.3f}" + (f" ± {se:.3f}" if se is not None else "")


def model_metrics(result: dict) -> dict[str, float]:
    """One model's evaluation as its MLflow run's metrics, named alike on every model's run
    (``test/pass_at_1``, ``humaneval/pass_at_4``, ``heldout/loss``) so that MLflow draws the
    models on one axis; the sample counts are params of the parent's summary."""
    from tasks.tracking import mlflow_name

    out = {
        f"{set_name}/{mlflow_name(metric)}": float(value)
        for set_name, scores in result.items()
        if isinstance(scores, dict)
        for metric, value in scores.items()
        if metric != "examples"
    }
    return out | {"heldout/loss": result["heldout_loss"]}


def model_note(result: dict, cfg) -> str:
    """A model's evaluation run in one line: "test pass@1 18.8% ± 1.3 (240 prompts, 4 samples, T 0.7)"."""
    test, metric = result.get("test", {}), M.PASS_AT_1
    if metric not in test:
        return "not evaluated on the test split"
    from tasks.html_report import percent

    how = f"{cfg.n_samples} sample{'s' if cfg.n_samples != 1 else ''}, T {cfg.temperature}"
    return f"test {metric} {percent(test[metric], test.get(stderr_of(metric)))} ({test.get('examples')} prompts, {how})"


def example_outputs(greedy: list[dict], sampled: list[dict]) -> list[dict]:
    """Each example's greedy and sampled outputs in one row. A field both have must hold the same
    value (the id, the reference): a sampled field spelled like a different greedy one would
    overwrite it (the greedy ``correct`` flag was once replaced by the count of correct samples)."""
    rows = []
    for g, s in zip(greedy, sampled, strict=True):
        clash = sorted(k for k in g.keys() & s.keys() if (type(g[k]), g[k]) != (type(s[k]), s[k]))
        if clash:
            raise ValueError(f"example {g['id']}: its greedy and sampled outputs differ on {clash}")
        rows.append({**g, **s})
    return rows


def set_scores(sampled, greedy, k: int) -> dict[str, float]:
    """One set's scores, each with its standard error: pass@1 and pass@k from the samples, maj@k
    where there is a vote (two samples or more, a set with answers: not code), greedy where run."""
    scores = {M.PASS_AT_1: sampled.pass_at_1, stderr_of(M.PASS_AT_1): sampled.pass_at_1_stderr}
    if k > 1:
        scores |= {f"pass@{k}": sampled.pass_at_k, stderr_of(f"pass@{k}"): sampled.pass_at_k_stderr}
        if sampled.maj_at_k is not None:
            scores[f"maj@{k}"] = sampled.maj_at_k
    if greedy is not None:
        scores |= {M.GREEDY: greedy.accuracy, stderr_of(M.GREEDY): greedy.stderr}
    return scores


def eval_sets(data: Path, limit: int, seed: int) -> dict[str, list[dict]]:
    sets = {"test": read_jsonl(data / "test.jsonl")}
    for path in sorted((data / "benchmarks").glob("*.jsonl")):
        sets[path.stem] = read_jsonl(path)
    rng = random.Random(seed)
    return {name: rng.sample(rows, limit) if len(rows) > limit else rows for name, rows in sets.items()}


def heldout_rows(data: Path, limit: int = 256) -> list[dict]:
    """The forgetting check's rows: val rows with a worked solution, whose held-out loss a policy and
    its reference are compared on."""
    return [r for r in read_jsonl(data / "val.jsonl")[:limit] if r.get("solution")]


class Heartbeat:
    """Says every ``every_s`` seconds how far the stage is (prompts scored of all models' and sets', what it is
    on and how many of that pass's samples are done, the time in), from a thread of its own: one generation
    call may take minutes. The rollout engine tells it of finished samples (:meth:`advance`)."""

    def __init__(self, total_prompts: int, every_s: float = 30.0) -> None:
        self.total, self.every_s, self.done, self.now = total_prompts, every_s, 0, "loading"
        self.samples, self.samples_total = 0, 0
        self.start, self.stop = time.monotonic(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def begin(self, now: str, samples: int) -> None:
        """A new generation pass: what it is, and how many samples it draws."""
        self.now, self.samples, self.samples_total = now, 0, samples

    def advance(self, samples: int) -> None:
        """``samples`` more of the pass are done (the engine's ``progress``)."""
        self.samples += samples

    def line(self) -> str:
        spent = clock(time.monotonic() - self.start)
        where = f"{self.now}: {self.samples}/{self.samples_total} samples" if self.samples_total else self.now
        return f"evaluate: {self.done}/{self.total} prompts scored (models x sets), now {where}; {spent} in"

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            print(self.line(), flush=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def evaluate_model(name: str, path: str, params: Params, sets: dict, heldout: list, out: Path, beat: Heartbeat) -> dict:
    """One policy's scores on every set, its held-out loss, and its per-example outputs."""
    from grpoflow.evaluation.accuracy import greedy_accuracy, heldout_loss, sampled_metrics
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.models.prompting import prompter_for
    from grpoflow.rl.rewards import correctness_scorer
    from grpoflow.rollout import Sampling, build_rollout

    cfg = params.evaluate
    beat.begin(f"{name}: loading, held-out loss", 0)
    model, tokenizer = load_pretrained(path)
    prompter = prompter_for(model, tokenizer, params.prompt)
    engine = build_rollout(
        params.rl.rollout_engine,
        model,
        tokenizer,
        path,
        seed=params.experiment.seed,
        max_model_len=params.model.max_length,
        stop_ids=prompter.stop_ids,
        decode=params.rl.decode,
    )
    score = correctness_scorer(params)
    max_new, seed = params.rl.sampling.max_completion_length, params.experiment.seed
    result: dict = {"heldout_loss": heldout_loss(model, prompter, heldout)}
    sampling = Sampling(cfg.temperature, 1.0, max_new)
    engine.progress = beat.advance
    for set_name, rows in sets.items():
        beat.begin(f"{name} on {set_name}, sampled ({len(rows)} prompts x {cfg.n_samples})", len(rows) * cfg.n_samples)
        sampled = sampled_metrics(
            engine, rows, score, canonical, prompter, n=cfg.n_samples, k=cfg.k, sampling=sampling, seed=seed
        )
        greedy = None
        if cfg.greedy:
            beat.begin(f"{name} on {set_name}, greedy ({len(rows)} prompts)", len(rows))
            greedy = greedy_accuracy(engine, rows, score, prompter, max_new_tokens=max_new, seed=seed)
        result[set_name] = set_scores(sampled, greedy, cfg.k) | {"examples": len(rows)}
        outputs = example_outputs(greedy.outputs, sampled.outputs) if greedy else sampled.outputs
        write_jsonl(out / f"{name}_{set_name}.jsonl", outputs)
        beat.done += len(rows)
    return result


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow (and torch)

    from grpoflow.models.device import describe
    from tasks import notes, tracking

    start = time.perf_counter()
    print(f"evaluate: {describe()}", flush=True)  # where it computes (grpoflow.models.device)

    data, out = Path(args.data), Path(args.out)
    models = dict(m.split("=", 1) for m in args.models)
    models = {k: v for k, v in models.items() if (Path(v) / "config.json").is_file()}
    if "sft" not in models:
        raise SystemExit("error: the reference (sft=...) is needed: the forgetting check compares against it")
    sets = eval_sets(data, params.evaluate.max_examples, params.experiment.seed)
    heldout = heldout_rows(data)
    results: dict[str, dict] = {}
    total = len(models) * sum(len(rows) for rows in sets.values())
    with tracking.stage_run("evaluate", params, args.params) as parent, Heartbeat(total) as beat:
        for name, path in models.items():
            results[name] = evaluate_model(name, path, params, sets, heldout, out, beat)
            with mlflow.start_run(
                run_name=f"evaluate/{notes.model_name(name, notes.starting_model(params))}",
                nested=True,
                parent_run_id=parent.info.run_id,
                tags={"grpoflow.stage": "evaluate", "algorithm": name, "model_path": path},
            ):
                mlflow.log_params({"algorithm": name, "model_path": path})
                mlflow.log_metrics(model_metrics(results[name]))
                mlflow.set_tag(tracking.NOTE, model_note(results[name], params.evaluate))
        ref_loss = results["sft"]["heldout_loss"]
        for r in results.values():
            r["heldout_loss_increase"] = r["heldout_loss"] - ref_loss
            r["forgetting_flagged"] = r["heldout_loss_increase"] > params.evaluate.max_loss_increase
        cfg = params.evaluate
        metrics = {
            "models": results,
            "k": cfg.k,
            "n_samples": cfg.n_samples,
            "temperature": cfg.temperature,
            "greedy": cfg.greedy,
            "max_loss_increase": cfg.max_loss_increase,
            "seconds": round(time.perf_counter() - start, 1),
        }
        write_json(args.metrics, metrics)
        mlflow.set_tag(tracking.NOTE, notes.evaluate_note(metrics))
        tracking.log_summary(results)
        mlflow.log_artifact(args.metrics)
    for name, r in results.items():
        flag = "  FORGETTING FLAGGED" if r["forgetting_flagged"] else ""
        scored = "; ".join(
            f"{set_name} " + " ".join(score_text(m, scores) for m in scores if M.is_score(m))
            for set_name, scores in r.items()
            if isinstance(scores, dict) and M.PASS_AT_1 in scores
        )
        loss = f"held-out loss {r['heldout_loss']:.3f} ({r['heldout_loss_increase']:+.3f})"
        print(f"evaluate {name}: {scored}; {loss}{flag}")


if __name__ == "__main__":
    parser = stage_parser("evaluate", __doc__)
    run_stage_cli(parser, main)
