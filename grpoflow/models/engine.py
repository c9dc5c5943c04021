"""The training engine: DeepSpeed, configured from params, the same on CPU and on GPUs.

On CPU DeepSpeed selects its CPU accelerator and the gloo backend; one process needs no
launcher (the rendezvous variables default to a single local rank); ``torchrun`` or the
``deepspeed`` launcher set them for several. The optimizer is torch's AdamW, passed in:
DeepSpeed's fused CPU Adam costs a long compile and buys nothing at this size.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from grpoflow.config import EngineConfig
from grpoflow.models.build_lock import check_build_locks
from grpoflow.models.device import compute_device
from grpoflow.ports import free_port

# Where DeepSpeed compiles its CPU ops unless the user chose (TORCH_EXTENSIONS_DIR): in the project,
# so that every stage process, flow or shell reuses one build.
EXTENSIONS_DIR = Path(__file__).resolve().parents[2] / ".cache" / "torch_extensions"  # the checkout's, as make's
DIST_BACKEND_ENV = "GRPOFLOW_DIST_BACKEND"  # the process group's backend, where not NCCL on CUDA / gloo on CPU


def use_own_ninja() -> None:
    """Put the environment's own ninja (``ninja`` beside the interpreter: DeepSpeed requires the
    package) first on PATH, where another comes first. torch builds an op with the ninja PATH finds,
    and ninja versions log a build's command under different hashes (1.11 and 1.13 do): a process
    started with the environment on PATH (make, an activated venv) and one started without it
    (``.venv/bin/python ...``, a system ninja) would rebuild the op in turn, silently, half a minute each."""
    if not os.path.isabs(sys.executable):  # unknown ("") or relative: no environment to speak of
        return
    own = Path(sys.executable).parent / "ninja"
    found = shutil.which("ninja")
    if own.is_file() and os.access(own, os.X_OK) and (found is None or Path(found).resolve() != own.resolve()):
        # Unset, PATH means the system's default (os.defpath), where the compiler ninja runs is found.
        os.environ["PATH"] = os.pathsep.join(filter(None, [str(own.parent), os.environ.get("PATH", os.defpath)]))


def import_deepspeed():
    """DeepSpeed, set up for this machine before its import: without CUDA it is told its CPU
    accelerator (else it warns at every start that it fell back to it), and its compiled ops live
    in the project's cache, built by the environment's ninja (:func:`use_own_ninja`)."""
    if compute_device().type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_DIR))
    use_own_ninja()
    import deepspeed

    return deepspeed


def _announce_first_build() -> None:
    """Say so before DeepSpeed compiles its CPU communication op: the first time, a minute or two
    passes with nothing else on the console. A build lock a killed run left is removed first, and a
    live one named (:mod:`grpoflow.models.build_lock`): without that, the build waits on it forever."""
    cache = Path(os.environ.get("TORCH_EXTENSIONS_DIR", EXTENSIONS_DIR))
    check_build_locks(cache, say=lambda line: print(line, flush=True))
    if compute_device().type == "cpu" and not any(cache.glob("deepspeed_shm_comm/*.so")):
        print(
            f"building DeepSpeed's CPU communication op into {cache} (a minute or two, once; later runs reuse it)",
            flush=True,
        )


def init_distributed() -> tuple[int, int]:
    """``(rank, world_size)``; starts a single-process group when no launcher set one up."""
    import torch.distributed as dist

    deepspeed = import_deepspeed()

    # A launcher sets these; without one this is the single process, also when the group exists
    # already and the variables were lost since (DeepSpeed reads LOCAL_RANK at every initialize).
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    if not dist.is_initialized():
        _forget_destroyed_groups(deepspeed)
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        # NCCL refuses two ranks on one GPU: GRPOFLOW_DIST_BACKEND=gloo runs them (benchmarks/gpu_check.py).
        backend = os.environ.get(DIST_BACKEND_ENV) or ("nccl" if compute_device().type == "cuda" else "gloo")
        _announce_first_build()
        deepspeed.init_distributed(dist_backend=backend)
    return dist.get_rank(), dist.get_world_size()


def _forget_destroyed_groups(deepspeed) -> None:
    """Drop DeepSpeed's cached process groups of a group destroyed without telling it: vLLM's
    shutdown destroys the default group through torch.distributed, and an engine built after it
    in the same process would otherwise broadcast over the dead group ("Group ... is not
    registered"). DeepSpeed's own release, the one its destroy_process_group calls."""
    groups = getattr(getattr(deepspeed, "utils", None), "groups", None)
    release = getattr(groups, "_release_process_group_references", None)
    if release is not None:
        release()


def leave_distributed(release: Callable[[], None] | None = None) -> None:
    """Every process leaves the group together, once the last collective work is done: a rank that
    exits while another still exports, with its group's threads alive, can abort at interpreter
    shutdown ("terminate called without an active exception"). ``release`` runs after the barrier
    and before the group goes: what tears down groups of its own (vLLM's engine) must do it while
    they exist, and no rank may do it while another still needs them."""
    import torch.distributed as dist

    together = dist.is_initialized() and dist.get_world_size() > 1  # one process: nothing to wait for
    if together:
        dist.barrier()
    if release is not None:
        release()
    if together and dist.is_initialized():  # vLLM's shutdown may have destroyed it already
        dist.destroy_process_group()


def use_bf16(cfg: EngineConfig) -> bool:
    """Whether the engine trains in bfloat16 (``auto``: on CUDA with bf16 support only)."""
    if cfg.bf16 == "auto":
        return compute_device().type == "cuda" and torch.cuda.is_bf16_supported()
    return bool(cfg.bf16)


CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs with bf16 dot products


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether the CPU multiplies bfloat16 in hardware (AMX or AVX512-BF16, from ``cpuinfo``'s
    flags); None where there is no such file to read (not Linux). Elsewhere oneDNN emulates bf16,
    and a bf16 pass costs more than an fp32 one."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}
    return any(f in flags for f in CPU_BF16_FLAGS)


def bf16_warning(cfg: EngineConfig) -> str | None:
    """A line to log when bf16 is asked for on a CPU that emulates it (slower than fp32), else None."""
    if cfg.bf16 is not True or compute_device().type != "cpu" or cpu_has_native_bf16() is not False:
        return None
    return (
        "warning: bf16 is on (engine bf16: true) but this CPU has neither AMX nor AVX512-BF16: its bf16 "
        "matmuls are emulated, slower than fp32; set the engine's bf16 to false (or auto)"
    )


def deepspeed_config(cfg: EngineConfig, batch_size: int, world_size: int) -> dict:
    """DeepSpeed's config for ``batch_size`` sequences per optimizer step across all processes."""
    per_rank = batch_size // world_size
    if batch_size % world_size or per_rank % min(cfg.micro_batch_size, per_rank):
        raise ValueError(
            f"batch of {batch_size} sequences does not split into {world_size} processes x micro-batches of "
            f"{cfg.micro_batch_size}: choose sizes so that batch / processes is a multiple of the micro-batch"
        )
    micro = min(cfg.micro_batch_size, per_rank)
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": per_rank // micro,
        "gradient_clipping": cfg.gradient_clipping,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": use_bf16(cfg)},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def unkept_grad_norm(engine) -> torch.Tensor | None:
    """The global gradient norm (before clipping), still on the device, at the accumulation boundary
    where DeepSpeed keeps none; else None.

    DeepSpeed takes the norm from its own optimizers (ZeRO 1-3, bf16); with a torch optimizer at
    ZeRO 0 its ``get_global_grad_norm()`` stays None. The gradients are all-reduced at the
    accumulation boundary's backward already, so every process computes the same norm here.
    """
    if not engine.is_gradient_accumulation_boundary() or hasattr(engine.optimizer, "_global_grad_norm"):
        return None
    grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads) if grads else None


