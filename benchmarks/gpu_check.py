"""``make gpu-check``: the one prepared check for the day a GPU machine is lent, under 8 minutes on
one GPU of a bare CUDA image without network (benchmarks/gpu/check.sh installs the bundle that
``make gpu-bundle`` builds here, then runs this). Each part runs on its own, under its own timeout,
so that one failure does not hide the others (:mod:`benchmarks.gpu_parts`):

1. ``gpu_tests``: tests/gpu (a bf16 ZeRO-2 step, the decode loop against ``generate``, vLLM where
   installed) and the device audit's tests (tests/unit/test_device_audit.py: every stage's step,
   here on ``cuda:0``);
2. ``matmul_bf16``: the bf16 matmul peak;
3. ``core_chain``: the tiny default's sft -> grpo -> ppo -> evaluate through the core library;
4. ``step_timing``: ours against TRL at SmolLM2-135M's shape, with the phase split, the update's
   FLOP/s as a share of the peak and the step's FLOP floor;
5. where vLLM, Prefect and DVC are installed (a full environment, not the bare image): 4 GRPO steps
   of the SmolLM2 set through the flow as a rehearsal runs them (vLLM rollouts, bf16), and with one
   GPU the same stage on 2 ranks sharing it (gloo: NCCL refuses two ranks on one device).

It prints a table and writes metrics/gpu_check.json (logs in metrics/gpu_check_logs/), after each
part too (``"partial": true`` until the last), with a copy in ``$OUT`` where a device call sets it: a
call cut off at its time limit still brings back the parts it finished. Without CUDA
it exits at once with status 2 and one line; ``--dry`` runs every part on the CPU at tiny sizes.

    make gpu-check                      # on the GPU machine: bash benchmarks/gpu/check.sh
    DRY=1 bash benchmarks/gpu/check.sh  # here: the same parts on CPU, importing only what the image has
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from statistics import mean
from typing import Any

from benchmarks import gpu_parts
from benchmarks.gpu_parts import Plan
from benchmarks.timing import cpu_info  # a dry run's machine: its parts run in bf16
from grpoflow.io import write_json

SET = "params/smollm2-135m.yaml"
STEPS = 4
STAGES = ["base_model", "prepare", "validate_verifiers", "sft", "grpo"]
OUT = Path("metrics/gpu_check.json")
EXIT_NO_CUDA = 2
FULL_STACK = ("vllm", "prefect", "dvc")  # the rehearsal parts' packages (none of them on the bare image)
BUNDLE = Path(".gpu-bundle")
# What the parts' numbers depend on: recorded with them, since the image's and the bundle's mix.
STACK = ("torch", "transformers", "accelerate", "peft", "deepspeed", "trl", "numpy", "pydantic")
TWO_RANKS = "two_ranks"
TWO_RANK_OUTPUTS = {
    "--out": "models/grpo_2ranks",
    "--checkpoints": "checkpoints/grpo_2ranks",
    "--metrics": "metrics/grpo_2ranks.json",
    "--history": "metrics/grpo_2ranks_history.csv",
}


def no_cuda_reason() -> str | None:
    """Why this machine cannot run the check (None: it has a CUDA device). The device files are
    looked at first, so that a machine without a GPU answers before torch is imported."""
    if not Path("/dev/nvidiactl").exists() and shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this machine (no /dev/nvidiactl, no nvidia-smi)"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (a CPU build, or no driver)"
    return None


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (``3 passed, 1 skipped in 9.1s``), by outcome."""
    lines = [line for line in output.splitlines() if re.search(r"\b(passed|failed|skipped|errors?)\b", line)]
    found = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)", lines[-1] if lines else "")
    return {("error" if kind.startswith("error") else kind): int(n) for n, kind in found}


def history_stats(path: Path) -> dict[str, Any]:
    """s/step, rollout tokens/s and the trainer's peak allocation from a training history CSV. The
    first step pays the warm-ups (CUDA graphs, kernel autotuning): the means leave it out when there
    are later steps, and it is reported alone."""
    with open(path) as fh:
        rows = [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(fh)]
    if not rows:
        raise ValueError(f"{path}: no steps")
    steady = rows[1:] or rows
    return {
        "steps": len(rows),
        "first_step_s": round(rows[0]["step_seconds"], 3),
        "s_per_step": round(mean(r["step_seconds"] for r in steady), 3),
        "rollout_tokens_per_s": round(mean(r["rollout_tokens_per_s"] for r in steady), 1),
        "trainer_peak_memory_mb": round(max(r.get("peak_memory_mb", 0.0) for r in rows), 1),
    }


