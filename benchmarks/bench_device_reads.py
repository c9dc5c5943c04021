"""Reads of the device (device-to-host waits) per GRPO training step and per generated token, as the
device audit counts them on its CPU stand-in (tests/device_audit.py): on a GPU each one stalls the
host until the stream has caught up, so the hot path keeps only those it needs (#49). The reference
is the work in the same run: the step's micro-batches and shared-prefix packs, the rollout's tokens."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.step_fingerprint import BASE, with_overrides
from tests.unit import rl_workspace

# The fingerprint's set, a step of 2 prompts x G=2 with an entropy bonus (a backward whatever the rewards).
TINY = with_overrides(
    BASE,
    {"rl.steps": 2, "rl.prompts_per_step": 2, "rl.sampling.max_completion_length": 8, "rl.entropy_coef": 0.01},
)
DECODE_TOKENS = 32


def _step_reads(workspace: Path, micro_batch_size: int) -> tuple[dict[str, int], dict[str, int]]:
    """The reads of the second GRPO step (the first builds what later steps reuse), by kind and by the
    function of the project that made each."""
    from grpoflow.config import validate_params
    from grpoflow.rl.algorithm import ALGORITHMS
    from grpoflow.rl.run import build_rl_run
    from tests.device_audit import audited

    params = validate_params(with_overrides(TINY, {"rl.engine.micro_batch_size": micro_batch_size}))
    with audited() as mode:
        assert mode is not None, "on CUDA the audit is CUDA itself: nothing to count"
        run = build_rl_run(params, ALGORITHMS["grpo"], data_dir=workspace / "data", reference_dir=workspace / "ref")
        run.trainer.step(0)
        mode.syncs.clear()
        mode.readers.clear()
        run.trainer.step(1)
        return dict(mode.syncs), dict(mode.readers)


def _decode_reads(workspace: Path) -> tuple[dict[str, int], int]:
    """The reads of one rollout of 2 prompts x G=2, and the tokens it generated."""
    from grpoflow.models.modeling import load_pretrained
    from grpoflow.rollout import Sampling
    from grpoflow.rollout.hf import HFRolloutEngine
    from tests.device_audit import audited

    with audited() as mode:
        assert mode is not None
        model, tok = load_pretrained(workspace / "ref")
        engine = HFRolloutEngine(model, tok)
        mode.syncs.clear()
        out = engine.generate(["Tom has 3 apples.", "Ann has 12."], 2, Sampling(1.0, 1.0, DECODE_TOKENS), seed=0)
        return dict(mode.syncs), int(out.completion_ids.shape[1])


def run() -> dict:
    workspace = rl_workspace.build(Path(tempfile.mkdtemp()))
    step, readers = _step_reads(workspace, 2)
    _, one_micro_batch = _step_reads(workspace, 4)
    decode, tokens = _decode_reads(workspace)
    return {
        "step_reads": sum(step.values()),
        "step_reads_by_kind": step,
        "step_reads_by_reader": readers,  # 2 micro-batches of 2 rows
        "step_reads_by_reader_one_micro_batch": one_micro_batch,  # the same step as 1 micro-batch of 4
        "decode_reads": sum(decode.values()),
        "decode_reads_by_kind": decode,
        "decode_steps": tokens,
        "decode_reads_per_token": sum(decode.values()) / max(tokens, 1),
    }
