"""``--smoke`` (``--rehearse``): the named bundle of smoke sizes, run in a scratch copy that shares the
checkout's DeepSpeed op cache; ``--help`` marks the opt-in stages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from flows import rehearse as rehearse_module
from flows.pipeline import main
from flows.rehearse import OP_CACHE, SMOKE, rehearse, smoke_params
from grpoflow.config import load_params, validate_params

ROOT = Path(__file__).resolve().parents[2]


def test_the_smoke_bundle_shrinks_every_stage_of_the_tiny_default_and_keeps_the_users_overrides(monkeypatch):
    monkeypatch.chdir(ROOT)
    raw = smoke_params("params/default.yaml", {"grpo.beta": 0.1, "rl.steps": 50})
    params = validate_params(raw, source="smoke")
    full = load_params("params/default.yaml")
    assert params.grpo.beta == 0.1  # the user's override, which the bundle does not size
    assert params.rl.steps == SMOKE["rl.steps"] == 2  # the bundle's size wins over the user's
    assert params.sft.enabled and params.sft.epochs < full.sft.epochs  # SFT runs, briefly
    assert params.data.synthetic.num_examples < full.data.synthetic.num_examples
    assert params.verifier_gate.max_examples < full.verifier_gate.max_examples
    assert params.evaluate.max_examples < full.evaluate.max_examples
    assert not params.orchestration.record_experiment  # a smoke run is no DVC experiment


def test_a_smoke_run_happens_in_a_copy_that_shares_the_checkouts_deepspeed_op_cache(tmp_path, monkeypatch):
    from grpoflow.models.engine import EXTENSIONS_DIR

    assert OP_CACHE == EXTENSIONS_DIR  # the engine's default place, computed without importing torch
    assert OP_CACHE == ROOT / ".cache" / "torch_extensions"  # and the Makefile's: one build per checkout
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setattr(rehearse_module.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    copies: list[Path] = []

    def copy_checkout(src: Path, dest: Path) -> Path:
        (dest / "params").mkdir(parents=True)
        copies.append(dest)
        return dest

    runs: list[dict] = []

    def run(cmd, cwd=None, env=None, **kwargs):
        runs.append({"cmd": cmd, "cwd": cwd, "env": env})
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(rehearse_module, "copy_checkout", copy_checkout)
    monkeypatch.setattr(rehearse_module.subprocess, "run", run)
    monkeypatch.setattr(rehearse_module, "run_flow", lambda cmd, cwd, env: run(cmd, cwd=cwd, env=env).returncode)
    assert rehearse("params/default.yaml", None, None, keep=True) == 0
    flow = runs[-1]
    assert flow["cmd"][1:3] == ["-m", "flows.pipeline"] and flow["cwd"] == copies[0] != ROOT
    assert flow["env"]["TORCH_EXTENSIONS_DIR"] == str(OP_CACHE)
    written = yaml.safe_load((copies[0] / "params" / "default.yaml").read_text())
    assert written["rl"]["steps"] == SMOKE["rl.steps"]  # the copy's set, not the checkout's
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/somewhere/else")  # the user's (or the Makefile's) choice wins
    (copies[0] / "params" / "default.yaml").unlink()
    copies.clear()
    monkeypatch.setattr(rehearse_module, "copy_checkout", lambda src, dest: copy_checkout(src, tmp_path / "again"))
    assert rehearse("params/default.yaml", None, None, keep=True) == 0
    assert runs[-1]["env"]["TORCH_EXTENSIONS_DIR"] == "/somewhere/else"


@pytest.mark.parametrize("code", [0, 1])
def test_a_rehearsal_keeps_its_page_and_logs_in_the_workspace_and_removes_its_scratch_copy(
    tmp_path, monkeypatch, capsys, code
):
    workspace, scratch = tmp_path / "workspace", tmp_path / "scratch"
    workspace.mkdir()
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(rehearse_module.tempfile, "mkdtemp", lambda prefix: str(scratch))
    monkeypatch.setattr(rehearse_module, "KEPT_DIR", str(workspace / ".grpoflow" / "smoke"))

    def copy_checkout(src: Path, dest: Path) -> Path:
        (dest / "params").mkdir(parents=True)
        return dest

    def run(cmd, cwd=None, env=None, **kwargs):
        if cmd[1:3] == ["-m", "flows.pipeline"]:  # the stages: a log, a page and metrics, then `code`
            (Path(cwd) / "reports" / "logs").mkdir(parents=True)
            (Path(cwd) / "reports" / "logs" / "sft.log").write_text("sft said this\n")
            (Path(cwd) / "metrics").mkdir()
            (Path(cwd) / "metrics" / "sft.json").write_text("{}")
            if code == 0:
                (Path(cwd) / "reports" / "run.html").write_text("<html></html>")
        return subprocess.CompletedProcess(cmd, code, "", "")

    monkeypatch.setattr(rehearse_module, "copy_checkout", copy_checkout)
    monkeypatch.setattr(rehearse_module.subprocess, "run", run)
    monkeypatch.setattr(rehearse_module, "run_flow", lambda cmd, cwd, env: run(cmd, cwd=cwd, env=env).returncode)
    assert rehearse("params/default.yaml", None, None) == code
    kept = workspace / ".grpoflow" / "smoke" / "default"
    assert (kept / "reports" / "logs" / "sft.log").read_text() == "sft said this\n"
    assert (kept / "metrics" / "sft.json").is_file() and not scratch.exists()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    shown = kept / "reports" / ("run.html" if code == 0 else "logs")
    assert last.startswith(f"smoke results kept in {kept}") and str(shown) in last


def test_a_smoke_run_tells_its_flow_where_its_page_will_be_kept_and_keeps_what_a_smoke_tune_left(tmp_path, monkeypatch):
    """#51: the smoke run's "Run page:" line named the scratch copy it then deleted, and the next smoke run
    deleted the tune report a smoke `make tune` had kept."""
    from flows import summary

    workspace, scratch = tmp_path / "workspace", tmp_path / "scratch"
    kept, tuned = (workspace / ".grpoflow" / folder / "default" for folder in ("smoke", "smoke-tune"))
    (tuned / "reports").mkdir(parents=True)
    (tuned / "reports" / "tune.md").write_text("# tuned\n")  # what a smoke `make tune` kept
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(rehearse_module.tempfile, "mkdtemp", lambda prefix: str(scratch))
    monkeypatch.setattr(rehearse_module, "KEPT_DIR", str(workspace / ".grpoflow" / "smoke"))
    monkeypatch.setattr(
        rehearse_module, "copy_checkout", lambda src, dest: (dest / "params").mkdir(parents=True) or dest
    )
    told: dict[str, str] = {}

    def run(cmd, cwd=None, env=None, **kwargs):
        if cmd[1:3] == ["-m", "flows.pipeline"]:
            (Path(cwd) / "reports").mkdir()
            (Path(cwd) / "reports" / "run.html").write_text("<html></html>")
            told["kept"] = env[summary.SMOKE_KEPT_ENV]
            monkeypatch.chdir(cwd)  # the flow prints its closing lines from the copy
            monkeypatch.setenv(summary.SMOKE_KEPT_ENV, told["kept"])
            told["where"] = summary.where_next("params/default.yaml")
            monkeypatch.chdir(ROOT)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(rehearse_module.subprocess, "run", run)
    monkeypatch.setattr(rehearse_module, "run_flow", lambda cmd, cwd, env: run(cmd, cwd=cwd, env=env).returncode)
    assert rehearse("params/default.yaml", None, None) == 0
    assert told["kept"] == str(kept.resolve())
    assert told["where"] == {"Run page": str(kept.resolve() / "reports" / "run.html")}  # no link into the copy
    assert (kept / "reports" / "run.html").is_file() and (tuned / "reports" / "tune.md").read_text() == "# tuned\n"


def test_a_failed_smoke_ablation_keeps_no_page_of_the_smoke_run_before_it(tmp_path, monkeypatch, capsys):
    """A smoke ablation that failed pointed at the run page a passed smoke run had kept in the same folder."""
    workspace, scratch = tmp_path / "workspace", tmp_path / "scratch"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(rehearse_module.tempfile, "mkdtemp", lambda prefix: str(scratch))
    monkeypatch.setattr(rehearse_module, "KEPT_DIR", str(workspace / ".grpoflow" / "smoke"))
    monkeypatch.setattr(
        rehearse_module, "copy_checkout", lambda src, dest: (dest / "params").mkdir(parents=True) or dest
    )
    passing = {"code": 0}

    def run(cmd, cwd=None, env=None, **kwargs):
        if cmd[1:3] in (["-m", "flows.pipeline"], ["-m", "flows.ablation"]):
            (Path(cwd) / "reports" / "logs").mkdir(parents=True)
            (Path(cwd) / "reports" / "logs" / "prepare.log").write_text(f"{cmd[2]}\n")
            if passing["code"] == 0:
                (Path(cwd) / "reports" / "run.html").write_text(f"<html>{cmd[2]}</html>")
        return subprocess.CompletedProcess(cmd, passing["code"], "", "")

    monkeypatch.setattr(rehearse_module.subprocess, "run", run)
    monkeypatch.setattr(rehearse_module, "run_flow", lambda cmd, cwd, env: run(cmd, cwd=cwd, env=env).returncode)
    smoke, ablation = (
        workspace / ".grpoflow" / "smoke" / "default",
        workspace / ".grpoflow" / "smoke-ablation" / "default",
    )
    assert rehearse("params/default.yaml", None, None) == 0  # the pipeline's smoke run: its own folder
    assert rehearse("params/default.yaml", None, None, flow=("flows.ablation", "--arms", "grpo")) == 0
    assert (smoke / "reports" / "run.html").read_text() == "<html>flows.pipeline</html>"
    assert (ablation / "reports" / "run.html").read_text() == "<html>flows.ablation</html>"
    passing["code"] = 1
    capsys.readouterr()
    assert rehearse("params/default.yaml", None, None, flow=("flows.ablation", "--arms", "grpo")) == 1
    assert not (ablation / "reports" / "run.html").exists()  # the failed run's logs, not the passed run's page
    assert (ablation / "reports" / "logs" / "prepare.log").read_text() == "flows.ablation\n"
    out = capsys.readouterr().out
    assert f"its stage logs: {ablation.resolve() / 'reports' / 'logs'}" in out
    assert "smoke ablation of params/default.yaml: FAILED (exit 1)" in out  # as `make ablation SMOKE=1` says it
    assert (smoke / "reports" / "run.html").is_file()  # the pipeline's smoke results untouched


def test_help_lists_the_stages_every_set_runs_and_marks_the_opt_in_ones(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    always = next(line for line in text.splitlines() if line.startswith("stages, in order:"))
    opt_in = next(line for line in text.splitlines() if line.startswith("opt-in stages"))
    assert "base_model" in always and "compare" in always and "reward_model" not in always
    assert opt_in.endswith(": reward_model")
    assert "--smoke" in text


def test_the_smoke_bundle_sizes_tuning_and_the_critics_warm_up_consistently(monkeypatch):
    # At smoke size the tune used to refuse with 13 near-identical lines: the critic's warm-up (the set's 14,
    # the range up to 30) left none of a 2-step trial to the policy.
    from flows.tune import check_spaces

    monkeypatch.chdir(ROOT)
    params = validate_params(smoke_params("params/default.yaml", None), source="smoke")
    check_spaces(params, ["grpo", "ppo"])  # raises with every bad end otherwise
    assert params.tune.trial_steps(params.rl.steps) == 2 and params.tune.ppo.critic_warmup_steps.high < 2
    assert params.ppo.critic_warmup_steps < params.rl.steps


def test_the_scratch_copys_overlays_lose_only_the_keys_the_smoke_bundle_sizes(tmp_path):
    from flows.rehearse import shrink_overlays
    from grpoflow.tuning.overlay import overlay_budget, read_overlay

    tuned = tmp_path / "params" / "tuned"
    tuned.mkdir(parents=True)
    (tuned / "default-ppo.yaml").write_text((ROOT / "params" / "tuned" / "default-ppo.yaml").read_text())
    (tuned / "default-x.yaml").write_text("ppo:\n  critic_warmup_steps: 14\n")
    shrink_overlays(tuned)
    kept = read_overlay(tuned / "default-ppo.yaml")
    assert (
        "ppo.critic_warmup_steps" not in kept
        and kept["ppo.kl_coef"] == read_overlay(ROOT / "params" / "tuned" / "default-ppo.yaml")["ppo.kl_coef"]
    )
    assert not (tuned / "default-x.yaml").exists()  # nothing left of it: the arm trains untuned
    # The smoke ablation and tune still name the budget it was tuned on (they said "not stated").
    assert overlay_budget(tuned / "default-ppo.yaml") == overlay_budget(ROOT / "params" / "tuned" / "default-ppo.yaml")
    assert overlay_budget(tuned / "default-ppo.yaml") is not None
    assert (tuned / "default-ppo.yaml").read_text().startswith("# Tuned settings of arm ppo")


def test_a_smoke_tunes_trial_logs_are_kept_and_its_data_view_is_not(tmp_path):
    """A failed trial's error names its trial.log, which went with the scratch copy."""
    from flows.rehearse import keep_results

    project = tmp_path / "project"
    for rel in (".grpoflow/tune/default-grpo/t0/trial.log", ".grpoflow/tune/data/train.jsonl", "reports/tune.md"):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(rel)
    kept = keep_results(project, tmp_path / "kept")
    found = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert found == [".grpoflow/tune/default-grpo/t0/trial.log", "reports/tune.md"]


