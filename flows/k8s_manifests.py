"""The Kubernetes objects of a launched stage: an indexed Job (one pod per node) and the headless
Service its pods meet behind, rendered from the set's ``launch`` section and the work pool's own
template (deploy/k8s/base-job-template.json: image, shared volume, ``/dev/shm``, node selector,
tolerations, environment), so that the pods the flow runs in and the pods a stage trains in agree.

Every node runs the same torchrun command. The Job's pods are named ``<job>-<index>`` and sit in the
Service's subdomain, so pod 0 has a stable DNS name before any pod is ready: it hosts c10d's
rendezvous store (``is_host`` from ``JOB_COMPLETION_INDEX``), the others dial it; the rendezvous then
numbers the nodes by their sorted host names, which is the index order up to 10 nodes.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

from kubernetes import client
from prefect.utilities.templating import apply_values

from grpoflow.config import Params
from tasks.stages import PARAMS_VAR, stage

TEMPLATE = Path(__file__).resolve().parents[1] / "deploy" / "k8s" / "base-job-template.json"
JOB_LABEL = "grpoflow/job"  # on the pods: the Service's selector, and how the flow finds them
STAGE_LABEL = "grpoflow/stage"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTAINER = "trainer"
GPU = "nvidia.com/gpu"
# A pod's host name is <job>-<index>, a DNS label of 63 characters at most.
MAX_JOB_NAME = 52
MODELS: dict[str, type[Any]] = {
    "Job": client.V1Job,
    "Service": client.V1Service,
    "Role": client.V1Role,
    "RoleBinding": client.V1RoleBinding,
    # and what deploy/k8s/cluster.yaml brings up besides
    "Namespace": client.V1Namespace,
    "ServiceAccount": client.V1ServiceAccount,
    "PersistentVolumeClaim": client.V1PersistentVolumeClaim,
    "Deployment": client.V1Deployment,
}
# What the flow's pod does with the API (flows/k8s_watch.py), and nothing more.
FLOW_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs", "jobs/status"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]


def load_template(path: Path = TEMPLATE) -> dict:
    """The work pool's base job template."""
    return json.loads(path.read_text())


def template_defaults(template: dict) -> dict[str, Any]:
    """The template's variables at their defaults."""
    return {name: spec.get("default") for name, spec in template["variables"]["properties"].items()}


def job_name(experiment: str, stage_name: str, suffix: str = "") -> str:
    """``grpoflow-<stage>-<experiment>[-<suffix>]`` as a DNS label short enough for its pods' host names."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"grpoflow-{stage_name}-{experiment}".lower()).strip("-")
    tail = f"-{suffix}" if suffix else ""
    return base[: MAX_JOB_NAME - len(tail)].rstrip("-") + tail


def stage_words(stage_name: str, params_file: str) -> list[str]:
    """What every node runs after torchrun's options: ``-m tasks.<stage> --params <file> ...``, as dvc.yaml says."""
    words = shlex.split(stage(stage_name).command())[1:]  # without the leading `python`
    return [params_file if word == PARAMS_VAR else word for word in words]


def rendezvous_endpoint(job: str, namespace: str, port: int) -> str:
    """Pod 0's stable DNS name (host name ``<job>-0`` in the Service's subdomain) and the rendezvous port."""
    return f"{job}-0.{job}.{namespace}.svc:{port}"


def node_script(params: Params, nodes: int, job: str, words: list[str]) -> str:
    """The shell line every pod runs: torchrun with the set's options for ``nodes`` nodes, pod 0's
    address as c10d's endpoint, pod 0 alone hosting the store, then ``words``."""
    launch = params.launch
    k8s = launch.kubernetes
    c10d = launch.rdzv_backend == "c10d"
    endpoint = rendezvous_endpoint(job, k8s.namespace, k8s.rdzv_port) if c10d else launch.rdzv_endpoint
    on_cluster = launch.model_copy(update={"nnodes": nodes, "rdzv_endpoint": endpoint, "rdzv_id": job})
    torchrun = " ".join(shlex.quote(word) for word in on_cluster.torchrun_args(job))
    # Nodes start minutes apart (scheduling, image pulls): the first to start waits for pod 0's store too.
    conf = f"join_timeout={k8s.rdzv_timeout_s}"
    if c10d:
        conf += f",read_timeout={k8s.rdzv_timeout_s},is_host=$host"
    host = 'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then host=1; else host=0; fi; '
    return f'{host}exec {torchrun} --rdzv_conf "{conf}" {" ".join(shlex.quote(word) for word in words)}'


def _values(params: Params, template: dict) -> dict[str, Any]:
    """The template's variables for a node's pod: its defaults, with the set's ``launch.kubernetes``."""
    k8s = params.launch.kubernetes
    defaults = template_defaults(template)
    return {
        **defaults,
        "name": "grpoflow",
        "namespace": k8s.namespace,
        "image": k8s.image,
        "service_account_name": k8s.service_account,
        "shared_volume_claim": k8s.volume_claim,
        "shm_size": k8s.shm_size,
        "cpu": k8s.cpu,
        "memory": k8s.memory,
        "gpus": str(params.launch.nproc_per_node),  # a quantity: one GPU per process
        "node_selector": {**(defaults.get("node_selector") or {}), **k8s.node_selector},
        "command": None,
    }


