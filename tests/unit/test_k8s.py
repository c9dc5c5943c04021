"""A launched stage on Kubernetes: the indexed Job and headless Service rendered from the set's
``launch`` section and the work-pool template, checked offline against the API schema (the
kubernetes client's models); the flow's submit/wait/stream/failure logic, against a small fake of
the two APIs (the product talks to the real client); the switch that puts it in dvc.yaml."""

from __future__ import annotations

import copy
import os
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client

from flows import k8s, k8s_manifests, k8s_watch
from flows.k8s_manifests import INDEX_ANNOTATION, JOB_LABEL
from flows.rehearse import smoke_params
from grpoflow.config import ConfigError, load_params, validate_params
from grpoflow.config.launch import KubernetesConfig
from tasks.events import EVENTS_ENV
from tasks.stages import for_params

ROOT = Path(__file__).resolve().parents[2]
QWEN = "params/gsm8k-qwen2.5-0.5b.yaml"


@pytest.fixture
def qwen_on_two_nodes(monkeypatch):
    monkeypatch.chdir(ROOT)
    return k8s.cluster_params(QWEN, 2)


def _render(params, nodes=2, job="grpoflow-grpo-test"):
    return k8s_manifests.render(params, QWEN, "grpo", nodes, job)


def test_two_nodes_render_an_indexed_job_and_its_headless_service(qwen_on_two_nodes):
    service, job = _render(qwen_on_two_nodes)
    assert isinstance(k8s_manifests.validate(job), client.V1Job)
    assert isinstance(k8s_manifests.validate(service), client.V1Service)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
        "Indexed",
        2,
        2,
        0,
    )
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert (
        container["resources"]["requests"]["nvidia.com/gpu"]
        == "8"
        == container["resources"]["limits"]["nvidia.com/gpu"]
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == "grpoflow-shared"
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/shared", "/dev/shm"}
    # The Service selects the Job's pods, and gives pod 0 the DNS name the rendezvous dials.
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["subdomain"] == service["metadata"]["name"] == "grpoflow-grpo-test"
    script = container["command"][2]
    assert (
        "--nnodes 2 --rdzv_backend c10d --rdzv_endpoint grpoflow-grpo-test-0.grpoflow-grpo-test.grpoflow.svc:29500"
        in script
    )
    assert script.endswith(
        f"-m tasks.grpo --params {QWEN} --data data/prepared --reference models/sft --out "
        "models/grpo --checkpoints checkpoints/grpo --metrics metrics/grpo.json "
        "--history metrics/grpo_history.csv"
    )
    index = next(e for e in container["env"] if e["name"] == "JOB_COMPLETION_INDEX")
    assert INDEX_ANNOTATION in index["valueFrom"]["fieldRef"]["fieldPath"]


def test_the_cluster_knobs_of_the_section_reach_the_pods(monkeypatch):
    monkeypatch.chdir(ROOT)
    knobs = {
        "launch.kubernetes.namespace": "ml",
        "launch.kubernetes.image": "registry.local/grpoflow:7",
        "launch.kubernetes.volume_claim": "team-share",
        "launch.kubernetes.shm_size": "32Gi",
        "launch.kubernetes.memory": "200Gi",
        "launch.kubernetes.service_account": "trainer",
        "launch.kubernetes.node_selector": {"nvidia.com/gpu.product": "H100"},
    }
    params = load_params(QWEN, {**knobs, "launch.kubernetes.enabled": True, "launch.nnodes": 2})
    service, job = _render(params)
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == service["metadata"]["namespace"] == "ml"
    assert pod["containers"][0]["image"] == "registry.local/grpoflow:7" and pod["serviceAccountName"] == "trainer"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "team-share"
    assert pod["volumes"][1]["emptyDir"]["sizeLimit"] == "32Gi"
    assert pod["containers"][0]["resources"]["limits"]["memory"] == "200Gi"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "H100"}
    assert ".ml.svc:29500" in pod["containers"][0]["command"][2]


