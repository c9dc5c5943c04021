"""A set's launched stages on a Kubernetes cluster: one indexed Job per stage (a pod per node, each
with ``launch.nproc_per_node`` GPUs, the shared volume and ``/dev/shm``) and a headless Service for
the c10d rendezvous, from the set's ``launch`` section and the work-pool template.

    python -m flows.k8s --params params/gsm8k-qwen2.5-0.5b.yaml --nodes 2 --out k8s/   # render: kubectl apply -f k8s/

With ``launch.kubernetes.enabled``, the generated dvc.yaml runs each launched stage as
``python -m flows.k8s --params <set> --submit <stage> -- -m tasks.<stage> ...``: the flow's pod (or
``dvc repro`` anywhere with cluster credentials) submits the stage's Job, streams its nodes' logs,
and exits with its reason when it fails; DVC records the outputs the nodes wrote to the shared volume.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, NoReturn

import yaml
from kubernetes.client import ApiException

from flows import k8s_manifests, k8s_watch
from grpoflow.config import ConfigError, Params, load_params
from grpoflow.config.launch import DISTRIBUTED_STAGES
from grpoflow.guard import InputError, check_params_file
from tasks.cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED, command_parser
from tasks.events import EVENTS_ENV

_PRINT = threading.Lock()  # the nodes' log streams print from threads of their own


def emit(line: str) -> None:
    """One line to stdout at once (the flow streams it into the Prefect log)."""
    with _PRINT:
        print(line, flush=True)


def cluster_params(params_file: str, nodes: int | None) -> Params:
    """The set as the cluster runs it: ``nodes`` nodes (None: the set's ``launch.nnodes``), pod 0 the
    rendezvous; the batch arithmetic is checked against that world size."""
    overrides: dict[str, Any] = {"launch.kubernetes.enabled": True}
    if nodes is not None:
        overrides["launch.nnodes"] = nodes
    return load_params(check_params_file(params_file), overrides)


def forwarded_env(template: dict, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The flow's GRPOFLOW_* variables (its MLflow parent run, its flow run, its events file) for the
    nodes; the events file only where this process runs in the workspace the pods mount."""
    environ = dict(os.environ if environ is None else environ)
    workspace = Path(k8s_manifests.template_defaults(template)["workspace_path"])
    env = {k: v for k, v in environ.items() if k.startswith("GRPOFLOW_") and k != "GRPOFLOW_WORKSPACE"}
    if Path.cwd().resolve() != workspace.resolve():  # its path would not exist on the nodes
        env.pop(EVENTS_ENV, None)
    return env


def render_files(params_file: str, nodes: int | None, stages: list[str] | None, out: Path | None) -> list[str]:
    """Each launched stage's Service and Job, and the flow's Role to submit them (``rbac``), as YAML
    files under ``out`` (or on stdout); their paths."""
    params = cluster_params(params_file, nodes)
    files = {"rbac": k8s_manifests.rbac_manifests(params)}  # once per namespace: the flow's right to submit
    for stage_name in stages or params.launch.stages:
        job = k8s_manifests.job_name(params.experiment.name, stage_name)
        files[stage_name] = k8s_manifests.render(params, params_file, stage_name, params.launch.nnodes, job)
    written = []
    for name, manifests in files.items():
        text = yaml.safe_dump_all(manifests, sort_keys=False, width=120)
        if out is None:
            print(f"---\n# {name}\n{text}", end="")
            continue
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{name}.yaml"
        path.write_text(f"# {name} of {params_file}: python -m flows.k8s (kubectl apply -f {path})\n{text}")
        written.append(str(path))
    return written


def _clients() -> tuple[Any, Any]:
    """BatchV1Api and CoreV1Api: in a pod, its service account; elsewhere, the kubeconfig's context."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.BatchV1Api(), client.CoreV1Api()


def submit_stage(params_file: str, stage_name: str, words: list[str]) -> None:
    """Submit ``stage_name``'s Job running ``words`` under torchrun on every node, and wait for it."""
    params = cluster_params(params_file, None)
    job = k8s_manifests.job_name(params.experiment.name, stage_name, uuid.uuid4().hex[:6])
    template = k8s_manifests.load_template()
    manifests = k8s_manifests.render(
        params, params_file, stage_name, params.launch.nnodes, job, words, forwarded_env(template), template
    )
    batch, core = _clients()
    k8s_watch.run(batch, core, manifests, emit, params.launch.kubernetes.poll_s)


def _stop(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt  # the flow stopping the stage: the Job is deleted on the way out


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("flows.k8s", __doc__)
    parser.add_argument("--params", required=True, help="the parameter set (params/*.yaml)")
    parser.add_argument("--nodes", type=int, default=None, help="nodes (default: the set's launch.nnodes)")
    parser.add_argument(
        "--stages",
        nargs="*",
        default=None,
        choices=DISTRIBUTED_STAGES,
        help="stages to render (default: launch.stages)",
    )
    parser.add_argument("--out", type=Path, default=None, help="directory for <stage>.yaml (default: stdout)")
    parser.add_argument(
        "--submit", metavar="STAGE", default=None, choices=DISTRIBUTED_STAGES, help="submit STAGE's Job and wait for it"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="with --submit: -- -m tasks.<stage> ...")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if args.submit is None:
            for path in render_files(args.params, args.nodes, args.stages, args.out):
                print(f"wrote {path}", file=sys.stderr)
            return 0
        if args.nodes is not None or not words:
            raise ConfigError("--submit STAGE takes the set's launch.nnodes and the stage's command after --")
        signal.signal(signal.SIGTERM, _stop)
        submit_stage(args.params, args.submit, words)
    except (ConfigError, InputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except k8s_watch.JobFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ApiException as exc:  # e.g. 403: the flow's service account lacks rbac.yaml's rights
        print(
            f"error: the Kubernetes API answered {exc.status} {exc.reason}: {str(exc.body or '')[:500]}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("interrupted: a Job submitted was deleted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
