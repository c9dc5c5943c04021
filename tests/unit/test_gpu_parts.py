"""The GPU check's parts (benchmarks/gpu_parts.py) without a GPU: the step's FLOP floor by hand, the
sides' summaries and table, the dry run's absent packages, and the core chain at its smallest."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_parts

ROOT = Path(__file__).resolve().parents[2]


def test_the_step_flops_and_floor_by_hand():
    # 10 parameters, 2 rows of 3 prompt + 5 completion tokens: 16 tokens
    assert gpu_parts.step_flops(10, 2, 3, 5) == {"update": 1280.0, "reference": 320.0, "rollout": 320.0}
    ours = {"parameters": 10**8, "update_tokens_per_s": 1000.0}
    step = {"sizes": "2,4,96", "sides": {"ours": ours}}
    floor = gpu_parts.floor_and_efficiency(step, {"tflops": 100.0}, prompt_tokens=32)
    # 8 rows x 128 tokens = 1024 tokens; (8 + 2 + 2) x 1e8 x 1024 FLOPs at 1e14 FLOP/s
    assert floor["floor_s"] == round(12 * 1e8 * 1024 / 1e14, 4)
    assert floor["update_tflops"] == round(8 * 1e8 * 1000 / 1e12, 2) and floor["update_share_of_peak"] == 0.008
    assert gpu_parts.floor_and_efficiency(step, {}) is None  # no peak measured: no floor


def _result(seconds, tokens, peak, **extra):
    return {
        "seconds_each": seconds,
        "completion_tokens_each": tokens,
        "cuda_peak_allocated_mb": peak,
        "parameters": 5,
        **extra,
    }


def test_a_side_sums_its_runs_and_the_table_shows_both_and_their_ratio():
    ours = gpu_parts._side(
        [
            _result([2.0, 4.0], [100, 300], 900.0, phase_seconds_per_step={"rollout_s": 1.0}, update_tokens_per_s=10.0),
            _result([3.0], [200], 1000.0, phase_seconds_per_step={"rollout_s": 2.0}, update_tokens_per_s=20.0),
        ]
    )
    assert ours["s_per_step"] == 3.0 and ours["completion_tokens_per_step"] == 200.0 and ours["runs"] == 2
    assert ours["cuda_peak_allocated_mb"] == 1000.0 and ours["phase_s_per_step"] == {"rollout_s": 1.5}
    assert ours["update_tokens_per_s"] == 15.0
    part = {
        "ok": True,
        "sizes": "16,8,256",
        "sides": {"ours": ours, "trl": gpu_parts._side([_result([12.0], [200], 2000.0)])},
    }
    part["ours_over_trl"] = {"s_per_step": 0.25}
    lines = gpu_parts.detail_lines("step_timing", part)
    assert lines[1].split() == ["ours", "3.000", "200", "1000"] and lines[2].split() == ["trl", "12.000", "200", "2000"]
    assert "0.25x s_per_step" in lines[3] and "rollout_s 1.500" in lines[4]


def test_the_last_tagged_line_is_read():
    out = 'noise\nRESULT {"a": 1}\nmore\nRESULT {"a": 2}\n'
    assert gpu_parts.tagged(out, "RESULT ") == {"a": 2} and gpu_parts.tagged("none", "RESULT ") is None


def test_the_dry_run_makes_the_absent_packages_look_missing_as_on_the_image():
    code = (
        "import importlib.util; from benchmarks.gpu_parts import block_absent, ABSENT; block_absent()\n"
        "assert all(importlib.util.find_spec(n) is None for n in ABSENT)\n"
        "try:\n    import mlflow\nexcept ImportError:\n    print('absent')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "absent", run.stderr[-2000:]


@pytest.mark.parametrize("part", ["gpu_tests", "core_chain"])
def test_a_part_that_overruns_its_time_is_stopped_and_says_so(tmp_path, monkeypatch, part):
    monkeypatch.chdir(tmp_path)
    plan = gpu_parts.Plan(False, tmp_path, tmp_path, {})
    result, _ = gpu_parts.run_part(part, [sys.executable, "-c", "import time; time.sleep(30)"], plan, timeout=0.5)
    assert result["ok"] is False and result["error"] == "over its 0.5 s" and result["seconds"] < 20
    assert (tmp_path / gpu_parts.LOGS / f"{part}.log").is_file()


def test_the_core_chain_runs_every_stage_core_and_scores_each_model(tmp_path):
    from benchmarks.core_chain import run_chain

    record = run_chain(tmp_path, examples=60, rl_steps=2, eval_prompts=3)
    assert list(record["stage_seconds"]) == ["sft", "grpo", "ppo", "evaluate"]
    assert set(record["test_pass_at_1"]) == {"sft", "grpo", "ppo"} and record["device"] == "cpu"
    assert all((tmp_path / name / "config.json").is_file() for name in ("sft", "grpo", "ppo"))


def test_the_bundle_carries_what_import_deepspeed_needs_beyond_the_image():
    """#49: the dry run found `import deepspeed` failing on a bare image for want of einops and msgpack:
    every requirement DeepSpeed declares (its extras aside) is on the image or in the bundle."""
    import importlib.metadata as metadata
    import re
    from pathlib import Path

    from benchmarks.gpu_parts import IMAGE_HAS

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    wheels = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "wheels.txt"
    bundled = {norm(line.split("-")[0]) for line in wheels.read_text().split()}
    needs = {
        norm(re.split(r"[ <>=!;\[]", req, maxsplit=1)[0])
        for req in metadata.requires("deepspeed") or []
        if "extra ==" not in req
    }
    assert {"einops", "msgpack"} <= needs  # the two the dry run missed are among what is checked
    assert needs - bundled - {norm(n) for n in IMAGE_HAS} == set()


def test_the_bundle_carries_the_regex_the_project_pins():
    """The text folding's Default_Ignorable_Code_Point needs the pinned regex, on the image too."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pinned = next(line for line in (root / "pyproject.toml").read_text().splitlines() if '"regex==' in line)
    version = pinned.split("==")[1].strip('",')
    wheels = (root / "benchmarks" / "gpu" / "wheels.txt").read_text().split()
    assert any(w.startswith(f"regex-{version}-") for w in wheels)