def test_the_sections_defaults_are_the_work_pool_templates():
    defaults = k8s_manifests.template_defaults(k8s_manifests.load_template())
    section = KubernetesConfig()
    assert (section.namespace, section.image, section.service_account, section.volume_claim) == (
        defaults["namespace"],
        defaults["image"],
        defaults["service_account_name"],
        defaults["shared_volume_claim"],
    )
    assert (section.shm_size, section.cpu, section.memory) == (
        defaults["shm_size"],
        defaults["cpu"],
        defaults["memory"],
    )


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda job: job["spec"].update(completionMod="Indexed"), "completionMod"),
        (lambda job: job["spec"].update(parallelism="2"), "parallelism"),
        (lambda job: job["spec"]["template"]["spec"]["containers"][0].pop("name"), "name"),
        (lambda job: job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(cpu=8), "cpu"),
        (lambda job: job["spec"]["template"]["spec"]["volumes"][1].update(emptydir={}), "emptydir"),
    ],
)
def test_a_manifest_off_the_api_schema_is_rejected(qwen_on_two_nodes, break_it, message):
    job = copy.deepcopy(_render(qwen_on_two_nodes)[1])
    break_it(job)
    with pytest.raises(ValueError, match=message):
        k8s_manifests.validate(job)


def test_a_service_off_the_schema_and_an_unknown_kind_are_rejected(qwen_on_two_nodes):
    service = copy.deepcopy(_render(qwen_on_two_nodes)[0])
    service["spec"]["ports"][0]["port"] = "29500"
    with pytest.raises(ValueError, match="port"):
        k8s_manifests.validate(service)
    with pytest.raises(ValueError, match="kind 'JobSet'"):
        k8s_manifests.validate({"kind": "JobSet"})


def test_pod_zero_alone_hosts_the_rendezvous(qwen_on_two_nodes, tmp_path):
    """The pods' shell line, run with a torchrun that prints its arguments, as node 0 and node 1."""
    fake = tmp_path / "torchrun"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    script = _render(qwen_on_two_nodes)[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    seen = {}
    for index in ("0", "1"):
        env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": index}
        out = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=True)
        args = out.stdout.splitlines()
        seen[index] = args[args.index("--rdzv_conf") + 1]
    assert seen == {
        "0": "join_timeout=1800,read_timeout=1800,is_host=1",
        "1": "join_timeout=1800,read_timeout=1800,is_host=0",
    }


