"""``make gpu-check`` (benchmarks/gpu_check.py) without a GPU: it exits at once with one line; its
numbers (s/step, rollout tokens/s, peak memory) and metrics/gpu_check.json are assembled from a
training history and each part's outcome by pure functions, checked here on made-up inputs."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from benchmarks import gpu_check, gpu_parts
from flows.rehearse import load_params_from, smoke_params
from grpoflow.config import load_params

ROOT = Path(__file__).resolve().parents[2]
HEADER = "step,step_seconds,rollout_tokens_per_s,peak_memory_mb,reward_mean\n"


def _history(path: Path, rows: list[tuple[float, float, float]]) -> Path:
    path.write_text(HEADER + "".join(f"{i + 1},{s},{t},{m},0.5\n" for i, (s, t, m) in enumerate(rows)))
    return path


@pytest.mark.skipif(gpu_check.no_cuda_reason() is None, reason="this machine has a GPU: the check would run")
def test_without_cuda_the_check_exits_at_once_with_one_line(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--out", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == gpu_check.EXIT_NO_CUDA == 2
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
    assert run.stderr.startswith("gpu-check: ") and "run `make gpu-check` on a machine with a GPU" in run.stderr
    assert not out.exists()


def test_no_cuda_runs_no_part(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "no_cuda_reason", lambda: "torch 2.13.0+cpu sees no CUDA device")
    monkeypatch.setattr(gpu_check, "run_check", lambda out: pytest.fail("a part ran without CUDA"))
    assert gpu_check.main(["--out", str(tmp_path / "x.json")]) == 2
    assert gpu_check.main(["--cuda-or-exit"]) == 2
    monkeypatch.setattr(gpu_check, "no_cuda_reason", lambda: None)
    assert gpu_check.main(["--cuda-or-exit"]) == 0  # and runs no part either


def test_the_numbers_come_from_the_history_leaving_out_the_warm_up_step(tmp_path):
    history = _history(tmp_path / "h.csv", [(30.0, 100.0, 900.0), (2.0, 4000.0, 1500.0), (4.0, 2000.0, 1400.0)])
    assert gpu_check.history_stats(history) == {
        "steps": 3,
        "first_step_s": 30.0,
        "s_per_step": 3.0,
        "rollout_tokens_per_s": 3000.0,
        "trainer_peak_memory_mb": 1500.0,
    }
    one = _history(tmp_path / "one.csv", [(5.0, 10.0, 1.0)])
    assert gpu_check.history_stats(one)["s_per_step"] == 5.0  # a single step is all there is
    with pytest.raises(ValueError, match="no steps"):
        gpu_check.history_stats(_history(tmp_path / "none.csv", []))


def test_pytests_summary_line_is_read_by_outcome():
    out = "....s\n=== short test summary info ===\nSKIPPED [1] needs 2 GPUs\n3 passed, 1 skipped, 1 error in 41.2s\n"
    assert gpu_check.pytest_counts(out) == {"passed": 3, "skipped": 1, "error": 1}
    assert gpu_check.pytest_counts("ImportError: no module named vllm\n") == {}


def _parts(tmp_path, grpo_ok=True):
    history = _history(tmp_path / "h.csv", [(20.0, 50.0, 800.0), (1.5, 6000.0, 2100.0), (2.5, 4000.0, 2000.0)])
    grpo = {"ok": grpo_ok, "seconds": 95.0, "peak_gpu_memory_mib": 47000.0, **gpu_check.history_stats(history)}
    return {
        "gpu_tests": {
            "ok": True,
            "seconds": 60.0,
            "peak_gpu_memory_mib": 30000.0,
            "counts": {"passed": 3, "skipped": 1},
        },
        "grpo": grpo if grpo_ok else {**grpo, "error": "exit [1]"},
        "two_ranks": {"skipped": "2 GPUs: the gpu tests' two-GPU run is the multi-rank check"},
    }


def test_the_summary_passes_only_when_every_part_that_ran_passed_and_prints_the_numbers(tmp_path):
    result = gpu_check.summary(_parts(tmp_path), {"name": "NVIDIA H200", "count": 2, "memory_mib": 143771.0})
    assert result["passed"] is True and json.loads(json.dumps(result)) == result
    lines = gpu_check.summary_lines(result)
    assert lines[0] == "gpu-check on NVIDIA H200 x 2: PASSED"
    grpo = next(line for line in lines if line.startswith("  grpo:"))
    assert "2.00 s/step (first 20.0 s)" in grpo and "5000 rollout tokens/s" in grpo
    assert "peak GPU memory 47000 MiB (trainer 2100 MB)" in grpo
    assert "  gpu_tests: ok in 60 s; 3 passed, 1 skipped" in lines
    assert any(line.startswith("  two_ranks: skipped (2 GPUs") for line in lines)
    failed = gpu_check.summary(_parts(tmp_path, grpo_ok=False), {"name": "NVIDIA H200", "count": 2})
    assert failed["passed"] is False and "FAILED" in gpu_check.summary_lines(failed)[0]
    assert any("exit [1]" in line for line in gpu_check.summary_lines(failed))


@pytest.mark.parametrize(("count", "two_ranks_run"), [(1, True), (2, False)])
def test_the_check_writes_its_json_and_shares_one_gpu_between_two_ranks_only_when_alone(
    monkeypatch, tmp_path, capsys, count, two_ranks_run
):
    parts = _parts(tmp_path)
    ran = []
    monkeypatch.setattr(gpu_check, "gpu_info", lambda: {"name": "NVIDIA H200", "count": count, "memory_mib": 1.0})
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda plan: parts["gpu_tests"])
    monkeypatch.setattr(gpu_check, "full_stack_missing", lambda: [])
    monkeypatch.setattr(gpu_check, "STACK", ("torch", "no-such-package-grpoflow"))
    monkeypatch.setattr(gpu_check, "run_grpo", lambda scratch, timeout: parts["grpo"])
    out, device_out = tmp_path / "metrics" / "gpu_check.json", tmp_path / "device-out"  # made by the check

    def two_ranks(project, timeout):
        ran.append(project)
        assert "grpo" in json.loads(out.read_text())["parts"]  # the rehearsal before it saved too
        return {**parts["grpo"]}

    monkeypatch.setattr(gpu_check, "run_two_ranks", two_ranks)
    monkeypatch.chdir(tmp_path)  # the parts' logs: metrics/gpu_check_logs here
    gpu_parts.LOGS.mkdir(parents=True)
    (gpu_parts.LOGS / "two_ranks.log").write_text("an earlier check's")  # gone: the logs are this run's

    def part(plan, name):
        gpu_parts.LOGS.mkdir(parents=True, exist_ok=True)
        (gpu_parts.LOGS / f"{name}.log").write_text("ran")
        return {"ok": True, "seconds": 1.0, "by": name}

    for name in ("run_matmul", "run_chain"):
        monkeypatch.setattr(gpu_check.gpu_parts, name, lambda plan, name=name: part(plan, name))
    monkeypatch.setenv("OUT", str(device_out))
    seen_mid_run = []

    def step_timing(plan):
        # A device call cut off here still brings back the parts done: written after each, and to $OUT.
        seen_mid_run.extend(json.loads(f.read_text()) for f in (out, device_out / "gpu_check.json"))
        logs = device_out / "gpu_check_logs"  # the parts' logs too, this run's only
        assert sorted(f.name for f in logs.iterdir()) == ["run_chain.log", "run_matmul.log"]
        assert (logs / "run_chain.log").read_text() == "ran"
        return {"ok": True, "seconds": 1.0, "by": "run_step_timing"}

    monkeypatch.setattr(gpu_check.gpu_parts, "run_step_timing", step_timing)
    assert gpu_check.run_check(out) == 0
    for mid in seen_mid_run:
        assert mid["partial"] is True and set(mid["parts"]) == {"gpu_tests", "matmul_bf16", "core_chain"}
        assert mid["passed"] is False and mid["gpu"]["count"] == count  # cut off here, it would not have passed
    assert len(seen_mid_run) == 2 and json.loads((device_out / "gpu_check.json").read_text()) == json.loads(
        out.read_text()
    )
    written = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert written["gpu"]["count"] == count and written["passed"] is True and "partial" not in written
    # The versions the parts ran on: the distribution imported (PyPI's CUDA torch leaves out "+cu130").
    torch_version = written["versions"]["torch"]
    assert torch_version in (torch.__version__, torch.__version__.split("+")[0])
    assert written["versions"] == {
        "python": platform.python_version(), "torch": torch_version, "no-such-package-grpoflow": "absent"
    }  # fmt: skip
    assert f"  versions: python {platform.python_version()}, torch {torch_version}, no-such" in printed
    assert set(written["parts"]) == {"gpu_tests", "matmul_bf16", "core_chain", "step_timing", "grpo", "two_ranks"}
    assert written["parts"]["step_timing"]["by"] == "run_step_timing"
    assert bool(ran) == two_ranks_run and ("skipped" in written["parts"]["two_ranks"]) != two_ranks_run
    assert f"written to {out}" in printed


def test_the_grpo_part_is_the_sets_rehearsal_with_four_steps_of_its_own_batch_in_bf16_on_vllm(monkeypatch):
    monkeypatch.chdir(ROOT)
    full = load_params(gpu_check.SET)
    smoke = load_params_from(smoke_params(gpu_check.SET, None, gpu_check.check_sizes(full)), gpu_check.SET)
    rl = smoke.rl
    assert (rl.steps, rl.rollout_engine, rl.engine.bf16) == (4, "vllm", True)
    assert (rl.prompts_per_step, rl.num_generations, rl.sampling.max_completion_length) == (
        full.rl.prompts_per_step,
        full.rl.num_generations,
        full.rl.sampling.max_completion_length,
    )
    assert smoke.data.synthetic.num_examples == 300 and smoke.model == full.model  # smoke data, the set's model
    assert gpu_check.STAGES[-1] == "grpo" and "evaluate" not in gpu_check.STAGES


def test_make_gpu_check_runs_the_bundles_script_without_the_cpu_setup():
    # --no-print-directory: under `make test` this make is nested and would print make[1]'s directory lines
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "gpu-check"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert dry.strip().splitlines() == ["DRY= bash benchmarks/gpu/check.sh"] and "torch==" not in dry
    phony = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith(".PHONY:"))
    assert {"gpu-check", "gpu-bundle"} <= set(phony.split())


@pytest.mark.skipif(gpu_check.no_cuda_reason() is None, reason="this machine has a GPU: the check would run")
def test_the_check_script_says_in_one_line_that_there_is_no_gpu():
    run = subprocess.run(["bash", "benchmarks/gpu/check.sh"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
    assert run.stderr.startswith("gpu-check: no NVIDIA GPU") and "DRY=1" in run.stderr


def test_two_ranks_on_one_gpu_get_the_backend_the_environment_names(monkeypatch):
    """NCCL refuses two ranks on one device: the check's two-rank part asks for gloo, and gets it."""
    import torch
    import torch.distributed as dist

    from grpoflow.models import engine

    asked: list[str] = []
    deepspeed = SimpleNamespace(init_distributed=lambda dist_backend: asked.append(dist_backend))
    monkeypatch.setattr(engine, "import_deepspeed", lambda: deepspeed)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0" if key != "MASTER_ADDR" else "127.0.0.1")
    monkeypatch.delenv(engine.DIST_BACKEND_ENV, raising=False)
    engine.init_distributed()
    monkeypatch.setenv(engine.DIST_BACKEND_ENV, "gloo")
    engine.init_distributed()
    assert asked == ["nccl", "gloo"]


