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
    from grpoflow.config.advice import lint

    params = load_params(ROOT / "params" / "gsm8k-qwen2.5-0.5b.yaml")
    assert params.rl.rollout_engine == "vllm" and params.rl.engine.zero_stage == 2
    errors = [f.message for f in lint(params, "grpo", world) if f.level == "error"]
    assert errors == []


SERVER_LOG = """\
05:28:39.699 | ERROR   | docket.dependencies - ↩ [    41ms] schedule_recent_deployments()
Traceback (most recent call last):
  File "/site-packages/prefect/server/models/deployments.py", line 905, in _insert_scheduled_flow_runs
    await session.execute(insert_stmt)

sqlalchemy.exc.InvalidRequestError: Can't evaluate bulk DML statement; please supply a bulk_dml decorated function
05:28:40.501 | ERROR   | docket.dependencies - ↩ [     9ms] mark_deployments_ready(work_queue_ids=...)
Traceback (most recent call last):
  File "/site-packages/aiosqlite/core.py", line 63, in _connection_worker_thread
sqlite3.OperationalError: database is locked

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/site-packages/docket/worker.py", line 1134, in _execute
sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked
[SQL: WITH locked AS (SELECT deployment.id) UPDATE deployment SET status=:status]
05:29:40.100 | INFO    | prefect.server - all is well
"""


def test_server_errors_reach_the_serve_console_once_each(tmp_path):
    from flows.serve import ServerLogWatch

    log = tmp_path / "server.log"
    log.write_text("05:00:00.000 | ERROR   | written before serve started\n")
    watch = ServerLogWatch(log)
    with open(log, "a") as fh:
        fh.write(SERVER_LOG)
    shown = watch.poll()
    assert shown[:2] == [
        "Prefect server: ERROR docket.dependencies - ↩ [    41ms] schedule_recent_deployments()",
        "Prefect server: sqlalchemy.exc.InvalidRequestError: Can't evaluate bulk DML statement; please supply a "
        "bulk_dml decorated function",
    ]
    locked = [m for m in shown if "database is locked" in m]
    assert locked and locked[0].endswith("PostgreSQL (PREFECT_API_DATABASE_CONNECTION_URL))")
    assert len(shown) == 6 and shown[-1].startswith("(each server error is shown once")
    assert not any("written before" in m or "all is well" in m for m in shown)
    with open(log, "a") as fh:
        fh.write(
            SERVER_LOG.replace("[    41ms]", "[     7ms]")
            + "05:30:00.000 | ERROR   | prefect.server - something new\n05:30"
        )
    assert watch.poll() == ["Prefect server: ERROR prefect.server - something new"]  # repeats are not shown again


def test_a_temporary_server_gets_the_time_a_loaded_machine_needs(monkeypatch):
    from flows.serve import startup_timeout_s

    monkeypatch.delenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", raising=False)
    assert startup_timeout_s() >= 120  # Prefect's 20 s default failed beside three busy loops on 2 cores
    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "45")
    assert startup_timeout_s() == 45


def test_sqlalchemy_is_pinned_below_the_release_that_breaks_prefects_scheduler():
    import tomllib

    import sqlalchemy

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.fullmatch(r"sqlalchemy==2\.0\.\d+", d.split(";")[0].strip().lower()) for d in deps)
    assert sqlalchemy.__version__.startswith("2.0.")  # 2.1 fails Prefect 3.7's bulk insert of scheduled runs


def test_the_committed_deployments_name_safe_params_files_and_a_hostile_one_is_refused(tmp_path, monkeypatch, capsys):
    from flows.serve import deployment_params_problems, main

    assert deployment_params_problems(ROOT / "prefect.yaml") == []
    hostile = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    hostile["deployments"][0]["parameters"]["params_file"] = "params/x$(id>pwned).yaml"
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(hostile))
    (problem,) = deployment_params_problems(tmp_path / "prefect.yaml")
    assert "deployment 'scheduled'" in problem and "may contain only letters" in problem
    monkeypatch.chdir(ROOT)
    assert main(["--params", "../params/default.yaml", "--no-worker"]) == 2
    assert "may not contain '..'" in capsys.readouterr().err


def test_a_taken_port_is_refused_before_any_server_starts(monkeypatch, capsys):
    """A second `make serve` started a server that exited at once, after it had set the first one's
    deployments up again, and said only 'a served process exited'."""
    import socket

    from flows import serve

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(serve.subprocess, "Popen", lambda *a, **k: pytest.fail("a process was started"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert serve.main(["--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"error: port {port} is taken" in err and f"make serve SERVE_PORT={port + 100}" in err


def test_the_registered_deployments_are_named_as_prefect_deployment_run_takes_them():
    from flows.serve import registered

    out = (
        "│ Deployment 'grpoflow-pipeline/scheduled' successfully created with id        │\n"
        "To schedule a run for this deployment, use the following command:\n\n"
        "        $ prefect deployment run 'grpoflow-pipeline/scheduled'\n\n"
        "        $ prefect deployment run 'grpoflow-tune/tune'\n"
    )
    assert registered(out) == ["grpoflow-pipeline/scheduled", "grpoflow-tune/tune"] and registered("") == []


def test_the_run_hint_names_this_environments_prefect(monkeypatch, tmp_path):
    from flows.serve import prefect_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.executable", str(tmp_path / ".venv" / "bin" / "python"))
    assert prefect_command() == ".venv/bin/prefect"  # not on PATH unless the venv is active
    monkeypatch.setattr("sys.executable", "/opt/env/bin/python")
    assert prefect_command() == "/opt/env/bin/prefect"


def test_set_up_cancels_the_missed_runs_of_the_deployments_it_registered_and_says_so(monkeypatch, capsys):
    """configure's wiring (flows.missed_runs has its own test against a real server): the names
    `prefect deploy` registered are the ones judged, each deployment's line is printed, and a
    failed check stops the set-up before a worker could start on the backlog."""
    import datetime as dt

    from flows import serve
    from flows.missed_runs import Missed

    deployed = "        $ prefect deployment run 'grpoflow-pipeline/scheduled'\n"
    monkeypatch.setattr(serve, "prefect", lambda *a, env, check=True: serve.subprocess.CompletedProcess(a, 0, deployed))
    asked = []

    def cancel(api_url, deployments):
        asked.append((api_url, deployments))
        return [Missed(deployments[0], 2, dt.datetime(2026, 12, 7, 2, tzinfo=dt.UTC))]

    monkeypatch.setattr(serve, "cancel_missed", cancel)
    env = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    serve.configure(env, "grpoflow-local", "process", None, 1)
    assert asked == [("http://127.0.0.1:4200/api", ["grpoflow-pipeline/scheduled"])]
    assert "2 scheduled runs of grpoflow-pipeline/scheduled missed while nothing served them" in capsys.readouterr().out

    monkeypatch.setattr(serve, "cancel_missed", lambda *a: (_ for _ in ()).throw(ConnectionError("refused")))
    with pytest.raises(RuntimeError, match=r"missed while nothing served them failed: ConnectionError\('refused'\)"):
        serve.configure(env, "grpoflow-local", "process", None, 1)
