"""One page per pipeline run, ``reports/run.html``: the headline, each stage (ran or cached by
DVC, and its time), the gates' verdicts, the learning curves, the evaluation and the GRPO-vs-PPO
table. Self-contained (plots inline), so that it opens from the Prefect run, from the MLflow
parent run's artifacts, or as a file.

Everything comes from the files the stages wrote (their paths declared once, in tasks/stages.py)
and from the flow's own record of which stages ran.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grpoflow import catalog
from grpoflow import metric_names as M
from tasks import html_report as H
from tasks.compare import title as compare_title
from tasks.notes import model_name, starting_model
from tasks.stages import ABLATION_OUT, ABLATION_REPORT, TRAINING, stage
from tasks.tracking import mlflow_name

REPORT = Path("reports/run.html")
# The one stage time a person reads: the flow's clock around the stage, DVC's checks included.
WALL = "wall time (DVC included)"
STAGE_LOGS = REPORT.parent / "logs"  # each stage's whole output, engine logs included (flows/stage_run.py)


@dataclass
class StageResult:
    """What the flow knows of one stage of a run: whether its command ran (DVC may skip it), its
    time, and its metrics."""

    stage: str
    ran: bool
    seconds: float
    metrics: dict = field(default_factory=dict)


def _json(path: str) -> dict | None:
    return json.loads(Path(path).read_text()) if Path(path).is_file() else None


def reference_first(models: dict[str, Any]) -> list[str]:
    """The model names, the SFT reference first (what the others are read against), then by name."""
    return sorted(models, key=lambda name: (name != "sft", name))


def headline(
    evaluation: dict | None, compare: dict | None, trains: dict[str, dict], start: str = "SFT"
) -> dict[str, Any]:
    """The run's result in a few numbers: test pass@1 per model, the winner, seconds per step; ``start`` names
    the model training started from (the ``sft`` entry: SFT, or the model as shipped)."""
    models = (evaluation or {}).get("models", {})
    return {
        "start": start,
        "test_pass@1": {m: models[m].get("test", {}).get(M.PASS_AT_1) for m in reference_first(models)},
        "test_pass@1_se": {m: models[m].get("test", {}).get(M.stderr_of(M.PASS_AT_1)) for m in reference_first(models)},
        "winner": (compare or {}).get("winner_on_test_pass@1"),
        "seconds_per_step": {a: t.get(M.SECONDS_PER_STEP) for a, t in trains.items()},
        "peak_memory_mb": {a: t.get(M.PEAK_MEMORY_MB) for a, t in trains.items()},
        "paired": (compare or {}).get("paired", {}),
    }


def headline_text(head: dict[str, Any]) -> str:
    """The headline as one sentence: each model by name, with its gain over the starting model."""
    se, scored = head.get("test_pass@1_se", {}), head["test_pass@1"]
    base = scored.get("sft")

    def gain(m: str, v: float) -> str:
        return f" ({100 * (v - base):+.1f})" if m != "sft" and base is not None else ""

    scores = ", ".join(
        f"{model_name(m, head['start'])} {H.percent(v, se.get(m))}{gain(m, v)}"
        for m, v in scored.items()
        if v is not None
    )
    speed = ", ".join(f"{a} {v:.2f} s/step" for a, v in head["seconds_per_step"].items() if v is not None)
    parts = [
        f"Test pass@1: {scores}" if scores else "Not evaluated in this run",
        f"winner: {head['winner']}" if head["winner"] else "",
        speed,
    ]
    return "; ".join(p for p in parts if p) + "."


def headline_metrics(head: dict[str, Any]) -> dict[str, float]:
    """The headline as MLflow metrics for the parent run (``test_pass_at_1/grpo``, ...), with each
    paired test's difference and p-value (``paired/grpo_minus_ppo/p_value``), so that the parents
    of several runs compare in MLflow's UI."""
    scores = {
        mlflow_name(f"{key}/{name}"): float(v)
        for key in ("test_pass@1", "seconds_per_step", "peak_memory_mb")
        for name, v in head.get(key, {}).items()
        if v is not None
    }
    tests = {
        f"paired/{pair}/{field}": float(t[field])
        for pair, t in head.get("paired", {}).items()
        for field in ("difference", "p_value")
    }
    return scores | tests


# The models' test pass@1 as one chart with their names on its axis (an MLflow image chart: its
# metric charts have steps, not names, on their axis).
COMPARISON_CHART = "test_pass_at_1_by_model"