def test_part_budgets_scale_with_the_load_the_check_starts_under(monkeypatch, capsys):
    """#49: the dry run's parts timed out on a loaded machine; each budget now grows with the load."""
    from benchmarks import gpu_parts

    assert gpu_parts.load_factor(cpus=2, load=1.0) == 1.0  # a quiet machine: the budgets as written
    assert gpu_parts.load_factor(cpus=2, load=7.0) == 3.5
    assert gpu_parts.budgets(2.0)["core_chain"] == 2 * gpu_parts.TIMEOUTS["core_chain"]
    monkeypatch.setattr(gpu_parts, "load_factor", lambda: 1.5)
    plan = gpu_parts.plan(True, Path("unused"))
    try:
        assert plan.timeouts["step_timing"] == 1.5 * gpu_parts.TIMEOUTS["step_timing"] and plan.factor == 1.5
        assert "x1.50 for the load" in capsys.readouterr().out
    finally:
        shutil.rmtree(plan.scratch)


def test_the_dry_run_times_a_two_layer_model_and_says_so(tmp_path, monkeypatch):
    """2026-12-07: on a CPU without native bf16 the dry run's 30-layer SmolLM2 took 30 s a step and
    TRL's side overran the part; the dry shape keeps the config but two layers, the full one all."""
    from transformers import LlamaConfig

    from benchmarks.random_model import random_model

    src = tmp_path / "src"
    LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2
    ).save_pretrained(src)
    (src / "tokenizer.json").write_text("{}")
    full, shallow = random_model(src, tmp_path / "full"), random_model(src, tmp_path / "shallow", layers=1)
    # a layer by hand: q, k, v, o 4 x 16 x 16, the MLP 3 x 16 x 32, two norms 2 x 16
    assert full - shallow == 2 * (4 * 16 * 16 + 3 * 16 * 32 + 2 * 16)
    assert LlamaConfig.from_pretrained(tmp_path / "shallow").num_hidden_layers == 1
    assert (tmp_path / "shallow" / "tokenizer.json").is_file()

    calls: list[list[str]] = []
    monkeypatch.setattr(gpu_parts, "run_part", lambda name, cmd, plan, timeout: calls.append(cmd) or ({"ok": True}, ""))
    for dry in (True, False):
        gpu_parts._random_smollm(gpu_parts.Plan(dry, tmp_path, tmp_path, {}))
    assert calls[0][-2:] == ["0", "2"] and calls[1][-1] == "0"  # the seed, then the dry shape's depth
    part = {"sizes": "2,2,8", "layers": 2, "sides": {"ours": gpu_parts._side([_result([1.0], [32], 0.0)])}}
    assert gpu_parts.detail_lines("step_timing", part)[0].endswith("(sizes 2,2,8, 2 layers)")
