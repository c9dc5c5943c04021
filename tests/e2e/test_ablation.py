"""The ablation flow against a real MLflow tracking server on 127.0.0.1: named arms over seeds, each
(arm, seed) a DVC stage of its own; the arms' table with intervals and verdicts; one parent run
with a child per arm and seed, comparable metric by metric; one more seed trains only that seed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from grpoflow.evaluation.compare import VERDICT_TEST
from grpoflow.ports import free_port
from grpoflow.rl.memory import MODEL_STATE_KEYS
from tests.e2e.conftest import run

pytestmark = pytest.mark.e2e
PY = sys.executable


@pytest.fixture
def mlflow_server(tmp_path, run_env):
    port = free_port()
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
        ],
        env=run_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            assert proc.poll() is None, "mlflow server exited"
            time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def rest(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{url}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_arms_over_seeds_give_intervals_verdicts_and_comparable_runs_and_cache_per_seed(
    smoke_sft, run_env, mlflow_server
):
    # The shared stages come reproduced (the session's SFT, conftest.smoke_sft): the arms are what train here.
    project, params_file = smoke_sft
    env = {**run_env, "MLFLOW_TRACKING_URI": mlflow_server}
    ablation = [PY, "-m", "flows.ablation", "--params", params_file, "--arms"]
    first = run([*ablation, "grpo", "rloo", "ppo", "--seeds", "0", "1"], project, env, timeout=1500)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    result = json.loads((project / "metrics" / "ablation.json").read_text())
    assert result["baseline"] == "grpo" and result["order"] == ["grpo", "rloo", "ppo"] == sorted(
        result["arms"], key=result["order"].index
    )
    for arm, stats in result["arms"].items():
        score = stats["test_pass@1"]
        assert score["n"] == 2 and score["ci95"][0] <= score["mean"] <= score["ci95"][1], (arm, score)
        assert stats["seconds_per_step"]["mean"] > 0 and stats["peak_memory_mb"]["mean"] > 0 and "kl_final" in stats
        assert "heldout_loss_increase" in stats  # the forgetting check, per arm
    for arm in ("rloo", "ppo"):
        assert (
            result["verdicts"][arm]["verdict"] in ("better", "worse", "tie")
            and result["verdicts"][arm]["test"] == VERDICT_TEST
        )
        assert result["forgetting_verdicts"][arm]["verdict"] in ("better", "worse", "tie")
    assert (project / "reports" / "ablation" / "curves.png").stat().st_size > 1000
    assert (project / "reports" / "ablation" / "wall_clock.png").stat().st_size > 1000
    assert (
        "ppo" in result["arms"]
        and json.loads((project / "metrics" / "arms" / "ppo-s1.json").read_text())["algorithm"] == "ppo"
    )

    # MLflow: one parent; a child per arm and seed with the same metric names (PPO adds its critic's).
    with urllib.request.urlopen(
        f"{mlflow_server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=grpoflow-default"
    ) as r:
        experiment_id = json.loads(r.read())["experiment"]["experiment_id"]
    runs = rest(mlflow_server, "runs/search", {"experiment_ids": [experiment_id], "max_results": 200})["runs"]
    tags = lambda run: {t["key"]: t["value"] for t in run["data"].get("tags", [])}  # noqa: E731
    params = lambda run: {p["key"]: p["value"] for p in run["data"].get("params", [])}  # noqa: E731
    arms = [r for r in runs if tags(r).get("grpoflow.stage") == "arm"]
    assert sorted(r["info"]["run_name"] for r in arms) == sorted(
        f"arm/{a}/s{s}" for a in ("grpo", "rloo", "ppo") for s in (0, 1)
    )
    assert len({tags(r)["mlflow.parentRunId"] for r in arms}) == 1
    # System metrics (MLflow's sampler, every 10 s) depend on how long a run lasted: not compared.
    keys = {
        params(r)["arm"]: {m["key"] for m in r["data"]["metrics"] if not m["key"].startswith("system/")} for r in arms
    }
    assert keys["grpo"] == keys["rloo"] and keys["ppo"] - keys["grpo"] == {
        "learning/value_loss",
        "learning/explained_variance",
        "learning/returns_mean",
        "learning/returns_std",
        "schedule/critic_warmup",  # the smoke sizes' one warm-up step: 1, then 0, so a schedule, not a param
        "perf/phase/old_logprobs_s",  # a phase is charted where it takes time: PPO's old log-probs, not GRPO's
        # the critic's model state, counted from its tensors: the memory GRPO does not spend
        *(f"summary/memory.models.critic.{k}" for k in MODEL_STATE_KEYS),
    }
    assert {"learning/reward_mean", "learning/kl", "learning/grad_norm", "summary/test_pass_at_1"} <= keys["grpo"]
    assert {params(r)["algorithm"] for r in arms if params(r)["arm"] == "rloo"} == {"grpo"}

    # The run's page: self-contained (plots inline, nothing fetched), with the arms' table.
    page = (project / "reports" / "run.html").read_text()
    assert page.count("<img") == page.count('src="data:image/png;base64,') >= 1 and "<script" not in page
    assert "Ablation" in page and "rloo" in page

    # One more seed of one arm: only that (arm, seed) trains; its earlier seeds come from DVC's cache, and
    # the arms left out of this run are left alone (one arm's seed, not three: the same check, a third the time).
    second = run([*ablation, "grpo", "--seeds", "0", "1", "2"], project, env, timeout=1500)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    log = second.stdout + second.stderr
    assert "arm_grpo_s2: ran" in log and "arm_grpo_s0: cached" in log and "arm_grpo_s1: cached" in log, log[-3000:]
    assert not any(f"arm_{arm}_s{seed}: " in log for arm in ("rloo", "ppo") for seed in (0, 1, 2)), log[-3000:]
    again = json.loads((project / "metrics" / "ablation.json").read_text())
    assert list(again["arms"]) == ["grpo"] and again["arms"]["grpo"]["test_pass@1"]["n"] == 3