def optimizer_step(engine, grad_norm: float | None = None) -> None:
    """``engine.step()``, keeping the global gradient norm where DeepSpeed keeps none
    (:func:`unkept_grad_norm`): ``grad_norm`` when the caller read it already, else read here."""
    if grad_norm is None and (norm := unkept_grad_norm(engine)) is not None:
        grad_norm = float(norm)
    if grad_norm is not None:
        # The attribute get_global_grad_norm() reads, as DeepSpeed itself sets it from its optimizers.
        engine._global_grad_norm = grad_norm
    engine.step()


def build_engine(model: torch.nn.Module, cfg: EngineConfig, batch_size: int):
    """A DeepSpeed engine with AdamW and linear warm-up, for ``batch_size`` sequences a step."""
    deepspeed = import_deepspeed()
    _, world = init_distributed()
    if (warning := bf16_warning(cfg)) is not None:
        print(warning, flush=True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    warmup = max(cfg.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1)) if warmup else 1.0
    )
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=deepspeed_config(cfg, batch_size, world)
    )
    check_placement(engine.device)
    return engine


def check_placement(engine_device: torch.device | str) -> None:
    """Raise unless DeepSpeed placed its engine on the process's device (:func:`compute_device`): the
    trainers build every batch on the engine's device, and the reference, the critic and the rollouts
    must meet it there."""
    ours, theirs = compute_device(), torch.device(engine_device)
    if theirs != ours:
        raise RuntimeError(
            f"DeepSpeed placed its engine on {theirs}, but this process computes on {ours} "
            "(grpoflow.models.device: GRPOFLOW_DEVICE, else cuda:LOCAL_RANK where CUDA is available, else cpu); "
            "set DS_ACCELERATOR or GRPOFLOW_DEVICE so that they agree"
        )
