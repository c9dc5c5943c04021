"""The ``launch`` section: one process is today's ``python -m`` command, byte for byte; more puts
torchrun with the section's options in front of the training stages in the generated dvc.yaml; the
set's batch arithmetic is checked against the world size at load; a rehearsal caps the launch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from flows import rehearse as rehearse_module
from flows.rehearse import REHEARSAL_PROCESSES, launch_note, load_params_from, rehearse, smoke_params
from grpoflow.config import ConfigError, load_params, validate_params
from tasks.stages import dvc_spec, for_params, launchers, stage

ROOT = Path(__file__).resolve().parents[2]
QWEN = "params/gsm8k-qwen2.5-0.5b.yaml"
# The grpo stage's command as dvc.yaml has run it since before the launch section existed.
GRPO_TODAY = (
    "python -m tasks.grpo --params '${params_file}' --data data/prepared --reference models/sft --out models/grpo "
    "--checkpoints checkpoints/grpo --metrics metrics/grpo.json --history metrics/grpo_history.csv"
)


def _commands(text: str) -> dict[str, str]:
    return {name: entry["cmd"] for name, entry in yaml.safe_load(text)["stages"].items()}


def test_one_process_is_todays_python_command_byte_for_byte():
    params = validate_params({})
    assert params.launch.world_size == 1 and launchers(params) == {}
    assert stage("grpo").command() == stage("grpo").command(None) == GRPO_TODAY
    generated = _commands(for_params("params/default.yaml", params))
    assert generated["grpo"] == GRPO_TODAY
    assert all(cmd.startswith("python -m tasks.") for cmd in generated.values())
    from grpoflow.config.judges import built_verifiers
    from tasks.stages import local_sources

    grain = {"sources": local_sources(params), "built": built_verifiers(params)}  # the set's own deps
    assert yaml.safe_load(for_params("params/default.yaml", params)) == dvc_spec("params/default.yaml", **grain)


def test_two_nodes_of_two_processes_run_the_training_stages_under_torchrun():
    launch = {
        "nproc_per_node": 2,
        "nnodes": 2,
        "rdzv_endpoint": "10.0.0.1:29500",
        "rdzv_id": "job-7",
        "max_restarts": 1,
    }
    params = validate_params({"launch": launch})
    assert params.launch.world_size == 4
    commands = _commands(for_params("params/default.yaml", params))
    assert commands["grpo"] == (
        "torchrun --nproc_per_node 2 --nnodes 2 --rdzv_backend c10d --rdzv_endpoint 10.0.0.1:29500 --rdzv_id job-7 "
        "--max_restarts 1 -m tasks.grpo --params '${params_file}' --data data/prepared --reference models/sft "
        "--out models/grpo --checkpoints checkpoints/grpo --metrics metrics/grpo.json "
        "--history metrics/grpo_history.csv"
    )
    assert commands["ppo"].startswith("torchrun --nproc_per_node 2 --nnodes 2 ") and " -m tasks.ppo " in commands["ppo"]
    one = _commands(for_params("params/default.yaml", validate_params({})))
    others = [name for name in commands if name not in ("grpo", "ppo")]
    assert others and [commands[name] for name in others] == [one[name] for name in others]  # python -m, as today


def test_one_node_without_an_endpoint_meets_on_a_free_local_port_under_the_sets_name():
    params = validate_params({"experiment": {"name": "mine"}, "launch": {"nproc_per_node": 2, "stages": ["grpo"]}})
    commands = _commands(for_params("params/default.yaml", params))
    assert commands["grpo"].startswith(
        "torchrun --nproc_per_node 2 --nnodes 1 --rdzv_backend c10d --rdzv_endpoint localhost:0 --rdzv_id mine "
        "--max_restarts 0 -m tasks.grpo "
    )
    assert commands["ppo"].startswith("python -m tasks.ppo ")  # not in launch.stages
    named = validate_params({"experiment": {"name": "my run ${x}"}, "launch": {"nproc_per_node": 2}})
    assert " --rdzv_id my-run---x- " in _commands(for_params("params/default.yaml", named))["grpo"]


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ({"nnodes": 2}, "rdzv_endpoint is needed for nnodes=2"),
        ({"rdzv_endpoint": "head"}, "expected host:port"),
        ({"rdzv_endpoint": "${HEAD}:29500"}, "expected host:port"),
        ({"rdzv_id": "a b"}, "rdzv_id 'a b'"),
        ({"stages": ["sft"]}, "launch.stages.0"),
        ({"nproc_per_node": 0}, "launch.nproc_per_node"),
        ({"nnodes": 2, "local_nodes": True, "rdzv_endpoint": "10.0.0.1:29500"}, "host must be one of"),
        ({"nnodes": 2, "local_nodes": True, "rdzv_backend": "etcd"}, "local_nodes needs rdzv_backend c10d"),
        ({"nnodes": 2, "local_nodes": True, "kubernetes": {"enabled": True}}, "excludes kubernetes.enabled"),
    ],
)
def test_a_launch_that_cannot_work_is_refused_at_load(launch, message):
    with pytest.raises(ConfigError, match=message.replace("$", r"\$").replace("{", r"\{")):
        validate_params({"launch": launch})


def test_the_batch_arithmetic_is_checked_against_the_world_size_naming_keys_and_numbers():
    rl = {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 4}}
    validate_params({"rl": rl})  # one process: 6 prompts x 4 = 24 sequences, 6 micro-batches
    with pytest.raises(ConfigError) as caught:
        validate_params({"rl": rl, "launch": {"nproc_per_node": 4}})
    assert (
        "rl.prompts_per_step=6 is not divisible by 4 processes (launch.nproc_per_node=4 x launch.nnodes=1 = 4 "
        "processes for grpo, ppo)"
    ) in str(caught.value)
    # Divisible, but 2 prompts x G=4 = 8 sequences per process do not split into micro-batches of 3.
    with pytest.raises(ConfigError, match=r"8 sequences per process .* rl.engine.micro_batch_size=3"):
        validate_params({"rl": {**rl, "engine": {"micro_batch_size": 3}}, "launch": {"nproc_per_node": 3}})
    # The launch does not reach a stage the set does not run: the training stages stay on one process.
    validate_params({"rl": rl, "launch": {"nproc_per_node": 4}, "experiment": {"stages": ["base_model", "prepare"]}})


def test_the_qwen_set_declares_its_node_of_eight_gpus_and_loads(monkeypatch):
    monkeypatch.chdir(ROOT)
    params = load_params(QWEN)
    assert params.launch.world_size == 8 and params.launch.stages == ["grpo", "ppo"]
    assert params.rl.prompts_per_step % 8 == 0
    commands = _commands(for_params(QWEN, params))
    assert commands["grpo"].startswith("torchrun --nproc_per_node 8 --nnodes 1 --rdzv_backend c10d ")
    assert commands["sft"].startswith("python -m tasks.sft ")
    with pytest.raises(ConfigError, match=r"rl.prompts_per_step=64 is not divisible by 6 processes"):
        load_params(QWEN, {"launch.nproc_per_node": 6})


def test_a_rehearsal_keeps_the_launch_capped_at_two_local_processes_and_says_so(monkeypatch):
    monkeypatch.chdir(ROOT)
    raw = smoke_params(QWEN, None)
    smoke = load_params_from(raw, "smoke")
    assert REHEARSAL_PROCESSES == 2
    assert smoke.launch.world_size == 2 and smoke.launch.nnodes == 1 and smoke.launch.rdzv_endpoint is None
    assert smoke.rl.prompts_per_step == 4  # two prompts per process
    note = launch_note(load_params(QWEN), smoke)
    assert note is not None and "\n" not in note
    assert "launch of 8 processes" in note and "runs as 2 on this machine" in note and "gloo" in note
    commands = _commands(for_params(QWEN, smoke))
    assert commands["grpo"].startswith("torchrun --nproc_per_node 2 --nnodes 1 --rdzv_backend c10d ")
    # One process (the tiny default) stays one process, two prompts a step as before, and nothing is said.
    default = load_params_from(smoke_params("params/default.yaml", None), "smoke")
    assert default.launch.world_size == 1 and default.rl.prompts_per_step == 2
    assert launch_note(load_params("params/default.yaml"), default) is None


@pytest.mark.parametrize("nproc_per_node, nnodes", [(1, 2), (8, 4)])
def test_a_rehearsal_of_several_nodes_runs_two_agents_on_this_one(monkeypatch, tmp_path, nproc_per_node, nnodes):
    monkeypatch.chdir(tmp_path)
    launch = {"nproc_per_node": nproc_per_node, "nnodes": nnodes, "rdzv_endpoint": "10.0.0.1:29500"}
    Path("set.yaml").write_text(yaml.safe_dump({"launch": launch, "rl": {"prompts_per_step": 64}}))
    smoke = load_params_from(smoke_params("set.yaml", None), "smoke")
    assert (smoke.launch.nproc_per_node, smoke.launch.nnodes, smoke.launch.rdzv_endpoint) == (1, 2, None)
    assert smoke.launch.local_nodes
    note = launch_note(load_params("set.yaml"), smoke) or ""
    assert "runs as 2 on this machine (2 nodes of 1 process(es), their agents all here" in note
    grpo = _commands(for_params("set.yaml", smoke))["grpo"]
    assert grpo.startswith(
        "python -m flows.local_nodes --nnodes 2 -- torchrun --nproc_per_node 1 --nnodes 2 --rdzv_backend c10d "
        "--rdzv_endpoint localhost:0 "
    )


def test_the_rehearsal_prints_its_launch_in_one_line_and_writes_it_into_the_copy(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(rehearse_module.tempfile, "mkdtemp", lambda prefix: str(tmp_path))

    def copy_checkout(src: Path, dest: Path) -> Path:
        (dest / "params").mkdir(parents=True)
        return dest

    monkeypatch.setattr(rehearse_module, "copy_checkout", copy_checkout)
    monkeypatch.setattr(
        rehearse_module.subprocess, "run", lambda cmd, **kwargs: subprocess.CompletedProcess(cmd, 0, "", "")
    )
    monkeypatch.setattr(rehearse_module, "run_flow", lambda cmd, cwd, env: 0)
    assert rehearse(QWEN, None, ["grpo"], keep=True) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "launch" in line]
    assert lines == [
        "smoke run: the set's launch of 8 processes (launch.nproc_per_node=8 x launch.nnodes=1) runs as 2 on this "
        "machine (one node; gloo on a CPU), 2 prompt(s) per process"
    ]
    written = yaml.safe_load((tmp_path / "project" / QWEN).read_text())
    assert written["launch"]["nproc_per_node"] == 2 and written["rl"]["prompts_per_step"] == 4
