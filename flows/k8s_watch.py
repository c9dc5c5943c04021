"""A launched stage's Job on the cluster: submitted with the kubernetes client (BatchV1Api,
CoreV1Api), watched until it completes or fails, every node's log streamed as it is written.

A failure says why in one message: the Job's failed condition (its reason and message) and, per
node, how its container ended (``OOMKilled``, ``Error`` with its exit code and last log lines) or
why it never started (an image that cannot be pulled, a missing secret). A pod that cannot start
fails the stage at once, rather than holding its GPUs until someone looks; a pod the scheduler
cannot place yet is said once and waited for (a cluster autoscaler may add the node).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from flows.k8s_manifests import CONTAINER, INDEX_ANNOTATION, JOB_LABEL
from flows.node_lines import node_prefix

# A container waiting for one of these never starts by itself.
CANNOT_START = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}
LOG_JOIN_S = 30.0  # for the log streams to deliver a finished pod's last lines
# Looks at the Job that may fail in a row (an API server restarting, a dropped connection) before the
# wait gives up, poll_s apart (5 minutes at the default 10 s): a blip must not cost a training run, and
# a Job left running unwatched would meet its own retry on the same checkpoints.
API_ATTEMPTS = 30
MESSAGE_LINES = 5  # of a failed container's termination message (its last log lines)


class JobFailed(RuntimeError):
    """The stage's Job failed, or one of its pods cannot start; the message says why, per node.
    ``finished``: the Job itself ended (Kubernetes stopped its pods); else it is still there."""

    def __init__(self, message: str, finished: bool):
        super().__init__(message)
        self.finished = finished


def node_index(pod: Any) -> str:
    """The pod's completion index (its node), from the Job controller's annotation."""
    return (pod.metadata.annotations or {}).get(INDEX_ANNOTATION, "?")


def job_state(job: Any) -> tuple[str | None, str]:
    """``("Complete" | "Failed" | None, "<reason>: <message>")`` from the Job's conditions."""
    for condition in (job.status and job.status.conditions) or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.type, ": ".join(p for p in (condition.reason, condition.message) if p)
    return None, ""


def _statuses(pod: Any) -> list[Any]:
    return list((pod.status and pod.status.container_statuses) or [])


def pod_problem(pod: Any) -> str | None:
    """How the pod's container failed or why it cannot start; None while it runs or once it succeeded."""
    where = f"node {node_index(pod)} (pod {pod.metadata.name})"
    for status in _statuses(pod):
        state = status.state
        if state and state.terminated and state.terminated.exit_code != 0:
            ended = state.terminated
            lines = (ended.message or "").strip().splitlines()[-MESSAGE_LINES:]
            tail = "".join(f"\n    {line}" for line in lines)
            return f"{where}: {status.name} terminated: {ended.reason or 'Error'} (exit {ended.exit_code}){tail}"
        if state and state.waiting and state.waiting.reason in CANNOT_START:
            return f"{where}: {status.name} cannot start: {state.waiting.reason}: {state.waiting.message or ''}".rstrip(
                ": "
            )
    return None


def unschedulable(pod: Any) -> str | None:
    """The scheduler's word on a pod it cannot place yet (None: placed, or no word)."""
    for condition in (pod.status and pod.status.conditions) or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return f"node {node_index(pod)} (pod {pod.metadata.name}) waits for a node: {condition.message}"
    return None


def failure_message(job: str, reason: str, pods: Iterable[Any]) -> str:
    """The Job's reason and each node's problem, one per line."""
    problems = [p for p in map(pod_problem, sorted(pods, key=node_index)) if p]
    return "\n".join([f"job {job} failed: {reason or 'no reason given'}", *problems])


