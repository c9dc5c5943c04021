"""prefect.yaml and the Kubernetes base job template: what they name exists, what they pass is
accepted, and the template renders a GPU Job with the overrides a deployment gives it."""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from prefect.utilities.templating import apply_values

from grpoflow.config import load_params

ROOT = Path(__file__).resolve().parents[2]
PREFECT_YAML = yaml.safe_load((ROOT / "prefect.yaml").read_text())
TEMPLATE = json.loads((ROOT / "deploy" / "k8s" / "base-job-template.json").read_text())


def deployment(name: str) -> dict:
    return next(d for d in PREFECT_YAML["deployments"] if d["name"] == name)


@pytest.mark.parametrize("name", ["scheduled", "ablation"])
def test_each_deployment_names_a_flow_that_takes_its_parameters(name):
    spec = deployment(name)
    path, func = spec["entrypoint"].split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), func)
    accepted = set(inspect.signature(flow.fn).parameters)
    assert set(spec["parameters"]) <= accepted
    assert {"params_file", "overrides"} <= set(spec["parameters"])
    load_params(ROOT / spec["parameters"]["params_file"], spec["parameters"]["overrides"])
    assert spec["work_pool"]["name"] == "{{ $GRPOFLOW_WORK_POOL }}"  # set from orchestration.work_pool by flows.serve


def test_the_pipeline_is_scheduled_and_the_ablation_is_on_demand():
    from prefect.client.schemas.schedules import CronSchedule

    (schedule,) = deployment("scheduled")["schedules"]
    CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])  # raises on a bad cron
    assert deployment("ablation")["schedules"] == []


def placeholders(node) -> set[str]:
    text = json.dumps(node)
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", text))


def test_k8s_template_declares_every_placeholder_and_its_defaults_validate():
    variables = TEMPLATE["variables"]
    jsonschema.Draft202012Validator.check_schema(variables)
    assert placeholders(TEMPLATE["job_configuration"]) <= set(variables["properties"])
    defaults = {k: v["default"] for k, v in variables["properties"].items() if "default" in v}
    jsonschema.validate(defaults, variables)


def render(overrides: dict) -> dict:
    props = TEMPLATE["variables"]["properties"]
    values = {k: v.get("default") for k, v in props.items()} | overrides
    jsonschema.validate(values, TEMPLATE["variables"])
    return apply_values(TEMPLATE["job_configuration"], values)


def test_k8s_job_requests_gpus_on_selected_nodes_with_the_shared_volume():
    job = render({"gpus": 8, "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}})
    pod = job["job_manifest"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    claim = next(v for v in pod["volumes"] if v["name"] == "shared")["persistentVolumeClaim"]["claimName"]
    assert claim == "grpoflow-shared"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "shared")["mountPath"]
    workspace = job["env"]["GRPOFLOW_WORKSPACE"]
    assert workspace.startswith(mount + "/") and container["workingDir"] == workspace


def test_k8s_template_rejects_a_bad_override():
    with pytest.raises(jsonschema.ValidationError):
        render({"gpus": -1})


@pytest.mark.parametrize("world", [1, 8])
def test_gpu_param_set_validates_and_its_batch_fits_a_node(world):
    from grpoflow.lint import lint

    params = load_params(ROOT / "params" / "gsm8k-qwen2.5-0.5b.yaml")
    assert params.grpo.rollout_engine == "vllm" and params.grpo.engine.zero_stage == 2
    errors = [f.message for f in lint(params.grpo, world) if f.level == "error"]
    assert errors == []
