"""Out-of-memory back-off: the order of the changes, and a real GRPO trainer (tiny model, real
DeepSpeed engine on CPU, real HF rollouts) that meets injected OOMs during rollout and update; on
two processes, an OOM or a non-finite loss on one of them ends every process (none stalls)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.algorithms.grpo.config import GRPOConfig
from grpoflow.algorithms.grpo.update import GRPO
from grpoflow.config import ModelConfig, RLConfig
from grpoflow.models.engine import build_engine
from grpoflow.models.modeling import build_tiny_model, train_tokenizer
from grpoflow.rl.oom_backoff import OutOfMemoryAfterBackoff, distributed_update_oom, next_backoff
from grpoflow.rl.rewards import RewardComponent, WeightedReward
from grpoflow.rl.trainer import Trainer, TrainerInputs
from grpoflow.rollout.hf import HFRolloutEngine


def test_backoff_order_is_generations_then_length_then_micro_batch():
    settings = {"num_generations": 8, "max_completion_length": 64, "micro_batch_size": 4}
    seen = []
    while change := next_backoff(
        settings["num_generations"], settings["max_completion_length"], settings["micro_batch_size"], 16
    ):
        settings[change[0]] = change[1]
        seen.append(change)
    assert seen == [
        ("num_generations", 4),
        ("num_generations", 2),
        ("max_completion_length", 32),
        ("max_completion_length", 16),
        ("micro_batch_size", 2),
        ("micro_batch_size", 1),
    ]


@given(st.integers(2, 64), st.integers(1, 512), st.integers(1, 128), st.integers(1, 64))
def test_backoff_always_shrinks_stays_valid_and_ends(g, max_len, micro, min_len):
    max_len = max(max_len, min_len)
    for _ in range(64):
        change = next_backoff(g, max_len, micro, min_len)
        if change is None:
            assert (g, max_len, micro) == (2, min_len, 1)
            return
        key, value = change
        old = {"num_generations": g, "max_completion_length": max_len, "micro_batch_size": micro}[key]
        assert value < old
        g, max_len, micro = (
            value if key == "num_generations" else g,
            value if key == "max_completion_length" else max_len,
            value if key == "micro_batch_size" else micro,
        )
        assert g >= 2 and max_len >= min_len and micro >= 1
    pytest.fail("back-off did not end")


class MemoryBudget:
    """Raises torch.OutOfMemoryError, as CUDA would, while a request exceeds the budget."""

    def __init__(self, max_rollout_tokens: int, max_micro_batch: int):
        self.max_rollout_tokens, self.max_micro_batch = max_rollout_tokens, max_micro_batch
        self.raised = 0

    def check(self, what: str, used: int, limit: int) -> None:
        if used > limit:
            self.raised += 1
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected): {what} {used} > {limit}")


@pytest.fixture(scope="module")
def parts():
    texts = [f"Tom has {a} apples and gets {b} more. How many? #### {a + b}" for a in range(10) for b in range(10)]
    tok = train_tokenizer(texts, vocab_size=96)
    model = build_tiny_model(
        ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_length=128), tok, seed=0
    )
    prompts = [{"prompt": t.split(" How")[0] + " How many?", "reference_answer": t.split("#### ")[1]} for t in texts]
    return tok, model, prompts


def trainer_with_budget(parts, budget: MemoryBudget, **cfg_overrides) -> Trainer:
    tok, model, prompts = parts
    cfg = RLConfig(
        steps=2,
        prompts_per_step=2,
        num_generations=8,
        checkpoint_every=100,
        eval_every=100,
        sampling={"max_completion_length": 32},
        engine={"micro_batch_size": 4, "lr": 1e-3},
        oom_min_completion_length=8,
        **cfg_overrides,
    )
    engine = build_engine(model, cfg.engine, cfg.prompts_per_step * cfg.num_generations)
    rollout = HFRolloutEngine(engine.module, tok)
    generate = rollout.generate

    def generate_within_budget(batch, n, sampling, seed):
        budget.check("rollout tokens", len(batch) * n * sampling.max_new_tokens, budget.max_rollout_tokens)
        return generate(batch, n, sampling, seed)

    rollout.generate = generate_within_budget
    reward = WeightedReward([RewardComponent("len", lambda c, r: [float(len(x) % 3) for x in c], 1.0)])
    grpo = GRPO(GRPOConfig(beta=0.0))

    class WithinBudget:
        """GRPO's update, run out of memory where its micro-batch exceeds the budget."""

        def update(self, batch, learner):
            budget.check("micro-batch", engine.train_micro_batch_size_per_gpu(), budget.max_micro_batch)
            return grpo.update(batch, learner)

    inputs = TrainerInputs(cfg, engine, None, rollout, tok, reward, prompts, seed=0)
    return Trainer(inputs, WithinBudget(), engines={"critic": CriticGradients()})