def test_the_bundle_converts_smollm2_into_a_scratch_folder_unless_the_benchmarks_have_it(tmp_path, monkeypatch):
    """#51: `make gpu-bundle` left the 517 MB conversion in .cache/bench; it bundles no weights."""
    import benchmarks.models as models
    from grpoflow.models import base_model

    converted: list[Path] = []

    def convert(gguf, dest):
        converted.append(Path(dest))
        Path(dest).mkdir(parents=True)
        (Path(dest) / "config.json").write_text("{}")

    monkeypatch.setattr(models, "FOLDER", tmp_path / "cache" / "smollm2")
    monkeypatch.setattr(models, "gguf_problem", lambda name: None)
    monkeypatch.setattr(models, "resolve_file", lambda name: "model.gguf")
    monkeypatch.setattr(base_model, "convert_gguf", convert)
    assert models.smollm_folder(tmp_path / "scratch") == tmp_path / "scratch" and not models.FOLDER.exists()
    assert models.smollm_folder() == models.FOLDER  # the benchmarks' own conversion, cached
    assert models.smollm_folder(tmp_path / "elsewhere") == models.FOLDER and len(converted) == 2


@pytest.mark.parametrize("dry", [False, True])
def test_the_flop_floor_is_a_gpu_figure_left_out_of_a_dry_run(monkeypatch, tmp_path, dry):
    """On a CPU one small bf16 matmul is no peak: the dry run of 2026-12-07 read 1,268% of it."""
    step = {"ok": True, "sizes": "2,2,8", "sides": {"ours": {"parameters": 10, "update_tokens_per_s": 5.0}}}
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda plan: {"ok": True})
    monkeypatch.setattr(gpu_check.gpu_parts, "run_matmul", lambda plan: {"ok": True, "tflops": 1.0})
    monkeypatch.setattr(gpu_check.gpu_parts, "run_chain", lambda plan: {"ok": True})
    monkeypatch.setattr(gpu_check.gpu_parts, "run_step_timing", lambda plan: dict(step))
    monkeypatch.setattr(gpu_check, "full_stack_missing", lambda: ["vllm"])
    plan = gpu_parts.Plan(dry, tmp_path, tmp_path, {})
    parts = gpu_check.run_parts(plan, {"count": 1}, save=lambda parts: None)
    assert ("floor" in parts["step_timing"]) is not dry