def _without_nulls(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_without_nulls(v) for v in node]
    return node


def _environment(values: dict[str, Any], env: dict[str, str]) -> list[dict]:
    """The template's environment and ``env`` as a container's list, with the pod's index from its annotation."""
    merged = {**(values.get("env") or {}), **env}
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    return [
        *({"name": k, "value": str(v)} for k, v in merged.items() if v is not None),
        {"name": "JOB_COMPLETION_INDEX", "valueFrom": index},
    ]


def job_manifest(
    params: Params, stage_name: str, nodes: int, job: str, words: list[str], env: dict[str, str], template: dict
) -> dict:
    """The indexed Job: ``nodes`` pods at once, each with ``nproc_per_node`` GPUs, the shared volume
    and ``/dev/shm``, running :func:`node_script`; no retry of a failed pod (torchrun's
    ``max_restarts`` restarts the workers, a retry of the flow's stage resumes from the checkpoint)."""
    values = _values(params, template)
    manifest = _without_nulls(apply_values(copy.deepcopy(template["job_configuration"]["job_manifest"]), values))
    labels = {**(values.get("labels") or {}), JOB_LABEL: job, STAGE_LABEL: stage_name}
    manifest["metadata"] = {"name": job, "namespace": params.launch.kubernetes.namespace, "labels": labels}
    spec = manifest["spec"]
    spec.update(completionMode="Indexed", completions=nodes, parallelism=nodes)
    pod = spec["template"]
    pod["metadata"] = {"labels": dict(labels)}  # a copy: YAML would write an alias
    pod["spec"]["subdomain"] = job
    (container,) = pod["spec"]["containers"]
    container.pop("args", None)
    container.update(
        name=CONTAINER,
        command=["/bin/sh", "-c", node_script(params, nodes, job, words)],
        env=_environment(values, env),
        ports=[{"name": "rdzv", "containerPort": params.launch.kubernetes.rdzv_port}],
        # A failed pod's last log lines become its termination message: the flow's failure names them.
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    return manifest


def service_manifest(params: Params, stage_name: str, job: str) -> dict:
    """The headless Service that gives the Job's pods their DNS names, before they are ready."""
    k8s = params.launch.kubernetes
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": job, "namespace": k8s.namespace, "labels": {JOB_LABEL: job, STAGE_LABEL: stage_name}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_LABEL: job},
            "ports": [{"name": "rdzv", "port": k8s.rdzv_port, "targetPort": k8s.rdzv_port}],
        },
    }


def rbac_manifests(params: Params, template: dict | None = None) -> list[dict]:
    """The Role that lets the flow's pods (the work pool's service account) submit, watch and delete
    the stages' Jobs, and its RoleBinding, in ``launch.kubernetes.namespace``; each schema-checked."""
    namespace = params.launch.kubernetes.namespace
    pool = template_defaults(template or load_template())  # the flow's pod runs as the pool's account
    meta = {"name": "grpoflow-stage-jobs", "namespace": namespace}
    manifests = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta), "rules": FLOW_RULES},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
            "subjects": [
                {"kind": "ServiceAccount", "name": pool["service_account_name"], "namespace": pool["namespace"]}
            ],
        },
    ]
    for manifest in manifests:
        validate(manifest)
    return manifests


def render(
    params: Params,
    params_file: str,
    stage_name: str,
    nodes: int,
    job: str,
    words: list[str] | None = None,
    env: dict[str, str] | None = None,
    template: dict | None = None,
) -> list[dict]:
    """The Service and the Job of ``stage_name`` on ``nodes`` nodes, each checked against the API schema."""
    words = words if words is not None else stage_words(stage_name, params_file)
    manifests = [
        service_manifest(params, stage_name, job),
        job_manifest(params, stage_name, nodes, job, words, env or {}, template or load_template()),
    ]
    for manifest in manifests:
        validate(manifest)
    return manifests


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path.lstrip('.')}: {a!r} became {b!r}"


def validate(manifest: dict) -> Any:
    """``manifest`` as the kubernetes client's model of its kind, which rejects an unknown field or a
    wrong type (ValueError); a value the model would not send back as written is an error too."""
    kind = manifest.get("kind")
    if kind not in MODELS:
        raise ValueError(f"a manifest of kind {kind!r}: expected one of {sorted(MODELS)}")
    try:
        model = MODELS[kind].model_validate(manifest)
    except Exception as exc:  # pydantic's ValidationError, one line per bad field
        raise ValueError(f"{kind} {manifest.get('metadata', {}).get('name')}: {exc}") from None
    sent = client.ApiClient().sanitize_for_serialization(model)
    if sent != manifest:
        raise ValueError(f"{kind}: {_first_difference(manifest, sent)}")
    return model