def comparison_figure(head: dict[str, Any]):
    """The headline's scores as one bar chart (:func:`tasks.plots.comparison_figure`), or None without any."""
    from tasks.plots import comparison_figure as bars

    scores = {m: v for m, v in head["test_pass@1"].items() if v is not None}
    if not scores:
        return None
    names = {m: model_name(m, head["start"]) for m in scores}
    return bars(scores, head.get("test_pass@1_se", {}), names)


def log_headline(head: dict[str, Any]) -> str:
    """The headline on the active MLflow run (the parent): its metrics, the models on one chart
    (:func:`comparison_figure`, an image chart), the winner as a tag, and the description; the headline's text."""
    import mlflow

    from tasks.plots import figure_pixels
    from tasks.tracking import NOTE

    text = headline_text(head)
    mlflow.log_metrics(headline_metrics(head))
    figure = comparison_figure(head)
    if figure is not None:
        mlflow.log_image(figure_pixels(figure), key=COMPARISON_CHART, step=0, synchronous=True)
    if head["winner"]:
        mlflow.set_tag("winner", head["winner"])
    chart = f"\n\nAll models on one chart: `{COMPARISON_CHART}` under Model metrics." if figure is not None else ""
    mlflow.set_tag(NOTE, f"{text}{chart}\n\nThe whole run on one page: `run.html` under Artifacts.")
    return text


def trainings(read_metrics: Callable[[str], dict | None], only: set[str] | None = None) -> dict[str, dict]:
    """Each training stage's metrics that ``read_metrics(path)`` finds (of the stages in ``only``)."""
    return {s.name: m for s in TRAINING if (only is None or s.name in only) and (m := read_metrics(s.file("metrics")))}


def _stage_table(rows: list[StageResult]) -> str:
    """Each stage's status and time (minutes and seconds, as the console's summary says it), and links to the
    full logs of those that wrote one."""
    from tasks.notes import clock

    table = H.table(
        [{"stage": r.stage, "status": "ran" if r.ran else "cached by DVC", WALL: clock(r.seconds)} for r in rows]
    )
    logs = [r.stage for r in rows if (STAGE_LOGS / f"{r.stage}.log").is_file()]
    links = ", ".join(f'<a href="{STAGE_LOGS.name}/{H.esc(s)}.log">{H.esc(s)}</a>' for s in logs)
    return table + (f'<p class="muted">Full logs, engine output included: {links}</p>' if logs else "")


def _gates(rows: list[StageResult]) -> str:
    gates = [
        {
            "stage": r.stage,
            "verdict": "passed" if r.metrics["passed"] else "FAILED",
            "failures": "; ".join(map(str, r.metrics.get("failures") or [])) or "none",
        }
        for r in rows
        if "passed" in r.metrics
    ]
    return H.table(gates) if gates else '<p class="muted">No gate ran in this run.</p>'


def _curves(histories: dict[str, list[dict]], trains: dict[str, dict], start: str = "SFT") -> str:
    """The training curves; validation accuracy from each stage's reference score (``start``'s) at step 0."""
    if not histories:
        return '<p class="muted">No training stage in this run.</p>'
    from tasks.plots import plot_curves

    starts = {name: trains.get(name, {}).get(M.VAL_ACCURACY_START) for name in histories}
    with tempfile.TemporaryDirectory() as tmp:
        path = plot_curves(histories, Path(tmp), starts)
        image = H.image(path, "reward, KL and validation accuracy per training step (accuracy from the reference's)")
    return image + _start_caption(starts, start)


def _start_caption(starts: dict[str, float | None], start: str = "SFT") -> str:
    """Where the validation curves start: the reference's score (``start``: SFT, or the model as shipped), drawn
    at step 0."""
    known = {name: v for name, v in starts.items() if v is not None}
    if not known:
        return '<p class="muted">No starting validation accuracy recorded: curves start at the first evaluation.</p>'
    scores = ", ".join(f"{name} {H.percent(v)}" for name, v in known.items())
    return (
        f'<p class="muted" id="val-start">Validation accuracy at step 0, before training, is the reference\'s '
        f"({H.esc(start)}): {H.esc(scores)}.</p>"
    )