def test_a_smoke_tune_says_its_studies_and_overlays_went_with_the_copy():
    from flows.tune import study_fingerprint_note

    assert "resumed by the same command" in study_fingerprint_note()
    note = study_fingerprint_note("/w/.grpoflow/smoke-tune/default")
    assert "resumed" not in note and note.endswith("kept in /w/.grpoflow/smoke-tune/default")


def test_a_smoke_run_that_stopped_before_any_stage_says_it_left_nothing(tmp_path):
    """It said `smoke results kept in X (X; metrics in X/metrics)` of a folder holding two .gitignore files."""
    from flows.rehearse import kept_results_line

    dest = tmp_path / "kept"
    for tracked in ("metrics", "reports"):
        (dest / tracked).mkdir(parents=True)
        (dest / tracked / ".gitignore").write_text("*\n")
    assert kept_results_line(dest) == f"the smoke run stopped before its first stage: nothing to keep ({dest} is empty)"
    (dest / "metrics" / "prepare.json").write_text("{}")
    assert kept_results_line(dest).startswith(f"smoke results kept in {dest} ({dest}; metrics in {dest / 'metrics'})")


def test_a_rehearsal_stopped_by_sigterm_stops_the_flow_and_what_it_started(tmp_path):
    """`timeout` or `kill` ended the rehearsing command alone: its flow, and the training under it, went
    on in the scratch copy. A real process tree here: a child that starts a grandchild, both sleeping."""
    import os
    import signal
    import sys
    import threading

    import psutil

    from flows.rehearse import Terminated, run_flow

    pids = tmp_path / "pids"
    child = (
        "import os, subprocess, sys, time\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{grandchild.pid}}')\n"
        "time.sleep(300)\n"
    )
    before = signal.getsignal(signal.SIGTERM)

    def terminate_once_started() -> None:
        while not pids.is_file() or " " not in pids.read_text():
            threading.Event().wait(0.1)
        os.kill(os.getpid(), signal.SIGTERM)  # to this process, as `timeout` sends it

    threading.Thread(target=terminate_once_started, daemon=True).start()
    with pytest.raises(Terminated):
        run_flow([sys.executable, "-c", child], tmp_path, dict(os.environ))
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    assert signal.getsignal(signal.SIGTERM) == before  # this process's own handler, back