def test_the_command_renders_each_launched_stage_and_checks_the_world_size(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(ROOT)
    assert k8s.main(["--params", QWEN, "--nodes", "2", "--out", str(tmp_path)]) == 0
    for stage_name in ("grpo", "ppo"):
        service, job = yaml.safe_load_all((tmp_path / f"{stage_name}.yaml").read_text())
        k8s_manifests.validate(service), k8s_manifests.validate(job)
        assert (
            job["spec"]["completions"] == 2
            and f"-m tasks.{stage_name} " in job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        )
    role, binding = yaml.safe_load_all((tmp_path / "rbac.yaml").read_text())
    assert isinstance(k8s_manifests.validate(role), client.V1Role)
    assert isinstance(k8s_manifests.validate(binding), client.V1RoleBinding)
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    # What flows/k8s_watch.py calls: create/read/delete the Job, create the Service, list pods, follow logs.
    assert {("jobs", "create"), ("jobs/status", "get"), ("jobs", "delete"), ("services", "create")} <= granted
    assert {("pods", "list"), ("pods/log", "get")} <= granted and binding["subjects"][0]["name"] == "grpoflow"
    assert k8s.main(["--params", QWEN, "--nodes", "3"]) == 2  # 64 prompts over 24 processes
    assert "not divisible by 24 processes" in capsys.readouterr().err


def test_the_switch_puts_the_jobs_submission_in_dvc_yaml_and_is_off_by_default(monkeypatch):
    monkeypatch.chdir(ROOT)
    params = load_params(QWEN)
    assert params.launch.kubernetes.enabled is False
    on = load_params(QWEN, {"launch.kubernetes.enabled": True, "launch.nnodes": 2})  # no endpoint: pod 0 is it
    before = yaml.safe_load(for_params(QWEN, params))["stages"]
    after = yaml.safe_load(for_params(QWEN, on))["stages"]
    head = "python -m flows.k8s --params '${params_file}' --submit grpo -- -m tasks.grpo --params '${params_file}' "
    assert after["grpo"]["cmd"].startswith(head)
    assert after["grpo"]["cmd"].endswith(before["grpo"]["cmd"].partition(" -m tasks.grpo ")[2])
    assert after["sft"] == before["sft"] and after["grpo"]["outs"] == before["grpo"]["outs"]
    with pytest.raises(ConfigError, match="rdzv_endpoint is needed"):
        validate_params({"launch": {"nnodes": 2}})  # off the cluster, the endpoint is still the set's to give


def test_a_rehearsal_runs_here_not_on_the_cluster(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    raw = yaml.safe_load(Path(QWEN).read_text())
    raw.setdefault("launch", {})["kubernetes"] = {"enabled": True}
    mine = tmp_path / "k8s.yaml"
    mine.write_text(yaml.safe_dump(raw))
    assert smoke_params(str(mine), None)["launch"]["kubernetes"]["enabled"] is False


def test_the_nodes_get_the_flows_variables_and_its_events_file_only_in_the_shared_workspace(monkeypatch, tmp_path):
    template = k8s_manifests.load_template()
    template["variables"]["properties"]["workspace_path"]["default"] = str(tmp_path)
    environ = {"GRPOFLOW_PARENT_RUN_ID": "abc", EVENTS_ENV: "/x/e.jsonl", "GRPOFLOW_WORKSPACE": "/w", "HOME": "/root"}
    monkeypatch.chdir(tmp_path)
    assert k8s.forwarded_env(template, environ) == {"GRPOFLOW_PARENT_RUN_ID": "abc", EVENTS_ENV: "/x/e.jsonl"}
    monkeypatch.chdir(ROOT)
    assert k8s.forwarded_env(template, environ) == {"GRPOFLOW_PARENT_RUN_ID": "abc"}


# --- the Job on a fake cluster ---------------------------------------------------------------------


class _Response:
    def __init__(self, lines):
        self.chunks = [line.encode() + b"\n" for line in lines]
        self.released = False

    def stream(self, amt=None, decode_content=False):
        yield from self.chunks

    def release_conn(self):
        self.released = True


def _job(condition=None):
    conditions = (
        [{"type": condition[0], "status": "True", "reason": condition[1], "message": condition[2]}]
        if condition
        else None
    )
    return client.V1Job.model_validate(
        {"metadata": {"name": "j", "namespace": "ns"}, "status": {"conditions": conditions}}
    )


def _pod(index, phase="Running", state=None, scheduled=None):
    state = state or ({"running": {}} if phase == "Running" else {"terminated": {"exitCode": 0, "reason": "Completed"}})
    status = {
        "phase": phase,
        "containerStatuses": [
            {"name": "trainer", "ready": False, "restartCount": 0, "image": "i", "imageID": "", "state": state}
        ],
    }
    if scheduled:
        status = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduled}
            ],
        }
    meta = {"name": f"j-{index}-abcde", "annotations": {INDEX_ANNOTATION: str(index)}, "labels": {JOB_LABEL: "j"}}
    return client.V1Pod.model_validate({"metadata": meta, "status": status})