def _evaluation(evaluation: dict | None) -> str:
    """One row per model and set (the test split first, then each benchmark): its prompts, each
    score in % with its standard error over prompts, the held-out loss increase; maj@k is blank on
    a code set, whose programs are not voted on. A line above says how each number is made."""
    if not evaluation:
        return '<p class="muted">No evaluation in this run.</p>'
    k, rows = evaluation["k"], []
    for m in reference_first(evaluation["models"]):
        r = evaluation["models"][m]
        sets = ["test", *sorted(n for n, v in r.items() if isinstance(v, dict) and n != "test" and M.PASS_AT_1 in v)]
        rows += [
            {
                "model": m,
                "set": n,
                "prompts": r[n].get("examples"),
                **{
                    key: H.percent(r[n].get(key), r[n].get(M.stderr_of(key)))
                    for key in dict.fromkeys([M.PASS_AT_1, f"pass@{k}", *([f"maj@{k}"] if k > 1 else []), M.GREEDY])
                },
                "held-out loss increase (nats/token)": r.get(M.HELDOUT_LOSS_INCREASE),
                "forgetting": "FLAGGED" if r.get("forgetting_flagged") else "no",
            }
            for n in sets
        ]
    return f'<p class="muted">{H.esc(_evaluation_note(evaluation))}</p>' + H.table(rows)


def _evaluation_note(evaluation: dict) -> str:
    """How the evaluation table's numbers are made (the evaluate stage's settings, as it recorded them)."""
    k, n, t = evaluation["k"], evaluation.get("n_samples"), evaluation.get("temperature")
    scores = f"pass@1, pass@{k} and maj@{k}" if k > 1 else "pass@1"
    sampled = f"{scores} from {n} sample{'s' if n != 1 else ''} per prompt at temperature {t}"
    first = "; greedy is greedy decoding's accuracy" if evaluation.get("greedy") else ""
    limit = evaluation.get("max_loss_increase")
    forgetting = f"; forgetting is flagged above +{limit} nats/token" if limit is not None else ""
    return (
        f"{sampled}{first}; ± is the standard error over prompts, in points; held-out loss on the "
        f"validation rows' worked solutions, against the reference{forgetting}."
    )


def _phases(trains: dict[str, dict]) -> str:
    """Each training stage's step split: per phase that took time, the mean seconds per step and its share
    of the step's wall time (:data:`grpoflow.metric_names.PHASE_SPLIT`)."""
    rows = [
        {"stage": name, "phase": phase, "mean s": round(split["mean_s"], 3), "share %": round(100 * split["share"], 1)}
        for name, m in trains.items()
        for phase, split in (m.get(M.PHASE_SPLIT) or {}).items()
        if split["mean_s"] > 0  # a phase this run never entered (old_logprobs with one update per rollout)
    ]
    return H.table(rows) if rows else '<p class="muted">No step timing in this run.</p>'


def _health(trains: dict[str, dict]) -> str:
    """Each training stage's symptoms (the GRPO spec's troubleshooting table) with their final
    status: re-evaluated over the whole run, so one that cleared says from which step."""
    from grpoflow.rl.health import status_text

    rows = [
        {
            "stage": name,
            "symptom": v["name"],
            "first seen at step": v["step"],
            "evidence": v["evidence"],
            "status": status_text(v),
            "remedy": v["remedy"],
        }
        for name, m in trains.items()
        for v in m.get(M.HEALTH) or []
    ]
    verdict = _health_verdict(trains)
    if rows:
        return verdict + H.table(rows)
    ran = ", ".join(trains) or "no training stage"
    return verdict + f'<p class="muted">No symptom seen ({H.esc(ran)}).</p>'


def health_verdict(trains: dict[str, dict]) -> str:
    """Each training stage's final verdict, as its MLflow run's ``health`` tag and description
    have it: "grpo: health ok (cleared: reward_flat)"; empty without a training stage."""
    from tasks.notes import health_text

    return "; ".join(
        f"{name}: {health_text(list(m.get(M.HEALTH_SYMPTOMS) or []), list(m.get(M.HEALTH) or []))}"
        for name, m in trains.items()
    )


def _health_verdict(trains: dict[str, dict]) -> str:
    verdict = health_verdict(trains)
    if not verdict:
        return ""
    bad = any(m.get(M.HEALTH_SYMPTOMS) for m in trains.values())
    return f'<p class="{"bad" if bad else "good"}" id="health-verdict">Verdict: {H.esc(verdict)}.</p>'


def _reward_model(here: set[str]) -> str:
    """The reward_model stage's held-out pairwise accuracy, pairs and margin plot, where it ran."""
    rm = stage("reward_model")
    metrics = _json(rm.file("metrics")) if rm.name in here else None
    if not metrics:
        return '<p class="muted">No reward model in this run.</p>'
    row = {
        "held-out pairwise accuracy": metrics["heldout_accuracy"],
        **{f"pairs: {k}": v for k, v in metrics["pairs"].items()},
        **{f"margin {k}": v for k, v in metrics["margins"].items() if k != "pairs"},
    }
    margins = Path(rm.file("report")) / "margins.png"
    image = [H.image(margins, "held-out reward margins r(chosen) - r(rejected)")] if margins.is_file() else []
    return "\n".join([H.table([row]), *image])