def summary(parts: dict[str, dict], gpu: dict[str, Any], versions: dict[str, str] | None = None) -> dict[str, Any]:
    """metrics/gpu_check.json: each part's outcome and numbers, the GPU, the versions the parts ran on,
    and whether all passed."""
    passed = all(p.get("ok") for p in parts.values() if not p.get("skipped"))
    return {"gpu": gpu, "versions": versions or {}, "parts": parts, "passed": passed}


def stack_versions() -> dict[str, str]:
    """The versions of :data:`STACK` that the parts import: the first distribution on ``sys.path``, as
    the parts' processes see it (check.sh puts the bundle's wheels ahead of the image's own, so on
    the lent image this is torch 2.11 with the bundle's transformers), "absent" where none is."""
    found = {"python": platform.python_version()}
    for name in STACK:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The lines the check prints at its end."""
    gpu = result["gpu"]
    lines = [
        f"gpu-check on {gpu.get('name', '?')} x {gpu.get('count', '?')}: {'PASSED' if result['passed'] else 'FAILED'}"
    ]
    if "cpu" in gpu:
        native = {True: "native", False: "emulated (no AMX or AVX512-BF16)", None: "unknown"}[gpu.get("native_bf16")]
        lines.append(f"  cpu: {gpu['cpu']}; bf16 {native}")
    if result.get("versions"):
        lines.append("  versions: " + ", ".join(f"{name} {v}" for name, v in result["versions"].items()))
    for name, part in result["parts"].items():
        if part.get("skipped"):
            lines.append(f"  {name}: skipped ({part['skipped']})")
            continue
        head = f"  {name}: {'ok' if part.get('ok') else 'FAILED'} in {part.get('seconds', 0):.0f} s"
        if "s_per_step" in part:
            head += (
                f"; {part['s_per_step']:.2f} s/step (first {part['first_step_s']:.1f} s), "
                f"{part['rollout_tokens_per_s']:.0f} rollout tokens/s, peak GPU memory "
                f"{part.get('peak_gpu_memory_mib', float('nan')):.0f} MiB "
                f"(trainer {part['trainer_peak_memory_mb']:.0f} MB)"
            )
        if "counts" in part:
            head += f"; {', '.join(f'{n} {k}' for k, n in part['counts'].items())}"
        lines.append(head + (f"\n    {part['error']}" if part.get("error") else ""))
        lines += gpu_parts.detail_lines(name, part)
    return lines


def gpu_info() -> dict[str, Any]:
    """The devices, as nvidia-smi names them (no CUDA context in this process: it would count in the peak)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True
    )
    rows = [line.split(", ") for line in out.stdout.strip().splitlines() if line.strip()]
    return {"count": len(rows), "name": rows[0][0] if rows else "?", "memory_mib": float(rows[0][1]) if rows else 0.0}


def check_sizes(params: Any) -> dict[str, Any]:
    """What the GRPO part sets over the rehearsal's smoke sizes: :data:`STEPS` steps of the set's own
    batch and completion length, vLLM rollouts, bf16 training; one validation, at the end."""
    rl = params.rl
    return {
        "rl.steps": STEPS,
        "rl.checkpoint_every": STEPS,
        "rl.eval_every": STEPS,
        "rl.rollout_engine": "vllm",
        "rl.engine.bf16": True,
        "rl.prompts_per_step": rl.prompts_per_step,
        "rl.sampling.max_completion_length": rl.sampling.max_completion_length,
        "rl.engine.micro_batch_size": rl.engine.micro_batch_size,
    }


def _with_history(part: dict, history: Path) -> dict:
    if part["ok"]:
        try:
            part |= history_stats(history)
        except (OSError, ValueError, KeyError) as exc:
            part |= {"ok": False, "error": f"no usable history {history}: {exc}"}
    return part


GPU_TESTS = ["tests/gpu", "tests/unit/test_device_audit.py"]  # the audit's tests run on cuda:0 there


def run_gpu_tests(plan: Plan | None = None) -> dict:
    """Part 1: the ``gpu`` tests and the device audit's, on the device."""
    cmd = [sys.executable, "-m", "pytest", *GPU_TESTS, "-m", "gpu or not slow", "-o", "addopts=", "-q"]
    cmd += ["-p", "no:cacheprovider", "-p", "no:randomly"]
    part, output = gpu_parts.run_part("gpu_tests", cmd, plan)
    counts = pytest_counts(output)
    return part | {"counts": counts, "ok": part["ok"] and counts.get("passed", 0) > 0}