class FakeCluster:
    """BatchV1Api and CoreV1Api in one: each look at the Job returns the next of ``states``
    (a Job and its pods), the last one again after that."""

    def __init__(self, states, logs=None):
        self.states, self.logs, self.looks = states, logs or {}, 0
        self.created, self.deleted, self.selectors = [], [], []

    def create_namespaced_job(self, namespace, body):
        self.created.append(body)
        return client.V1Job.model_validate(
            {"metadata": {"name": body.metadata.name, "namespace": namespace, "uid": "u-1"}}
        )

    def create_namespaced_service(self, namespace, body):
        self.created.append(body)
        return body

    def read_namespaced_job_status(self, name, namespace):
        self.looks += 1
        return self.states[min(self.looks, len(self.states)) - 1][0]

    def list_namespaced_pod(self, namespace, label_selector):
        self.selectors.append(label_selector)
        return SimpleNamespace(items=self.states[min(self.looks, len(self.states)) - 1][1])

    def read_namespaced_pod_log(self, name, namespace, container, follow, _preload_content):
        assert follow is True and _preload_content is False and container == "trainer"
        return _Response(self.logs.get(name, []))

    def delete_namespaced_job(self, name, namespace, propagation_policy):
        self.deleted.append((name, namespace, propagation_policy))


def _run(cluster, qwen, sleep=lambda s: None):
    lines = []
    k8s_watch.run(cluster, cluster, _render(qwen, job="j"), lines.append, poll_s=5, sleep=sleep)
    return lines


def test_a_job_that_completes_streams_every_nodes_log_and_stays_for_its_ttl(qwen_on_two_nodes):
    pending = (_job(), [_pod(0, scheduled="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")])
    running = (_job(), [_pod(0), _pod(1)])
    done = (_job(("Complete", "Completed", "")), [_pod(0, "Succeeded"), _pod(1, "Succeeded")])
    logs = {"j-0-abcde": ["step 1/2", "step 2/2"], "j-1-abcde": ["worker up"]}
    cluster = FakeCluster([pending, pending, running, done], logs)
    lines = _run(cluster, qwen_on_two_nodes)
    assert [type(body).__name__ for body in cluster.created] == ["V1Job", "V1Service"]
    owner = cluster.created[1].metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid) == ("Job", "j", "u-1")  # the Service goes with its Job
    assert {"step 1/2", "step 2/2", "[node 1] worker up"} <= set(lines)
    assert lines.index("step 1/2") < lines.index("step 2/2")
    assert sum("waits for a node: 0/4 nodes are available" in line for line in lines) == 1  # said once
    assert lines[-1] == "job j completed" and cluster.deleted == []
    assert set(cluster.selectors) == {f"{JOB_LABEL}=j"}


def test_an_api_blip_is_waited_out_and_a_lasting_outage_fails_the_wait(qwen_on_two_nodes):
    class Flaky(FakeCluster):
        def __init__(self, states, failures):
            super().__init__(states)
            self.failures = failures

        def read_namespaced_job_status(self, name, namespace):
            if self.failures:
                self.failures -= 1
                raise client.ApiException(status=503, reason="Service Unavailable")
            return super().read_namespaced_job_status(name, namespace)

    done = (_job(("Complete", "Completed", "")), [_pod(0, "Succeeded")])
    blip = Flaky([done], failures=k8s_watch.API_ATTEMPTS - 1)
    lines = _run(blip, qwen_on_two_nodes)
    assert lines[-1] == "job j completed" and sum("failed to answer" in line for line in lines) == 1
    outage = Flaky([done], failures=k8s_watch.API_ATTEMPTS)
    with pytest.raises(client.ApiException):
        _run(outage, qwen_on_two_nodes)
    assert outage.deleted == [("j", "grpoflow", "Background")]  # gone unwatched: it would hold its GPUs

    class Down(Flaky):
        def delete_namespaced_job(self, name, namespace, propagation_policy):
            raise client.ApiException(status=503, reason="still down")

    lines = []
    with pytest.raises(client.ApiException, match="Service Unavailable"):  # the outage, not the failed clean-up
        down = Down([done], failures=k8s_watch.API_ATTEMPTS)
        k8s_watch.run(down, down, _render(qwen_on_two_nodes, job="j"), lines.append, poll_s=5, sleep=lambda s: None)
    assert lines[-1] == "could not delete job j (ApiException): kubectl delete job j -n grpoflow"


