"""The parts of ``make gpu-check`` that run on a bare CUDA image (benchmarks/gpu_check.py runs them):
each a subprocess under its own timeout, its output in ``metrics/gpu_check_logs/<part>.log``, its
outcome a dict of numbers. Standard library only here (psutil, to stop a part that overruns its
time): the parts import the project themselves.

- ``matmul_bf16``: the measured bf16 matmul peak (8192^3 on a GPU), the yardstick of the FLOP floor;
- ``core_chain``: the tiny default's sft -> grpo -> ppo -> evaluate on the core library
  (:mod:`benchmarks.core_chain`);
- ``step_timing``: ours against TRL 1.16 at SmolLM2-135M's shape (random weights from the bundle's
  config, bf16, HF rollouts on both sides, 16 prompts x G 8 x 256 tokens), alternating, each side in
  its own process (:mod:`benchmarks.grpo_step_timing`), with our phase split, the update's achieved
  FLOP/s as a share of the matmul peak, and the step's FLOP floor at that peak; and which kernels
  our passes run there (the attention's SDPA backend, the log-probs': :mod:`grpoflow.rl.kernels`).

``--dry`` (DRY=1 bash benchmarks/gpu/check.sh) runs every part on the CPU at tiny sizes, with the
packages that neither the image nor the bundle has made unimportable (:data:`ABSENT`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOGS = Path("metrics/gpu_check_logs")
# Seconds each part may take before it counts as failed: on the bare image together under 8 minutes.
TIMEOUTS = {
    "gpu_tests": 120,
    "matmul_bf16": 30,
    "core_chain": 90,
    "step_timing": 230,
    "grpo": 190,
    "two_ranks": 110,
}
# On the lent machine's image and not in the bundle: the dry run makes them unimportable.
ABSENT = ("prefect", "mlflow", "dvc", "vllm", "optuna")
# What the lent machine's bare image has of what the checks import (../shared/device-kit's facts: Python
# 3.12, torch 2.11 + CUDA, transformers 5.17, accelerate, peft, numpy, pyarrow, pytest, and their own
# dependencies); everything else they import comes from the bundle (benchmarks/gpu/wheels.txt).
IMAGE_HAS = (
    "torch", "transformers", "accelerate", "peft", "numpy", "pyarrow", "pytest", "packaging", "tqdm", "psutil",
    "ninja", "py-cpuinfo", "safetensors", "tokenizers", "huggingface-hub", "pyyaml", "filelock", "requests",
)  # fmt: skip
# The dry run's child processes start with this sitecustomize (this module is standard library only).
BLOCKER = "from benchmarks.gpu_parts import block_absent\nblock_absent()\n"


def block_absent() -> None:
    """Make :data:`ABSENT` unimportable as a missing package is: ``import`` raises ImportError and
    ``importlib.util.find_spec`` answers None (a None in ``sys.modules`` does both), so that
    libraries that look before they import (transformers' integrations) see them absent too."""
    for name in ABSENT:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Shape:
    """The sizes a check runs at."""

    prompts: int
    g: int
    tokens: int
    steps: int
    warmup: int
    order: tuple[str, ...]
    chain: tuple[str, ...] = field(default=())  # core_chain's arguments
    layers: int | None = None  # the step timing's random SmolLM2 this deep; None: its config's 30


FULL = Shape(16, 8, 256, 3, 1, ("ours", "trl", "ours", "trl"))
# Two layers: every code path of the step at SmolLM2's width, vocabulary and bf16, at a size a CPU
# without native bf16 (AVX2 only) runs in the part's time: 30 layers took 30 s a step there, TRL's
# side did not finish in its 117 s, and the whole dry run failed (2026-12-07).
DRY = Shape(2, 2, 8, 1, 1, ("ours", "trl"), ("--examples", "200", "--rl-steps", "2", "--eval-prompts", "8"), layers=2)


def load_factor(cpus: int | None = None, load: float | None = None) -> float:
    """How many times longer a part may take on this machine than on a quiet one: the processes
    waiting for a CPU per CPU (the 1-minute load average), at least 1. A GPU part's time is mostly
    the device's, but a busy host delays every launch and every stage process's start."""
    cpus = cpus or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    return max(1.0, load / cpus)


def budgets(factor: float) -> dict[str, float]:
    """Each part's seconds: :data:`TIMEOUTS` (on a quiet machine) times the load ``factor``."""
    return {name: round(seconds * factor, 1) for name, seconds in TIMEOUTS.items()}


@dataclass(frozen=True)
class Plan:
    """One check's settings: the shape, the bundle, a scratch folder, the parts' environment and
    their time budgets (:func:`budgets`, scaled to the load the check started under)."""

    dry: bool
    bundle: Path
    scratch: Path
    env: dict[str, str]
    timeouts: dict[str, float] = field(default_factory=lambda: dict(TIMEOUTS))
    factor: float = 1.0  # the load factor the budgets were scaled by

    @property
    def shape(self) -> Shape:
        return DRY if self.dry else FULL


def plan(dry: bool, bundle: Path) -> Plan:
    """A plan with its scratch folder; a dry one's parts import none of :data:`ABSENT`."""
    scratch = Path(tempfile.mkdtemp(prefix="grpoflow-gpu-check-"))
    env = dict(os.environ)
    if dry:
        blocker = scratch / "absent"
        blocker.mkdir()
        (blocker / "sitecustomize.py").write_text(BLOCKER)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(blocker), os.getcwd(), env.get("PYTHONPATH")]))
    factor = load_factor()
    timeouts = budgets(factor)
    said = ", ".join(f"{name} {seconds:g} s" for name, seconds in timeouts.items())
    print(f"gpu-check budgets (x{factor:.2f} for the load this check starts under): {said}", flush=True)
    return Plan(dry, bundle, scratch, env, timeouts, factor)


