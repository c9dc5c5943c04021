"""The sandbox's settings (the ``sandbox`` section of params): pydantic only, so the params schema
reads them without importing the sandbox itself; :mod:`verifiers.sandbox` re-exports :class:`Limits`."""

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """Every setting of the sandbox: the limits of one check, the batch's parallelism, the fallback policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_seconds: float = Field(5.0, gt=0, description="Wall-clock limit for one completion's code and tests.")
    cpu_seconds: int = Field(5, ge=1, description="CPU-time rlimit of each sandboxed process.")
    memory_mb: int = Field(512, ge=64, description="Address-space rlimit of each sandboxed process.")
    total_memory_mb: int = Field(
        1024,
        ge=64,
        description="Memory of all of one check's processes together, swap excluded (a cgroup per check, where "
        "one can be made; else only memory_mb per process x max_processes bounds it).",
    )
    cpus: float = Field(
        1.0,
        gt=0,
        description="CPU time per wall-clock second for all of one check's processes together (its cgroup's quota; "
        "unbounded where no cpu cgroup can be made).",
    )
    max_processes: int = Field(32, ge=1, description="Processes the code may run at once (stops fork bombs).")
    max_file_mb: int = Field(16, ge=1, description="Largest file a sandboxed process may write.")
    max_open_files: int = Field(64, ge=16, description="Open-file rlimit of each sandboxed process.")
    tmpfs_mb: int = Field(64, ge=1, description="Size of each private tmpfs (/tmp, /var/tmp, /dev/shm, ...).")
    max_output_kb: int = Field(1024, ge=1, description="Output read from the code; beyond it its stdout is closed.")
    workers: int = Field(2, ge=1, description="Checks run in parallel by the batch API.")
    allow_unsandboxed: bool = Field(
        False, description="Run code without namespaces where they cannot be created (disposable machines only)."
    )
