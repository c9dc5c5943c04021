"""The ablation flow against a real MLflow tracking server on 127.0.0.1: GRPO and PPO runs are
children of one parent, tagged by algorithm, with the same metric names (PPO adds its critic's)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.e2e.conftest import free_port, run

pytestmark = pytest.mark.e2e
PY = sys.executable


@pytest.fixture
def mlflow_server(tmp_path, run_env):
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination", str(tmp_path / "artifacts")],
        env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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
    req = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_ablation_runs_are_comparable_in_the_tracking_server(smoke, run_env, mlflow_server):
    project, params_file = smoke
    env = {**run_env, "MLFLOW_TRACKING_URI": mlflow_server}
    result = run([PY, "-m", "flows.ablation", "--params", params_file, "--seeds", "1"], project, env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "winner on test pass@1" in result.stdout and "over seeds [0, 1]" in result.stdout

    with urllib.request.urlopen(f"{mlflow_server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=grpoflow-default") as r:
        experiment_id = json.loads(r.read())["experiment"]["experiment_id"]
    runs = rest(mlflow_server, "runs/search", {"experiment_ids": [experiment_id], "max_results": 100})["runs"]
    tags = lambda run: {t["key"]: t["value"] for t in run["data"].get("tags", [])}  # noqa: E731
    training = [r for r in runs if tags(r).get("grpoflow.stage") in ("grpo", "ppo")]
    seeds = {(tags(r)["algorithm"], tags(r)["train_seed"]) for r in training}
    assert seeds == {("grpo", "0"), ("grpo", "1"), ("ppo", "0"), ("ppo", "1")}
    assert len({tags(r)["mlflow.parentRunId"] for r in training}) == 1  # one parent: select and compare
    keys = {tags(r)["algorithm"]: {m["key"] for m in r["data"]["metrics"]} for r in training}
    assert {"learning/reward_mean", "learning/kl", "learning/entropy", "learning/grad_norm", "perf/peak_memory_mb", "eval/val_accuracy",
            "summary/seconds_per_step", "summary/val_accuracy"} <= keys["grpo"]
    assert keys["ppo"] - keys["grpo"] == {"learning/value_loss", "learning/explained_variance"}
    params = {tags(r)["algorithm"]: {p["key"]: p["value"] for p in r["data"]["params"]} for r in training}
    assert params["grpo"]["algorithm"] == "grpo" and params["ppo"]["algorithm"] == "ppo"  # compare's "diff only" shows it

    # The parent run carries the headline: test pass@1 per model, the winner, s/step, the run's page.
    (parent,) = [r for r in runs if tags(r).get("grpoflow.stage") == "pipeline"]
    headline = {m["key"]: m["value"] for m in parent["data"]["metrics"]}
    evaluation = json.loads((project / "metrics" / "evaluate.json").read_text())["models"]
    for model in ("sft", "grpo", "ppo"):
        assert headline[f"test_pass_at_1/{model}"] == evaluation[model]["test"]["pass@1"]
    assert headline["seconds_per_step/grpo"] > 0 and tags(parent)["winner"] in ("grpo", "ppo", "tie")
    assert "Test pass@1: sft" in tags(parent)["mlflow.note.content"]
    with urllib.request.urlopen(f"{mlflow_server}/api/2.0/mlflow/artifacts/list?run_id={parent['info']['run_id']}") as r:
        assert "run.html" in {f["path"] for f in json.loads(r.read())["files"]}

    # The run's page: self-contained (plots inline, nothing fetched), the headline with GRPO's score.
    # (tests/e2e/test_run_page.py renders such a page in Chromium.)
    page = (project / "reports" / "run.html").read_text()
    assert page.count('src="data:image/png;base64,') == page.count("<img") == 1 and "<script" not in page and "<link" not in page
    assert f"grpo {evaluation['grpo']['test']['pass@1']:.1%}" in page.split('class="headline">')[1].split("</p>")[0]
    spread = json.loads((project / "metrics" / "ablation_seeds.json").read_text())
    assert spread["test_pass@1"]["grpo"]["seeds"] == 2 and "winner" in spread
    compare = json.loads((project / "metrics" / "compare.json").read_text())
    assert compare["memory"]["ppo_peak_mb"] > 0 and compare["winner_on_test_pass@1"] in ("grpo", "ppo", "tie")
    assert (project / "reports" / "compare" / "curves.png").stat().st_size > 1000
