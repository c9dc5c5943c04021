"""The ``launch`` section: how many processes run each distributed stage, in torchrun's own words.

One process (the default) runs a stage as ``python -m tasks.<stage>``, exactly as before the
section existed; more than one makes the generated dvc.yaml (tasks/stages.py) put ``torchrun``
with these options in front of the stages named in ``stages``, so ``dvc repro``, the Prefect flow
and the deployments all launch them the same way. The same command runs on every node: the
dynamic rendezvous backends hand out node ranks themselves (torchrun's ``static`` backend, which
needs a ``--node_rank`` per node, is therefore not offered).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from grpoflow import catalog
from grpoflow.config.base import AlgorithmName, _Section

# The stages whose CLI runs under torch.distributed: each process trains on its shard of the prompts
# and only rank 0 writes (tasks/rl_stage.py). sft, reward_model and evaluate run one process: every
# rank would train or score the same data and write the same outputs. They are the catalog's
# algorithms (grpoflow.catalog), as the catalog was when this module was imported.
DISTRIBUTED_STAGES: tuple[str, ...] = tuple(catalog.names())
# A free port on this host, as torchrun --standalone picks: one node never collides with another run.
LOCAL_ENDPOINT = "localhost:0"
LOCAL_HOSTS = ("127.0.0.1", "localhost")
# Words DVC and the shell pass through as they are (no ${...} interpolation, no quoting surprises).
_ENDPOINT = re.compile(r"[A-Za-z0-9._-]+:[0-9]{1,5}")
_RUN_ID = re.compile(r"[A-Za-z0-9._-]+")
# Kubernetes' spellings: a DNS-1123 name (namespace, service account, claim), a resource quantity.
_K8S_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"


class KubernetesConfig(_Section):
    """The cluster side of the launch: the indexed Job (one pod per node) and headless Service that
    ``python -m flows.k8s`` renders from this section and the work-pool template
    (deploy/k8s/base-job-template.json), and that a flow run submits for each launched stage when
    ``enabled``. The defaults are the template's."""

    enabled: bool = Field(
        False,
        description="Run the launched stages as a Job on the cluster, submitted and watched by the flow's pod "
        "(false: on the flow's own machine, as dvc.yaml's torchrun command).",
    )
    namespace: str = Field("grpoflow", pattern=_K8S_NAME, description="Namespace of the Job and its Service.")
    image: str = Field(
        "ghcr.io/grpoflow/grpoflow:cuda13",
        pattern=r"^\S+$",
        description="Image of every node: CUDA torch, DeepSpeed, vLLM (the code is read from the shared volume).",
    )
    service_account: str = Field("grpoflow", pattern=_K8S_NAME, description="Service account of the nodes' pods.")
    volume_claim: str = Field(
        "grpoflow-shared",
        pattern=_K8S_NAME,
        description="ReadWriteMany PersistentVolumeClaim with the checkout, DVC cache, data, models and checkpoints.",
    )
    shm_size: str = Field("16Gi", pattern=_QUANTITY, description="Size of /dev/shm (a memory emptyDir) on each node.")
    cpu: str = Field("8", pattern=_QUANTITY, description="CPU request of each node's pod.")
    memory: str = Field("64Gi", pattern=_QUANTITY, description="Memory request and limit of each node's pod.")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Labels the nodes must have, over the template's (e.g. nvidia.com/gpu.product).",
    )
    rdzv_port: int = Field(29500, ge=1, le=65535, description="Port of the c10d rendezvous on the first pod.")
    rdzv_timeout_s: int = Field(
        1800, ge=60, description="Seconds the nodes wait for each other (pods start apart: scheduling, image pulls)."
    )
    poll_s: float = Field(10.0, gt=0, description="Seconds between the flow's looks at the Job's state.")