def test_a_failed_job_fails_with_its_reason_and_each_nodes_end(qwen_on_two_nodes):
    oom = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "a\nb\nc\nd\ne\nf\nCUDA out of memory"}}
    failed = (
        _job(("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")),
        [_pod(1, "Failed", oom), _pod(0, "Succeeded")],
    )
    cluster = FakeCluster([(_job(), [_pod(0), _pod(1)]), failed])
    with pytest.raises(k8s_watch.JobFailed) as caught:
        _run(cluster, qwen_on_two_nodes)
    message = str(caught.value)
    assert message.splitlines()[0] == "job j failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert "node 1 (pod j-1-abcde): trainer terminated: OOMKilled (exit 137)" in message
    assert "CUDA out of memory" in message and "\n    a" not in message  # the last lines of its log only
    assert "node 0" not in message and caught.value.finished
    assert cluster.deleted == []  # kept for kubectl; Kubernetes stopped its pods


def test_a_pod_that_cannot_start_fails_at_once_and_its_job_is_deleted(qwen_on_two_nodes):
    pull = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}}
    cluster = FakeCluster([(_job(), [_pod(0, "Pending", pull), _pod(1)])])
    with pytest.raises(k8s_watch.JobFailed, match=r"node 0 \(pod j-0-abcde\): trainer cannot start: ImagePullBackOff"):
        _run(cluster, qwen_on_two_nodes)
    assert cluster.deleted == [("j", "grpoflow", "Background")]


def test_an_interrupted_wait_deletes_the_job(qwen_on_two_nodes):
    def interrupt(seconds):
        raise KeyboardInterrupt

    cluster = FakeCluster([(_job(), [_pod(0), _pod(1)])])
    with pytest.raises(KeyboardInterrupt):
        _run(cluster, qwen_on_two_nodes, sleep=interrupt)
    assert cluster.deleted == [("j", "grpoflow", "Background")]


