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


def _step_reads(workspace: Path) -> dict[str, int]:
    """The reads of the second GRPO step (the first builds what later steps reuse)."""
    from grpoflow.config import validate_params
    from grpoflow.rl.algorithm import ALGORITHMS
    from grpoflow.rl.run import build_rl_run
    from tests.device_audit import audited

    with audited() as mode:
        assert mode is not None, "on CUDA the audit is CUDA itself: nothing to count"
        run = build_rl_run(
            validate_params(TINY), ALGORITHMS["grpo"], data_dir=workspace / "data", reference_dir=workspace / "ref"
        )
        run.trainer.step(0)
        mode.syncs.clear()
        run.trainer.step(1)
        return dict(mode.syncs)


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
    step = _step_reads(workspace)
    decode, tokens = _decode_reads(workspace)
    return {
        "step_reads": sum(step.values()),
        "step_reads_by_kind": step,
        "decode_reads": sum(decode.values()),
        "decode_reads_by_kind": decode,
        "decode_steps": tokens,
        "decode_reads_per_token": sum(decode.values()) / max(tokens, 1),
    }