class CriticGradients:
    """An update's own engine as the loop sees it (a critic's): it counts the back-offs that clear it."""

    cleared = 0

    def zero_grad(self) -> None:
        self.cleared += 1


def test_trainer_backs_off_in_order_records_each_change_and_finishes(parts):
    # 2 prompts x G=8 x 32 tokens = 512 rollout tokens; the budget fits 2 x 2 x 16 = 64, and a micro-batch
    # of 1. The update's OOMs shorten completions once more (16 -> 8) before the micro-batch: that is the order.
    budget = MemoryBudget(max_rollout_tokens=64, max_micro_batch=1)
    trainer = trainer_with_budget(parts, budget)
    steps = []
    trainer.train(
        on_step=lambda step, m: steps.append(
            (step, m["num_generations"], m["max_completion_length"], m["micro_batch_size"])
        )
    )
    assert steps == [(0, 2, 8, 1), (1, 2, 8, 1)]
    assert trainer.state.backoff == {"num_generations": 2, "max_completion_length": 8, "micro_batch_size": 1}
    events = sorted(
        s.evidence.split("; ")[1] for s in trainer.health.symptoms.values() if s.name.startswith("oom_backoff")
    )
    assert events == sorted(
        [
            "num_generations 8 -> 4",
            "num_generations 4 -> 2",
            "max_completion_length 32 -> 16",
            "max_completion_length 16 -> 8",
            "micro_batch_size 4 -> 2",
            "micro_batch_size 2 -> 1",
        ]
    )
    assert budget.raised == 6
    assert trainer.engines["critic"].cleared == 6  # a retry leaves no half-accumulated critic gradients


def test_trainer_fails_clearly_when_nothing_fits(parts):
    trainer = trainer_with_budget(parts, MemoryBudget(max_rollout_tokens=10, max_micro_batch=1))
    with pytest.raises(
        OutOfMemoryAfterBackoff, match=r"num_generations=2, max_completion_length=8, micro_batch_size=1"
    ):
        trainer.train()


def test_backoff_can_be_switched_off(parts):
    trainer = trainer_with_budget(parts, MemoryBudget(max_rollout_tokens=64, max_micro_batch=1), oom_backoff=False)
    with pytest.raises(OutOfMemoryAfterBackoff, match="oom_backoff is false"):
        trainer.train()