def run_grpo(scratch: Path, timeout: float | None = None) -> dict:
    """Part 2: the rehearsal of the set with :func:`check_sizes`, its workspace kept under ``scratch``."""
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--rehearse-into", str(scratch)]
    part, _ = gpu_parts.run_part("grpo", cmd, timeout=timeout)
    return _with_history(part, scratch / "project" / "metrics" / "grpo_history.csv")


def run_two_ranks(project: Path, timeout: float | None = None) -> dict:
    """Part 3: the grpo stage as two torchrun agents of one process each (both ``LOCAL_RANK`` 0, so
    both on the one GPU) meeting on 127.0.0.1, over gloo, in the rehearsal's workspace: started as
    ``launch.local_nodes`` starts them (flows/local_nodes.py)."""
    from grpoflow.models.engine import DIST_BACKEND_ENV

    if not (project / "models" / "sft").is_dir():
        return {"ok": False, "seconds": 0, "error": "no workspace: the GRPO part did not get as far as sft"}
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    launch = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d"]
    launch += ["--rdzv_endpoint", "127.0.0.1:0", "--rdzv_id", "gpu-check", "--max_restarts", "0"]
    outputs = [word for flag, path in TWO_RANK_OUTPUTS.items() for word in (flag, path)]
    agents = [sys.executable, "-m", "flows.local_nodes", "--nnodes", "2", "--", torchrun, *launch]
    cmd = [*agents, "-m", "tasks.grpo", "--params", SET, *outputs]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "PREFECT_API", "GRPOFLOW_"))}
    part, _ = gpu_parts.run_part(TWO_RANKS, cmd, timeout=timeout, cwd=project, env=env | {DIST_BACKEND_ENV: "gloo"})
    return _with_history(part, project / TWO_RANK_OUTPUTS["--history"])


def rehearse_into(scratch: Path) -> int:
    """The GRPO part's own process: the rehearsal of :data:`SET` up to grpo, with :func:`check_sizes`."""
    from flows.rehearse import rehearse
    from grpoflow.config import load_params

    return rehearse(SET, None, STAGES, keep=True, after=check_sizes(load_params(SET)), scratch=scratch)


def full_stack_missing() -> list[str]:
    """The rehearsal parts' packages this environment lacks (all of them on the bare image)."""
    import importlib.util

    return [name for name in FULL_STACK if importlib.util.find_spec(name) is None]


Save = Callable[[dict[str, dict]], object]  # gets the parts done so far (run_check's save)


def _rehearsals(gpu: dict[str, Any], plan: Plan, parts: dict[str, dict], save: Save) -> None:
    """Parts 5 and 6 into ``parts``, where the full stack is installed."""
    scratch = plan.scratch
    if missing := full_stack_missing():
        why = f"needs {', '.join(missing)}, not installed here (the bare image has none of {', '.join(FULL_STACK)})"
        parts.update({"grpo": {"skipped": why}, TWO_RANKS: {"skipped": why}})
        return
    parts["grpo"] = run_grpo(scratch, plan.timeouts["grpo"])
    save(parts)
    if gpu["count"] == 1:
        parts[TWO_RANKS] = run_two_ranks(scratch / "project", plan.timeouts[TWO_RANKS])
    else:
        parts[TWO_RANKS] = {"skipped": f"{gpu['count']} GPUs: the gpu tests' two-GPU run is the multi-rank check"}


def _step_timing(plan: Plan, parts: dict[str, dict]) -> dict:
    """Part 4, with the step's FLOP floor at part 2's matmul peak: a GPU's yardstick only (on a CPU one
    small bf16 matmul is no peak: the dry run of 2026-12-07 read the update as 1,268% of it)."""
    step = gpu_parts.run_step_timing(plan)
    if not plan.dry and (floor := gpu_parts.floor_and_efficiency(step, parts["matmul_bf16"])):
        step["floor"] = floor
    return step


def run_parts(plan: Plan, gpu: dict[str, Any], save: Save) -> dict[str, dict]:
    """Every part in turn, each reporting on its own whatever the others did; ``save`` gets the parts
    done so far after each."""
    parts: dict[str, dict] = {}
    for name, run in (
        ("gpu_tests", lambda: run_gpu_tests(plan)),
        ("matmul_bf16", lambda: gpu_parts.run_matmul(plan)),
        ("core_chain", lambda: gpu_parts.run_chain(plan)),
        ("step_timing", lambda: _step_timing(plan, parts)),
    ):
        try:
            parts[name] = run()
        except Exception as exc:  # noqa: BLE001 - a part that breaks reports, and the next runs
            parts[name] = {"ok": False, "seconds": 0, "error": f"{type(exc).__name__}: {exc}"}
        print(f"gpu-check {name}: {json.dumps(parts[name])[:600]}", flush=True)
        save(parts)
    _rehearsals(gpu, plan, parts, save)
    return parts