class LaunchConfig(_Section):
    """Processes per node and nodes for the distributed stages, with torchrun's option names."""

    nproc_per_node: int = Field(1, ge=1, description="Processes per node (one per GPU on a GPU node).")
    nnodes: int = Field(1, ge=1, description="Nodes the stage runs on; each runs the same torchrun command.")
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] = Field(
        "c10d", description="torchrun's rendezvous backend (c10d: a TCP store hosted by the first agent)."
    )
    rdzv_endpoint: str | None = Field(
        None,
        description="host:port of the rendezvous, the same on every node (null: a free local port, one node only).",
        examples=["127.0.0.1:29500"],
    )
    rdzv_id: str | None = Field(
        None,
        description="The job's rendezvous id, the same on every node (null: the set's experiment.name).",
        examples=["gsm8k-qwen-run-7"],
    )
    max_restarts: int = Field(0, ge=0, description="Times torchrun restarts the worker group after a failure.")
    local_nodes: bool = Field(
        False,
        description="Start all nnodes agents on this machine, each a node (a multi-node rehearsal on one host: "
        "python -m flows.local_nodes; the rendezvous on 127.0.0.1).",
    )
    stages: list[AlgorithmName] = Field(
        default_factory=catalog.names,
        description="The stages launched this way (the training stages; the others run one process).",
    )
    kubernetes: KubernetesConfig = Field(
        default_factory=KubernetesConfig, description="The Job that runs the launched stages on a cluster."
    )

    @property
    def world_size(self) -> int:
        """Processes in all: ``nproc_per_node`` x ``nnodes``."""
        return self.nproc_per_node * self.nnodes

    @model_validator(mode="after")
    def _rendezvous(self) -> LaunchConfig:
        if self.rdzv_endpoint is not None and not _ENDPOINT.fullmatch(self.rdzv_endpoint):
            raise ValueError(f"rdzv_endpoint {self.rdzv_endpoint!r}: expected host:port (letters, digits, . - _)")
        if self.rdzv_id is not None and not _RUN_ID.fullmatch(self.rdzv_id):
            raise ValueError(f"rdzv_id {self.rdzv_id!r}: use letters, digits and . - _")
        if self.local_nodes:
            self._check_local_nodes()
        # On the cluster the first pod hosts c10d's rendezvous (flows/k8s.py names it); etcd is elsewhere.
        # Local nodes meet on a port of this host that flows/local_nodes.py picks.
        on_cluster = self.kubernetes.enabled and self.rdzv_backend == "c10d"
        named_for_them = on_cluster or self.local_nodes
        if self.rdzv_endpoint is None and not named_for_them and (self.nnodes > 1 or self.rdzv_backend != "c10d"):
            raise ValueError(
                f"rdzv_endpoint is needed for nnodes={self.nnodes} with rdzv_backend={self.rdzv_backend!r}: "
                "the host:port every node meets at (e.g. the first node's address and a free port)"
            )
        if len(set(self.stages)) != len(self.stages):
            raise ValueError(f"stages listed twice: {self.stages}")
        return self

    def _check_local_nodes(self) -> None:
        """Agents on one host: c10d's store on that host, never a cluster's Job."""
        if self.kubernetes.enabled:
            raise ValueError("local_nodes runs every node on this machine: it excludes kubernetes.enabled")
        if self.rdzv_backend != "c10d":
            raise ValueError(
                f"local_nodes needs rdzv_backend c10d (the first agent hosts it), not {self.rdzv_backend!r}"
            )
        host = (self.rdzv_endpoint or LOCAL_ENDPOINT).rpartition(":")[0]
        if host not in LOCAL_HOSTS:
            raise ValueError(f"local_nodes meets on this machine: rdzv_endpoint's host must be one of {LOCAL_HOSTS}")

    def torchrun_args(self, run_id: str) -> list[str]:
        """torchrun and its options, the words before ``-m <module>``; ``run_id`` (its characters beyond
        letters, digits and ``. - _`` as ``-``) stands in for a null ``rdzv_id``."""
        return [
            "torchrun",
            "--nproc_per_node",
            str(self.nproc_per_node),
            "--nnodes",
            str(self.nnodes),
            "--rdzv_backend",
            self.rdzv_backend,
            "--rdzv_endpoint",
            self.rdzv_endpoint or LOCAL_ENDPOINT,
            "--rdzv_id",
            self.rdzv_id or re.sub(r"[^A-Za-z0-9._-]", "-", run_id),
            "--max_restarts",
            str(self.max_restarts),
        ]