class PeakMemory:
    """The device's peak used memory (MiB, nvidia-smi's ``memory.used``), sampled each second in a
    thread while a part runs: the training processes' and their vLLM engines' together."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s, self.peak = interval_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="gpu-memory", daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
            )
            used = [float(x) for x in out.stdout.split() if x.replace(".", "", 1).isdigit()]
            self.peak = max([self.peak, *used])
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def run_part(
    name: str,
    cmd: list[str],
    plan_: Plan | None = None,
    timeout: float | None = None,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[dict, str]:
    """Run ``cmd`` as part ``name`` within its time (``TIMEOUTS[name]`` unless given), in the plan's
    environment (or ``env``), sampling the GPU's peak memory: ``({ok, seconds, peak_gpu_memory_mib[,
    error, tail]}, output)``; the output goes to the part's log. Over its time, the command and all it
    started are killed: its process group, and descendants in sessions of their own (torchrun's agents)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    limit = timeout if timeout is not None else (plan_.timeouts if plan_ is not None else TIMEOUTS)[name]
    start = time.perf_counter()
    with PeakMemory() as memory:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env if env is not None else (plan_.env if plan_ is not None else None),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        try:
            output, error = proc.communicate(timeout=limit)[0], ""
            if proc.returncode != 0:
                error = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            _kill(proc)
            output, error = proc.communicate()[0], f"over its {limit:g} s"
    with open(LOGS / f"{name}.log", "a") as log:
        log.write(f"$ {' '.join(cmd)}\n{output}\n[{error or 'ok'} in {time.perf_counter() - start:.1f} s]\n")
    part = {"ok": not error, "seconds": round(time.perf_counter() - start, 1), "peak_gpu_memory_mib": memory.peak}
    return part | ({"error": error, "tail": output[-1500:]} if error else {}), output


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL to ``proc``, everything below it, and whatever is left in its process group."""
    from flows.process_tree import signal_tree  # psutil: DeepSpeed's dependency, on every image that trains

    signal_tree(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def tagged(output: str, tag: str) -> dict | None:
    """The JSON of the last ``TAG {json}`` line of ``output``."""
    lines = [line[len(tag) :] for line in output.splitlines() if line.startswith(tag)]
    return json.loads(lines[-1]) if lines else None


MATMUL = """
import json, time, torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
n, reps = (8192, 20) if dev == "cuda" else (512, 3)
a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
for _ in range(3): a @ b
if dev == "cuda": torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(reps): a @ b
if dev == "cuda": torch.cuda.synchronize()
s = time.perf_counter() - t
print("MATMUL " + json.dumps({"device": dev, "n": n, "tflops": 2 * n**3 * reps / s / 1e12}))
"""


def run_matmul(plan_: Plan) -> dict:
    """The bf16 matmul peak, TFLOP/s."""
    part, output = run_part("matmul_bf16", [sys.executable, "-c", MATMUL], plan_)
    found = tagged(output, "MATMUL ")
    return part | (found or {"ok": False})


def run_chain(plan_: Plan) -> dict:
    """The tiny default's stage cores on the device (:mod:`benchmarks.core_chain`)."""
    cmd = [sys.executable, "-m", "benchmarks.core_chain", "--work", str(plan_.scratch / "chain"), *plan_.shape.chain]
    part, output = run_part("core_chain", cmd, plan_)
    found = tagged(output, "CHAIN ")
    return part | (found or {"ok": False})


def _random_smollm(plan_: Plan) -> Path:
    """SmolLM2-135M's shape with seeded random weights, from the bundle's config and tokenizer (the
    shape's depth where it sets one)."""
    out = plan_.scratch / "smollm2-random"
    cmd = [sys.executable, "-m", "benchmarks.random_model", str(plan_.bundle / "smollm2"), str(out), "0"]
    cmd += [str(plan_.shape.layers)] if plan_.shape.layers else []
    part, _ = run_part("step_timing", cmd, plan_, timeout=90 * plan_.factor)
    if not part["ok"]:
        raise RuntimeError(f"the random SmolLM2 was not built: {part.get('error')}: {part.get('tail', '')[-400:]}")
    return out


def _side(results: list[dict]) -> dict[str, Any]:
    """One implementation's runs, summed up."""
    seconds = [s for r in results for s in r["seconds_each"]]
    tokens = [n for r in results for n in r["completion_tokens_each"]]
    side = {
        "runs": len(results),
        "s_per_step": round(sum(seconds) / len(seconds), 4),
        "s_per_step_each": [round(s, 3) for s in seconds],
        "completion_tokens_per_step": round(sum(tokens) / len(tokens), 1),
        "cuda_peak_allocated_mb": max((r.get("cuda_peak_allocated_mb") or 0.0) for r in results),
        "parameters": results[0]["parameters"],
    }
    phases = [r["phase_seconds_per_step"] for r in results if r.get("phase_seconds_per_step")]
    if phases:
        side["phase_s_per_step"] = {k: round(sum(p[k] for p in phases) / len(phases), 4) for k in phases[0]}
    rates = [r["update_tokens_per_s"] for r in results if r.get("update_tokens_per_s")]
    if rates:
        side["update_tokens_per_s"] = round(sum(rates) / len(rates), 1)
    return side


KERNELS_TIMEOUT = 60  # the kernel probe: a process that loads the model and runs one small pass


def run_kernels(plan_: Plan, model: Path) -> dict:
    """Which attention and log-prob kernels our training passes run for ``model`` in bf16 on the
    device: what PyTorch picks and what ran in one packed pass (``python -m grpoflow.rl.kernels``).
    A probe that fails says why, and the part goes on."""
    cmd = [sys.executable, "-m", "grpoflow.rl.kernels", str(model), "--bf16"]
    part, output = run_part("step_timing", cmd, plan_, timeout=KERNELS_TIMEOUT * plan_.factor)
    found = tagged(output, "KERNELS ")
    return found or {"error": part.get("error") or "no KERNELS line", "tail": output[-400:]}


def kernel_line(kernels: dict) -> str:
    """The table's line for :func:`run_kernels`' answer."""
    if "line" not in kernels:
        return f"    kernels: not reported ({kernels.get('error', '?')})"
    ran = ", ".join(kernels.get("ran") or []) or "none"
    return f"    kernels (ours, bf16 on {kernels.get('device', '?')}): {kernels['line']}; a packed pass ran sdpa {ran}"


def run_step_timing(plan_: Plan) -> dict:
    """Ours against TRL at SmolLM2's shape, alternating, within the part's time (a side that would
    not fit in what is left is skipped, and says so)."""
    start, shape = time.perf_counter(), plan_.shape
    model = _random_smollm(plan_)
    kernels = run_kernels(plan_, model)
    sizes = f"{shape.prompts},{shape.g},{shape.tokens}"
    args = ["--model", "smollm", "--model-dir", str(model), "--sizes", sizes, "--bf16"]
    args += ["--steps", str(shape.steps), "--warmup", str(shape.warmup)]
    results: dict[str, list[dict]] = {"ours": [], "trl": []}
    runs: list[dict] = []
    last: dict[str, float] = {}
    for impl in shape.order:
        left = plan_.timeouts["step_timing"] - (time.perf_counter() - start)
        if impl in last and left < last[impl] * 1.1 + 5:
            runs.append({"impl": impl, "skipped": f"{left:.0f} s left, its last run took {last[impl]:.0f} s"})
            continue
        cmd = [sys.executable, "-m", "benchmarks.grpo_step_timing", "--impl", impl, *args]
        part, output = run_part("step_timing", cmd, plan_, timeout=max(left, 1.0))
        last[impl] = part["seconds"]
        found = tagged(output, "RESULT ")
        if found:
            results[impl].append(found)
        runs.append({"impl": impl, **{k: v for k, v in part.items() if k != "tail"}})
    sides = {impl: _side(r) for impl, r in results.items() if r}
    record: dict[str, Any] = {"ok": set(sides) == {"ours", "trl"}, "sizes": sizes, "runs": runs, "sides": sides}
    if shape.layers:
        record["layers"] = shape.layers
    record["kernels"] = kernels
    if record["ok"]:
        ours, trl = sides["ours"], sides["trl"]
        record["ours_over_trl"] = {"s_per_step": round(ours["s_per_step"] / trl["s_per_step"], 3)}
        if trl["cuda_peak_allocated_mb"]:
            record["ours_over_trl"]["peak_allocated"] = round(
                ours["cuda_peak_allocated_mb"] / trl["cuda_peak_allocated_mb"], 3
            )
    return record | {"seconds": round(time.perf_counter() - start, 1)}


def step_flops(parameters: int, rows: int, prompt_tokens: int, completion_tokens: int) -> dict[str, float]:
    """A GRPO step's arithmetic (Kaplan et al. 2020's 2N FLOPs per token forward, 4N backward):
    the update with gradient checkpointing 8N per token (a second forward), the reference pass 2N,
    and the rollout 2N per generated token; the prompt's prefill counted once per sample."""
    tokens = rows * (prompt_tokens + completion_tokens)
    return {
        "update": 8.0 * parameters * tokens,
        "reference": 2.0 * parameters * tokens,
        "rollout": 2.0 * parameters * tokens,
    }


PROMPT_TOKENS = 64  # the step harness's chat prompts for SmolLM2: 56-73 tokens, mean 63 (measured)


def floor_and_efficiency(step: dict, matmul: dict, prompt_tokens: int = PROMPT_TOKENS) -> dict | None:
    """The step's FLOP floor at the measured matmul peak, and the update's achieved FLOP/s as a
    share of that peak (from the update's tokens per second); None without both parts' numbers."""
    ours, peak = step.get("sides", {}).get("ours"), matmul.get("tflops")
    if not ours or not peak:
        return None
    prompts, g, tokens = (int(x) for x in step["sizes"].split(","))
    flops = step_flops(ours["parameters"], prompts * g, prompt_tokens, tokens)
    out = {
        "floor_s": round(sum(flops.values()) / (peak * 1e12), 4),
        "floor_note": f"FLOPs at {peak:.3g} TFLOP/s, prompts taken as {prompt_tokens} tokens",
        "flops": {k: f"{v:.3g}" for k, v in flops.items()},
    }
    if ours.get("update_tokens_per_s"):
        achieved = 8.0 * ours["parameters"] * ours["update_tokens_per_s"]
        out["update_tflops"] = round(achieved / 1e12, 2)
        out["update_share_of_peak"] = round(achieved / (peak * 1e12), 4)
    return out


def detail_lines(name: str, part: dict) -> list[str]:
    """A part's numbers as the table lines under its head line (none for parts without numbers)."""
    if name == "matmul_bf16" and "tflops" in part:
        return [f"    bf16 matmul {part['n']}^3 on {part['device']}: {part['tflops']:.3g} TFLOP/s"]
    if name == "core_chain" and "stage_seconds" in part:
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in part["stage_seconds"].items())
        scores = ", ".join(f"{k} {v:.3f}" for k, v in part["test_pass_at_1"].items())
        return [f"    on {part['device']}: {stages}; test pass@1 {scores}"]
    if name != "step_timing":
        return []
    lines = _side_lines(part) if part.get("sides") else []
    return lines + ([kernel_line(part["kernels"])] if part.get("kernels") else [])


def _side_lines(part: dict) -> list[str]:
    """The step-timing part's table: each side, their ratio, our phases and the FLOP floor."""
    depth = f", {part['layers']} layers" if part.get("layers") else ""
    lines = [f"    {'side':<6}{'s/step':>9}{'tokens/step':>13}{'peak alloc MB':>15}   (sizes {part['sizes']}{depth})"]
    for side, d in part["sides"].items():
        peak = d["cuda_peak_allocated_mb"]
        lines.append(f"    {side:<6}{d['s_per_step']:>9.3f}{d['completion_tokens_per_step']:>13.0f}{peak:>15.0f}")
    if ratio := part.get("ours_over_trl"):
        lines.append("    ours / trl: " + ", ".join(f"{v}x {k}" for k, v in ratio.items()))
    if phases := part["sides"].get("ours", {}).get("phase_s_per_step"):
        lines.append("    ours by phase: " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items() if v >= 0.0005))
    if floor := part.get("floor"):
        line = f"    FLOP floor {floor['floor_s']} s/step ({floor['floor_note']})"
        if "update_share_of_peak" in floor:
            line += f"; the update ran at {floor['update_tflops']} TFLOP/s, {floor['update_share_of_peak']:.1%} of it"
        lines.append(line)
    return lines
