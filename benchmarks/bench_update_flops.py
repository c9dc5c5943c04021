"""How close the GRPO update runs to this machine's limit: fp32 matmul throughput measured with
torch (the thread count training gets) in the same process and run as a short GRPO training on the
tiny default, whose update's achieved FLOP/s is reported as a fraction of that peak.

The update's FLOPs follow the standard estimate for a dense transformer (Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", section 2.1, table 1; the same accounting as the
PaLM paper's appendix B, Chowdhery et al. 2022): a forward pass costs 2 FLOPs per parameter per
token (one multiply-add per weight), the backward twice that (the gradients with respect to the
activations and to the weights), so full fine-tuning costs

    FLOPs = (2 + 4) * N_body * T_seq  +  (2 + 4) * N_head * T_head   (x iterations)

with N_body the non-embedding parameters (the embedding is a lookup, no matmul; biases and norm
weights, a rounding error here, are counted with them), T_seq every
token the passes compute (padding included: it is computed; with shared-prefix groups a group's prompt
counts once, :func:`computed_tokens`), N_head = vocab x hidden the lm_head
matmul and T_head the positions it is applied to (the completions only, grpoflow.rl.logprobs).
Attention's own score and value products (2 * n_layer * n_ctx * d_model per token forward, Kaplan
et al.'s second term) are left out: at these lengths they are a few percent of it. Gradient
checkpointing would add one more forward (2 N per token); the tiny default does not use it.

    python -m benchmarks update_flops
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from benchmarks.timing import best_of
from grpoflow import metric_names as M
from grpoflow.rl import shared_prefix as sp

SIZES = (256, 512, 1024)
STEPS, WARMUP = 6, 2


def matmul_flops(n: int, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Best-of-``repeats`` FLOP/s of an ``n x n`` by ``n x n`` matmul in ``dtype`` (2 n^3 FLOPs)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / best_of(lambda: torch.mm(a, b), repeats=repeats, warmup=2)


def update_flops(n_body: int, n_head: int, seq_tokens: int, head_tokens: int, iterations: int = 1) -> int:
    """The update's FLOPs for full fine-tuning: 2 N per token forward + 4 N backward (module docstring)."""
    return 6 * (n_body * seq_tokens + n_head * head_tokens) * iterations


def matmul_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """``(N_body, N_head)``: the non-embedding parameters, and the lm_head matmul's (counted once
    even where it shares its weight with the embedding)."""
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    body = sum(p.numel() for p in model.parameters() if p is not embed and p is not head)
    return body, head.numel()


def computed_tokens(batch, micro: int, shared_prefix: bool, model) -> tuple[int, int]:
    """``(T_seq, T_head)`` of one update pass, as it is computed: micro-batch by micro-batch, each
    packed into one row per group where shared-prefix groups apply (grpoflow.rl.shared_prefix: the
    prompt once, the lm_head from the prompt's last position on), else one padded row per sample."""
    seq = head = 0
    for i in range(0, len(batch.ids), micro):
        ids, attn = batch.ids[i : i + micro], batch.attn[i : i + micro]
        packed = sp.packed_for(model, ids, attn, batch.start) if shared_prefix else None
        if packed is not None:
            rows, length = packed.input_ids.shape
            seq, head = seq + rows * length, head + rows * (length - packed.keep_from)
        else:
            n, length = ids.shape
            seq, head = seq + n * length, head + n * (length - batch.start)
    return seq, head


def _grpo_run() -> tuple[list[dict], list[tuple[int, int]], tuple[int, int], int]:
    """A short GRPO training on the tiny default (grpo_step_timing's set-up, 8 prompts x G=8,
    16 tokens): each step's metrics, each update's (computed tokens, completion positions),
    the model's matmul parameters and num_iterations."""
    from benchmarks.grpo_step_timing import _model, _params, _rows
    from grpoflow.algorithms.grpo.update import ALGORITHM
    from grpoflow.io import write_jsonl
    from grpoflow.rl.run import build_rl_run

    rows = _rows()
    path, sections = _model("tiny", rows)
    params = _params("tiny", sections, False, STEPS + WARMUP)
    data = Path(tempfile.mkdtemp())
    write_jsonl(data / "train.jsonl", rows)
    write_jsonl(data / "val.jsonl", rows[:8])
    run = build_rl_run(params, ALGORITHM, data_dir=data, reference_dir=path)
    shapes: list[tuple[int, int]] = []
    update = run.trainer.update

    def counted(step, b):
        shapes.append(
            computed_tokens(b, run.trainer.learner.micro_batch_size, params.rl.engine.shared_prefix, run.engine.module)
        )
        return update(step, b)

    run.trainer.update = counted  # type: ignore[method-assign]
    steps: list[dict] = []
    run.trainer.train(on_step=lambda s, m: steps.append(m))
    return steps[WARMUP:], shapes[WARMUP:], matmul_parameters(run.engine.module), params.rl.num_iterations


def run() -> dict:
    """Matmul peak first, then the GRPO steps, then the peak again (the load may move between)."""
    before = {n: matmul_flops(n) for n in SIZES}
    steps, shapes, (n_body, n_head), iterations = _grpo_run()
    after = {n: matmul_flops(n) for n in SIZES}
    peak = max(max(before.values()), max(after.values()))
    flops = sum(update_flops(n_body, n_head, seq, head, iterations) for seq, head in shapes)
    seconds = sum(m[M.PHASE_UPDATE] for m in steps)
    achieved = flops / seconds
    return {
        "threads": torch.get_num_threads(),
        "matmul_gflops": {str(n): round(max(before[n], after[n]) / 1e9, 2) for n in SIZES},
        "matmul_peak_gflops": round(peak / 1e9, 2),
        "n_body": n_body,
        "n_head": n_head,
        "steps": len(steps),
        "update_gflops_per_step": round(flops / len(steps) / 1e9, 3),
        "update_seconds_per_step": seconds / len(steps),
        "update_achieved_gflops": round(achieved / 1e9, 3),
        "fraction_of_matmul_peak": achieved / peak,
        "phase_share": {
            M.phase_label(k): sum(m[k] for m in steps) / sum(m[M.PHASE_WALL] for m in steps) for k in M.PHASES
        },
    }