def clear_build_locks() -> None:
    """A compiled-op build lock left by a part killed mid-build hangs every later DeepSpeed start:
    remove the stale ones of each extensions folder the parts may use (:mod:`grpoflow.models.build_lock`)."""
    from grpoflow.models.build_lock import check_build_locks
    from grpoflow.models.engine import EXTENSIONS_DIR

    default = Path.home() / ".cache" / "torch_extensions"  # torch's own, where TORCH_EXTENSIONS_DIR is unset
    folders = {Path(os.environ.get("TORCH_EXTENSIONS_DIR", default)), EXTENSIONS_DIR}
    for folder in sorted(folders):
        check_build_locks(folder, say=lambda line: print(f"gpu-check: {line}", flush=True))


def copy_to(folder: Path, out: Path) -> None:
    """``out`` and the parts' logs into ``folder`` (made where missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / out.name).resolve() != out.resolve():
        shutil.copy(out, folder / out.name)
    if gpu_parts.LOGS.is_dir() and (folder / gpu_parts.LOGS.name).resolve() != gpu_parts.LOGS.resolve():
        shutil.copytree(gpu_parts.LOGS, folder / gpu_parts.LOGS.name, dirs_exist_ok=True)


def run_check(out: Path = OUT, *, dry: bool = False, bundle: Path = BUNDLE) -> int:
    """Every part, the summary printed and written to ``out``; 0 when all passed."""
    gpu = gpu_info() if not dry else {"count": 0, "name": "cpu (dry run)", "memory_mib": 0.0, **cpu_info()}
    versions = stack_versions()

    def save(parts: dict[str, dict], partial: bool = True) -> dict[str, Any]:
        result = summary(parts, gpu, versions) | {"dry": dry, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        # A check cut off has not passed, whatever the parts it finished say.
        write_json(out, result | ({"partial": True, "passed": False} if partial else {}))
        if os.environ.get("OUT"):  # a device call's folder: what is there comes back even if the call is cut off
            try:
                copy_to(Path(os.environ["OUT"]), out)
            except OSError as exc:  # the check goes on: its own JSON and logs are still written
                print(f"gpu-check: could not copy to $OUT ({os.environ['OUT']}): {exc}", flush=True)
        return result

    clear_build_locks()
    shutil.rmtree(gpu_parts.LOGS, ignore_errors=True)  # this run's logs only
    save({})  # an earlier check's JSON replaced at once; the GPU and versions in $OUT before any part
    plan = gpu_parts.plan(dry, bundle)
    try:
        parts = run_parts(plan, gpu, save)
    finally:
        shutil.rmtree(plan.scratch, ignore_errors=True)
    result = save(parts, partial=False)
    print("\n".join([*summary_lines(result), f"written to {out}"]), flush=True)
    return 0 if result["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    from tasks.cli import command_parser

    parser = command_parser("benchmarks.gpu_check", __doc__)
    parser.add_argument("--out", type=Path, default=OUT, help="where the summary goes (JSON)")
    parser.add_argument("--cuda-or-exit", action="store_true", help="only say whether CUDA is here (exit 0 or 2)")
    parser.add_argument("--rehearse-into", type=Path, default=None, help=argparse.SUPPRESS)  # its GRPO part
    parser.add_argument("--bundle", type=Path, default=BUNDLE, help="what make gpu-bundle built (.gpu-bundle)")
    parser.add_argument("--dry", action="store_true", help="every part on the CPU at tiny sizes (no GPU needed)")
    args = parser.parse_args(argv)
    if args.dry:
        gpu_parts.block_absent()
        return run_check(args.out, dry=True, bundle=args.bundle)
    if reason := no_cuda_reason():
        print(
            f"gpu-check: {reason}: nothing to check here; run `make gpu-check` on a machine with a GPU", file=sys.stderr
        )
        return EXIT_NO_CUDA
    if args.cuda_or_exit:
        return 0
    if args.rehearse_into is not None:
        return rehearse_into(args.rehearse_into)
    return run_check(args.out, bundle=args.bundle)


if __name__ == "__main__":
    sys.exit(main())