def _two_process_worker(rank: int, port: int, results, phase: str) -> None:
    """A two-process GRPO run of 2 steps, G=8, that runs out of memory on rank 1 alone, in ``phase``
    (``rollout`` or ``update``) of its first step, or whose loss is NaN there (``nan``); what each
    process ended with goes into ``results``."""
    import os

    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    tok = train_tokenizer([f"Tom has {a} apples. How many? #### {a}" for a in range(50)], vocab_size=96)
    model = build_tiny_model(
        ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_length=128), tok, seed=0
    )
    prompts = [{"prompt": f"Tom has {a} apples. How many?", "reference_answer": str(a)} for a in range(50)]
    cfg = RLConfig(
        steps=2,
        prompts_per_step=2,
        num_generations=8,
        checkpoint_every=100,
        eval_every=100,
        sampling={"max_completion_length": 8},
        engine={"micro_batch_size": 4, "lr": 1e-3},
        oom_min_completion_length=8,
    )
    engine = build_engine(model, cfg.engine, cfg.prompts_per_step * cfg.num_generations)
    rollout = HFRolloutEngine(engine.module, tok)
    generate = rollout.generate

    def generate_rank1_oom_at_g8(batch, n, sampling, seed):
        if phase == "rollout" and rank == 1 and n == 8:  # only this process runs out of memory
            raise torch.OutOfMemoryError("CUDA out of memory (injected on rank 1)")
        return generate(batch, n, sampling, seed)

    rollout.generate = generate_rank1_oom_at_g8
    reward = WeightedReward([RewardComponent("len", lambda c, r: [float(len(x) % 3) for x in c], 1.0)])
    trainer = Trainer(
        TrainerInputs(cfg, engine, None, rollout, tok, reward, prompts, seed=0, rank=rank, world=2),
        GRPO(GRPOConfig(beta=0.0)),
    )
    policy_logprobs, passes = trainer.learner.policy_logprobs, []

    def second_micro_batch_oom_on_rank1(b, sl):
        passes.append(sl)
        if phase == "update" and rank == 1 and len(passes) == 2:  # mid-accumulation: rank 0 reduces gradients
            raise torch.OutOfMemoryError("CUDA out of memory (injected on rank 1, in the update)")
        logp, entropy = policy_logprobs(b, sl)
        if phase == "nan" and rank == 1 and len(passes) == 1:  # a diverged loss on one process alone
            logp = logp * float("nan")
        return logp, entropy

    trainer.learner.policy_logprobs = second_micro_batch_oom_on_rank1
    gs: list[int] = []
    try:
        trainer.train(on_step=lambda step, m: gs.append(m["num_generations"]))
    except Exception as exc:
        results[rank] = (type(exc).__name__, str(exc))
        raise
    results[rank] = (gs, dict(trainer.state.backoff))


def _two_processes(phase: str, deadline_s: float = 300) -> dict:
    """:func:`_two_process_worker` on two processes; what each ended with. A process that has not ended
    by ``deadline_s`` (a stall: the test fails rather than wait for the collective's half-hour timeout)."""
    import time

    import torch.multiprocessing as mp

    from grpoflow.ports import free_port

    results = mp.Manager().dict()
    context = mp.spawn(_two_process_worker, args=(free_port(), results, phase), nprocs=2, join=False)
    start = time.monotonic()
    try:
        while not context.join(timeout=2):
            if time.monotonic() - start > deadline_s:
                for process in context.processes:
                    process.kill()
                pytest.fail(f"stalled: the processes had not ended after {deadline_s} s ({dict(results)})")
    except mp.ProcessRaisedException:
        pass  # a process raised (the other is then stopped, as torchrun stops it): results say which
    finally:
        for name in context.error_files:  # torch writes each process's traceback to /tmp and leaves it
            Path(name).unlink(missing_ok=True)
    return dict(results)


def test_an_oom_on_one_process_backs_off_every_process():
    results = _two_processes("rollout")
    assert results[0] == results[1] == ([4, 4], {"num_generations": 4})


def test_an_oom_in_one_processs_update_stops_it_with_the_setting_to_change():
    """The others wait in the update's gradient reduction: a back-off on one process alone would
    stall them all (it did, until the collective's timeout); it stops instead, naming the setting."""
    results = _two_processes("update")
    name, message = results[1]
    assert name == "OutOfMemoryInDistributedUpdate", results
    assert "at step 1 on process 1 of 2" in message and "set rl.num_generations: 4 (now 8)" in message, message


def test_a_non_finite_loss_on_one_process_stops_every_process_at_the_same_step():
    """Rank 1's loss is NaN: the optimizer step's guard counts non-finite losses over every process, so
    each stops there before any weight moves (whatever optimizer DeepSpeed runs), none waiting on another."""
    results = _two_processes("nan")
    assert results[1][0] == results[0][0] == "TrainingDiverged", results
    assert "step 0: loss is nan" in results[1][1], results
    assert "step 0: loss is not finite in 1 micro-batch(es) of another process" in results[0][1], results


def test_a_distributed_update_oom_names_the_next_setting_or_that_none_is_left():
    settings = {"num_generations": 2, "max_completion_length": 64, "micro_batch_size": 4}
    message = distributed_update_oom(4, 1, 2, settings, 16)
    assert "at step 5 on process 1 of 2" in message, message
    assert "set rl.sampling.max_completion_length: 32 (now 64)" in message, message
    spent = {"num_generations": 2, "max_completion_length": 16, "micro_batch_size": 1}
    assert distributed_update_oom(0, 3, 4, spent, 16).endswith("or lower rl.prompts_per_step")