class LogStreams:
    """One thread per pod following its log (``follow=True``), each line handed to ``emit``; node 0's
    lines as they are, the other nodes' behind ``[node i]``."""

    def __init__(self, core: Any, namespace: str, emit: Callable[[str], None]):
        self.core, self.namespace, self.emit = core, namespace, emit
        self.threads: dict[str, threading.Thread] = {}

    def follow(self, pods: Iterable[Any]) -> None:
        """Start following each pod whose container has started (running or ended) and is not followed yet."""
        for pod in pods:
            name = pod.metadata.name
            started = any(s.state and (s.state.running or s.state.terminated) for s in _statuses(pod))
            if name in self.threads or not started:
                continue
            index = node_index(pod)
            args = (name, node_prefix(index))
            thread = threading.Thread(target=self._stream, args=args, name=f"log-{name}", daemon=True)
            self.threads[name] = thread
            thread.start()

    def _stream(self, pod: str, prefix: str) -> None:
        try:
            response = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=CONTAINER, follow=True, _preload_content=False
            )
            try:
                for line in iter_resp_lines(response):
                    self.emit(prefix + line)
            finally:
                response.release_conn()
        except Exception as exc:  # a lost stream loses lines, not the stage: the Job's state decides
            self.emit(f"{prefix}(the log stream of pod {pod} stopped: {type(exc).__name__}: {exc})")

    def join(self, timeout_s: float = LOG_JOIN_S) -> None:
        """Wait (up to ``timeout_s`` each) for the streams of ended pods to deliver their last lines."""
        for thread in self.threads.values():
            thread.join(timeout=timeout_s)


def submit(batch: Any, core: Any, service: dict, job: dict) -> Any:
    """Create the Job, then its Service owned by it (deleted with it); the created Job."""
    namespace = job["metadata"]["namespace"]
    created = batch.create_namespaced_job(namespace, body=client.V1Job.model_validate(job))
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": created.metadata.name, "uid": created.metadata.uid}
    owned = {**service, "metadata": {**service["metadata"], "ownerReferences": [owner]}}
    core.create_namespaced_service(namespace, body=client.V1Service.model_validate(owned))
    return created


def wait(
    batch: Any,
    core: Any,
    namespace: str,
    name: str,
    emit: Callable[[str], None],
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return when Job ``name`` completes, streaming its pods' logs; raise :class:`JobFailed` when it
    fails or a pod cannot start."""
    streams = LogStreams(core, namespace, emit)
    said: set[str] = set()
    try:
        while True:
            job, pods = _look(batch, core, namespace, name, emit, poll_s, sleep)
            streams.follow(pods)
            state, reason = job_state(job)
            if state == "Complete":
                return
            if state == "Failed":
                raise JobFailed(failure_message(name, reason, pods), finished=True)
            if any(p.status and p.status.phase == "Pending" and pod_problem(p) for p in pods):
                raise JobFailed(failure_message(name, "a pod cannot start", pods), finished=False)
            for note in filter(None, map(unschedulable, pods)):
                if note not in said:
                    emit(note)
                    said.add(note)
            sleep(poll_s)
    finally:
        streams.join()


def _look(
    batch: Any, core: Any, namespace: str, name: str, emit: Callable[[str], None], poll_s: float, sleep: Callable
) -> tuple[Any, list[Any]]:
    """The Job and its pods, asking again (``poll_s`` apart) when the API fails, :data:`API_ATTEMPTS` times in all."""
    for attempt in range(1, API_ATTEMPTS + 1):
        try:
            job = batch.read_namespaced_job_status(name, namespace)
            return job, core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items
        except (client.ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            if attempt == API_ATTEMPTS:
                raise
            if attempt == 1:
                said = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
                emit(f"(the Kubernetes API failed to answer, {said}; asking again, {API_ATTEMPTS} times at most)")
            sleep(poll_s)
    raise AssertionError("unreachable")


def delete(batch: Any, namespace: str, name: str) -> None:
    """Delete the Job, its pods and its Service (which it owns)."""
    batch.delete_namespaced_job(name, namespace, propagation_policy="Background")


def run(
    batch: Any,
    core: Any,
    manifests: list[dict],
    emit: Callable[[str], None],
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Submit the Service and Job, wait for the Job, and delete it when the wait ends before the Job
    did (a pod that cannot start, an interrupted flow), so that it holds no GPUs; a finished Job is
    kept for ``kubectl`` until its TTL."""
    service, job = manifests
    created = submit(batch, core, service, job)
    namespace, name = created.metadata.namespace or job["metadata"]["namespace"], created.metadata.name
    emit(f"submitted job {name} in namespace {namespace}: {job['spec']['completions']} node(s)")
    finished = False
    try:
        wait(batch, core, namespace, name, emit, poll_s, sleep)
        finished = True
        emit(f"job {name} completed")
    except JobFailed as exc:
        finished = exc.finished
        raise
    finally:
        if not finished:
            emit(f"deleting job {name}")
            try:
                delete(batch, namespace, name)
            except (
                client.ApiException,
                OSError,
                urllib3.exceptions.HTTPError,
            ) as exc:  # the first error is the one to see
                emit(f"could not delete job {name} ({type(exc).__name__}): kubectl delete job {name} -n {namespace}")
