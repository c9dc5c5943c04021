"""End-to-end fixtures: a throwaway copy of this checkout, its own git repo, DVC, MLflow store
and Prefect home, so that the real tools run exactly as a user's clone would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpoflow.provenance import copy_checkout

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh clone-like copy of the working tree (tracked and untracked, ignored files left out)."""
    dest = copy_checkout(REPO, tmp_path / "project")
    git = ["git", "-c", "user.email=ci@grpoflow.local", "-c", "user.name=ci"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "copy"], cwd=dest, check=True)
    return dest


@pytest.fixture
def run_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "PREFECT_API", "GRPOFLOW_"))}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        MLFLOW_DISABLE_TELEMETRY="true",
        DVC_NO_ANALYTICS="1",
        HF_HUB_OFFLINE="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# The tiny default, shrunk to seconds: same stages, same code paths, few steps.
SMOKE_OVERRIDES = {
    "data.synthetic.num_examples": 400,
    "verifier_gate.max_examples": 50,
    "sft.epochs": 0.5,
    "sft.eval_examples": 16,
    "grpo.steps": 4,
    "grpo.prompts_per_step": 4,
    "grpo.num_generations": 4,
    "grpo.engine.micro_batch_size": 8,
    "grpo.checkpoint_every": 2,
    "grpo.eval_every": 4,
    "evaluate.max_examples": 16,
    "evaluate.n_samples": 4,
    "evaluate.k": 2,
}


def write_params(project: Path, name: str, overrides: dict) -> str:
    """params/<name>.yaml = the default with ``overrides`` (dotted keys), validated by the schema."""
    import yaml

    from grpoflow.config import set_dotted, validate_params

    raw = yaml.safe_load((project / "params" / "default.yaml").read_text())
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    validate_params(raw, source=name)
    rel = f"params/{name}.yaml"
    (project / rel).write_text(yaml.safe_dump(raw, sort_keys=False))
    return rel


def use_params(project: Path, rel: str) -> None:
    """Point dvc.yaml's stages (and so the flow) at another parameter set."""
    dvc_yaml = project / "dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text().replace("params_file: params/default.yaml", f"params_file: {rel}"))


@pytest.fixture
def smoke(project: Path) -> tuple[Path, str]:
    rel = write_params(project, "smoke", SMOKE_OVERRIDES)
    use_params(project, rel)
    subprocess.run(["git", "-c", "user.email=ci@grpoflow.local", "-c", "user.name=ci", "commit", "-qam", "smoke"], cwd=project, check=True)
    return project, rel