def _ablation() -> str:
    """The arms' table and plots (the ablation_report stage's files)."""
    table, out = Path(ABLATION_OUT) / "table.json", Path(ABLATION_OUT)
    parts = [H.table(json.loads(table.read_text()))] if table.is_file() else []
    plots = {
        "curves.png": "reward and validation accuracy per arm, mean over seeds",
        "wall_clock.png": "validation accuracy per arm against minutes of training, mean and band over seeds",
    }
    parts += [H.image(out / name, alt) for name, alt in plots.items() if (out / name).is_file()]
    return "\n".join(parts) or '<p class="muted">The ablation wrote no table.</p>'


def provenance_line(params_file: str | None, when: datetime | None = None) -> str:
    """What the page is of: the parameter set, the commit (dirty when the checkout had edits) and
    the time it was written."""
    from grpoflow.provenance import git_commit

    sha, dirty = git_commit()
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{params_file or 'params file not recorded'} at commit {sha[:12]}{' (with edits)' if dirty else ''}, {stamp}"
    )


def links_line(links: dict[str, str] | None) -> str:
    """The way back: each named link (the MLflow parent run, the Prefect flow run) as an anchor."""
    # A new tab: inside MLflow's artifact viewer the page is framed, and a link that stays in the frame fails.
    anchors = [
        f'<a href="{H.esc(url)}" target="_blank" rel="noopener">{H.esc(name)}</a>'
        for name, url in (links or {}).items()
        if url
    ]
    return f"<p>{' · '.join(anchors)}</p>" if anchors else ""


def _start_name(params_file: str | None) -> str:
    """The starting model's name for the set in ``params_file`` (SFT without one)."""
    if not params_file or not Path(params_file).is_file():
        return "SFT"
    from grpoflow.config import load_params

    return starting_model(load_params(params_file))


def build(
    rows: list[StageResult], title: str, params_file: str | None = None, links: dict[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """The page and its headline, from ``rows`` and the files the stages left in the workspace;
    ``links``: where the run is seen elsewhere (MLflow, Prefect), by name."""
    from tasks.plots import read_history

    # Only this run's stages (ran or cached): files of stages it did not run are an earlier run's.
    here = {r.stage for r in rows}
    trains = trainings(_json, here)
    histories = {
        s.name: read_history(Path(s.paths("history")[0]))
        for s in TRAINING
        if s.name in trains and Path(s.paths("history")[0]).is_file()
    }
    evaluation = _json(stage("evaluate").file("metrics")) if "evaluate" in here else None
    compare = _json(stage("compare").file("metrics")) if "compare" in here else None
    head = headline(evaluation, compare, trains, _start_name(params_file))
    table_path = Path(stage("compare").file("out")) / "table.json"
    # A section per stage that ran; one of a stage this run does not have is left out, not left empty.
    optional = {
        "Reward model": _reward_model(here) if "reward_model" in here else "",
        "compare": H.table(json.loads(table_path.read_text()), ["metric", *catalog.default_run()])
        if compare and table_path.is_file()
        else "",
        "Ablation": _ablation() if ABLATION_REPORT in here else "",
    }
    sections = [
        ("Stages", _stage_table(rows)),
        ("Gates", _gates(rows)),
        ("Learning curves", _curves(histories, trains, head["start"])),
        ("Health", _health(trains)),
        ("Where the step time goes", _phases(trains)),
        ("Reward model", optional["Reward model"]),
        ("Evaluation", _evaluation(evaluation)),
        (compare_title(catalog.default_run()), optional["compare"]),
        ("Ablation", optional["Ablation"]),
    ]
    html = H.page(
        title,
        [
            f'<p class="muted">{H.esc(provenance_line(params_file))}</p>',
            links_line(links),
            f'<p class="headline">{H.esc(headline_text(head))}</p>',
            *(part for name, body in sections if body for part in (f"<h2>{H.esc(name)}</h2>", body)),
        ],
    )
    return html, head


def write(
    rows: list[StageResult],
    title: str,
    path: Path = REPORT,
    params_file: str | None = None,
    links: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Write the page to ``path``; its headline."""
    from grpoflow.io import atomic_write

    html, head = build(rows, title, params_file, links)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:
        fh.write(html)
    return head