def test_the_stage_command_submits_and_exits_with_the_jobs_verdict(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    words = k8s_manifests.stage_words("grpo", QWEN)
    failed = (_job(("Failed", "DeadlineExceeded", "")), [_pod(0, "Failed", {"terminated": {"exitCode": 1}})])
    for states, code in (([(_job(("Complete", "", "")), [])], 0), ([failed], 1)):
        cluster = FakeCluster(states)
        monkeypatch.setattr(k8s, "_clients", lambda cluster=cluster: (cluster, cluster))
        assert k8s.main(["--params", QWEN, "--submit", "grpo", "--", *words]) == code
        job = cluster.created[0]
        assert job.spec.completions == 1 and job.metadata.name.startswith("grpoflow-grpo-gsm8k-qwen2-5-0-5b-")
    err = capsys.readouterr().err
    assert "failed: DeadlineExceeded" in err and "trainer terminated: Error (exit 1)" in err

    class Forbidden(FakeCluster):
        def create_namespaced_job(self, namespace, body):
            raise client.ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(k8s, "_clients", lambda: (Forbidden([]), Forbidden([])))
    assert k8s.main(["--params", QWEN, "--submit", "grpo", "--", *words]) == 1
    assert "the Kubernetes API answered 403 Forbidden" in capsys.readouterr().err


def test_a_flow_run_with_the_switch_on_sends_its_training_stages_to_the_cluster(monkeypatch):
    from flows.pipeline import run_edits

    monkeypatch.chdir(ROOT)
    assert "dvc.yaml" not in run_edits("params/default.yaml", None)  # off: the committed dvc.yaml, as today
    on = yaml.safe_load(run_edits("params/default.yaml", {"launch.kubernetes.enabled": True})["dvc.yaml"])["stages"]
    for name in ("grpo", "ppo"):
        assert on[name]["cmd"].startswith(f"python -m flows.k8s --params '${{params_file}}' --submit {name} -- ")
    assert on["sft"]["cmd"].startswith("python -m tasks.sft ")


CLUSTER = ROOT / "deploy" / "k8s" / "cluster.yaml"
JOB = ROOT / "deploy" / "k8s" / "pipeline-job.yaml"


def test_the_cluster_manifests_are_valid_objects_whose_shared_names_agree():
    """#51: `kubectl apply -f deploy/k8s/cluster.yaml` (then pipeline-job.yaml) on an empty cluster brings
    up what the work pool's Jobs expect: each object read by the kubernetes client's model of its kind (an
    unknown field or a value it would not send back is an error), and every name one object gives another
    defined here."""
    import json

    docs = [d for path in (CLUSTER, JOB) for d in yaml.safe_load_all(path.read_text()) if d]
    # The Job is applied on its own, once the checkout is on the volume: with the rest it would start at once.
    assert [d["kind"] for d in yaml.safe_load_all(JOB.read_text()) if d] == ["Job"]
    assert "Job" not in {d["kind"] for d in yaml.safe_load_all(CLUSTER.read_text()) if d}
    models = [k8s_manifests.validate(d) for d in docs]
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    assert len(models) == len(docs) and set(by_kind) == {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "Job",
    }
    (namespace,) = by_kind["Namespace"]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {namespace}
    template = json.loads((ROOT / "deploy" / "k8s" / "base-job-template.json").read_text())
    defaults = k8s_manifests.template_defaults(template)
    assert defaults["namespace"] == namespace and defaults["service_account_name"] in by_kind["ServiceAccount"]
    assert defaults["shared_volume_claim"] in by_kind["PersistentVolumeClaim"]
    pods = [d["spec"]["template"]["spec"] for kind in ("Job", "Deployment") for d in by_kind[kind].values()]
    for pod in pods:
        assert pod["serviceAccountName"] in by_kind["ServiceAccount"]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert claims == {defaults["shared_volume_claim"]}
        assert {c["image"] for c in pod["containers"]} == {defaults["image"]}
    # MLflow keeps its store on the volume, at the address the template gives every Job.
    (mlflow,) = by_kind["Deployment"].values()
    service = by_kind["Service"]["mlflow"]
    assert service["spec"]["selector"].items() <= mlflow["spec"]["template"]["metadata"]["labels"].items()
    uri = defaults["env"]["MLFLOW_TRACKING_URI"]
    assert uri == f"http://{service['metadata']['name']}.{namespace}.svc:{service['spec']['ports'][0]['port']}"
    args = mlflow["spec"]["template"]["spec"]["containers"][0]["command"]
    mount = mlflow["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    stores = [a.removeprefix("sqlite:///") for a in args if "/mlflow" in a]
    assert len(stores) == 2 and all(path.startswith(mount + "/") for path in stores), stores
    # One working directory for the image, the template's Jobs and this Job.
    (job,) = by_kind["Job"].values()
    workdir = job["spec"]["template"]["spec"]["containers"][0]["workingDir"]
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert workdir == defaults["workspace_path"] == defaults["env"]["GRPOFLOW_WORKSPACE"]
    assert dockerfile.rstrip().splitlines()[-2] == f"WORKDIR {workdir}"
    # The service account may do what the worker and a launching pipeline pod do.
    binding = by_kind["RoleBinding"]["grpoflow-worker"]
    role = by_kind["Role"][binding["roleRef"]["name"]]
    assert binding["subjects"][0]["name"] == defaults["service_account_name"]
    granted = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    needed = {
        (g, r, v)
        for rule in k8s_manifests.FLOW_RULES
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert needed <= granted, needed - granted