def test_a_copy_to_out_that_fails_says_so_and_the_check_goes_on(monkeypatch, tmp_path, capsys):
    """$OUT that cannot take the copy (here a file) must not cost the parts still to run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("OUT", str(tmp_path / "not-a-folder"))
    monkeypatch.setattr(gpu_check, "gpu_info", lambda: {"name": "NVIDIA H200", "count": 2, "memory_mib": 1.0})
    monkeypatch.setattr(gpu_check, "full_stack_missing", lambda: ["vllm"])
    monkeypatch.setattr(gpu_check, "run_gpu_tests", lambda plan: {"ok": True, "seconds": 1.0})
    for name in ("run_matmul", "run_chain", "run_step_timing"):
        monkeypatch.setattr(gpu_check.gpu_parts, name, lambda plan: {"ok": True, "seconds": 1.0})
    out = tmp_path / "metrics" / "gpu_check.json"
    assert gpu_check.run_check(out) == 0
    assert set(json.loads(out.read_text())["parts"]) == {
        "gpu_tests",
        "matmul_bf16",
        "core_chain",
        "step_timing",
        "grpo",
        "two_ranks",
    }
    assert "gpu-check: could not copy to $OUT" in capsys.readouterr().out


def test_a_dry_run_names_its_cpu_and_whether_bf16_is_native(tmp_path):
    """A dry run's seconds depend on the CPU's bf16 (2026-12-07: emulated, 14x slower): the table says which."""
    info = gpu_check.cpu_info()
    assert info["cpu"] and info["native_bf16"] in (True, False, None)
    for native, said in ((False, "bf16 emulated (no AMX or AVX512-BF16)"), (True, "bf16 native")):
        gpu = {"count": 0, "name": "cpu (dry run)", "cpu": "AMD EPYC", "native_bf16": native}
        lines = gpu_check.summary_lines(gpu_check.summary({}, gpu))
        assert lines[1] == f"  cpu: AMD EPYC; {said}"
    assert not any("cpu:" in line for line in gpu_check.summary_lines(gpu_check.summary({}, {"name": "H200"})))


def _dry_check_env(tmp_path, **env) -> str:
    """TORCH_EXTENSIONS_DIR as check.sh's dry run hands it to the check, with a stand-in interpreter
    (pip's installs pass, the check prints the variable) and a one-file bundle."""
    (tmp_path / "bundle" / "whl").mkdir(parents=True, exist_ok=True)
    (tmp_path / "bundle" / "whl" / "x-1-py3-none-any.whl").write_text("")
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\ncase "$*" in *benchmarks.gpu_check*) echo "$TORCH_EXTENSIONS_DIR";; esac\n')
    fake.chmod(0o755)
    base = {"PATH": "/usr/bin:/bin", "DRY": "1", "PY": str(fake), "BUNDLE": str(tmp_path / "bundle")}
    base["SITE"] = str(tmp_path / "site")
    out = subprocess.run(
        ["bash", "benchmarks/gpu/check.sh"], cwd=ROOT, env=base | env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_check_builds_the_bundles_deepspeed_ops_in_a_folder_of_their_own(tmp_path):
    """2026-12-07: the bundle's DeepSpeed (other source paths) and the venv's rebuilt each other's CPU op in
    the checkout's .cache/torch_extensions, 35-45 s each time; make exports that folder to every recipe."""
    made = str(ROOT / ".cache" / "torch_extensions")  # what the Makefile exports
    assert _dry_check_env(tmp_path, TORCH_EXTENSIONS_DIR=made) == str(ROOT / ".cache" / "torch_extensions-gpu-check")
    chosen = str(tmp_path / "ops")
    assert _dry_check_env(tmp_path, TORCH_EXTENSIONS_DIR=made, GPU_CHECK_EXTENSIONS_DIR=chosen) == chosen
