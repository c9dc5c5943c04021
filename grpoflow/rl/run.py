"""An RL run, built in one place from :class:`~grpoflow.config.Params`: the policy engine, the
reference (or none), the rollout engine, the reward, the algorithm's trainer (and its extra
engines), the fingerprint that guards resuming, and the checkpoint state that travels with it.

The training stages (``tasks.grpo``, ``tasks.ppo``) only parse arguments, read and write files and
log to MLflow; everything that decides how training behaves is here, so that a new algorithm is an
update with its :class:`~grpoflow.rl.algorithm.Algorithm` (see :mod:`grpoflow.algorithms.grpo.update`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpoflow import catalog
from grpoflow.config import Params, rules
from grpoflow.evaluation.accuracy import greedy_accuracy
from grpoflow.io import read_jsonl, sha256_paths
from grpoflow.models import checkpoint
from grpoflow.models.engine import build_engine, init_distributed
from grpoflow.models.lora import AdaptersDisabled, add_adapters
from grpoflow.models.modeling import load_frozen, load_pretrained
from grpoflow.models.prompting import Prompter, prompter_for
from grpoflow.provenance import module_files
from grpoflow.rl import loop_state
from grpoflow.rl.algorithm import Algorithm
from grpoflow.rl.health import HealthMonitor, Symptom
from grpoflow.rl.loop_state import LoopState
from grpoflow.rl.preflight import Preflight, run_preflight
from grpoflow.rl.rewards import build_reward, correctness_scorer
from grpoflow.rl.trainer import Trainer, TrainerInputs
from grpoflow.rollout import RolloutEngine, build_rollout

# The core's entry point for training: its import closure is the code a checkpoint depends on.
TRAINING_CODE = "grpoflow.rl.run"


def needs_reference(params: Params, algorithm: Algorithm) -> bool:
    """Whether a run loads the frozen reference: exactly when its algorithm penalises KL to it
    (:func:`grpoflow.config.rules.needs_reference`). Decided once, here; the run's code then asks the
    trainer whether it has one (``trainer.ref is None``)."""
    return rules.needs_reference(params, algorithm.name)


def fingerprint(params: Params, algorithm: Algorithm, data_dir: Path, reference_dir: Path, seed: int) -> str:
    """What a checkpoint must match to be resumed: the params that shape training, the data, the
    reference, and the training code (the import closure of this module and of the algorithm's,
    verifiers included)."""
    sections = {"experiment", "model", "rewards", "sandbox", "rl", *algorithm.sections}
    h = hashlib.sha256(json.dumps(params.model_dump(mode="json", include=sections), sort_keys=True).encode())
    h.update(f"{algorithm.name}:{seed}".encode())
    h.update(sha256_paths([data_dir / "train.jsonl", reference_dir / "model.safetensors"]).encode())
    h.update(sha256_paths(module_files(TRAINING_CODE, algorithm.module), root=".").encode())
    return h.hexdigest()[:16]


@dataclass(kw_only=True)
class RLRun:
    """Everything one training process needs; built by :func:`build_rl_run`, field by name."""

    algorithm: Algorithm
    params: Params
    seed: int
    rank: int
    world: int
    engine: Any  # a DeepSpeed engine
    tokenizer: Any
    prompter: Prompter
    trainer: Trainer
    engines: dict  # extra engines checkpointed beside the policy's, by name
    fingerprint: str
    val: list[dict]
    health: HealthMonitor = field(default_factory=HealthMonitor)

    @property
    def reference(self) -> Any:
        """The frozen reference the run penalises KL to, or None: the one place later code asks
        (loaded exactly when :func:`needs_reference`; the rules in :mod:`grpoflow.config.rules` refuse at load
        every setting that would need one the run does not have)."""
        return self.trainer.ref

    @property
    def lead(self) -> bool:
        """Rank 0: the process that evaluates, writes files and logs."""
        return self.rank == 0

    def evaluate(self, step: int) -> dict:
        """Greedy val accuracy of the current policy (on the lead process; {} elsewhere)."""
        if not self.lead:
            return {}
        p = self.params
        res = greedy_accuracy(
            self.trainer.batches.rollout,  # kept in sync with the policy after every step (vLLM) or the policy itself
            self.val[: p.sft.eval_examples],
            correctness_scorer(p),
            self.prompter,
            max_new_tokens=p.rl.sampling.max_completion_length,
        )
        return {"val_accuracy": res.accuracy}

    def preflight(self) -> Preflight:
        """The starting policy's learning signal on ``rl.preflight.prompts`` train prompts (before step 1)."""
        return run_preflight(
            self.trainer.batches.rollout,
            self.prompter.prompt,
            self.trainer.batches.reward,
            correctness_scorer(self.params),
            self.trainer.batches.prompts,
            self.params.rl,
            seed=self.seed,
        )

    def resume(self, directory: str | Path) -> tuple[dict | None, list[str]]:
        """Continue from the newest intact checkpoint of these inputs, if any: ``(the stage's own
        extra state saved with it, or None when starting over; the checkpoints skipped as corrupt)``."""
        resumed, skipped = loop_state.load(self.engine, directory, self.fingerprint, self.engines)
        for problem in skipped:
            self.health.symptoms[f"checkpoint_corrupt_{problem.split(':')[0]}"] = Symptom(
                "checkpoint_corrupt",
                resumed.state.step if resumed else 0,
                problem,
                "the save was interrupted, or the file was damaged on disk",
                "none needed: the newest intact checkpoint was used",
            )
        if resumed is None:
            return None, skipped
        self.trainer.restore(resumed.state)
        if "reference" in resumed.extra and self.reference is not None:  # refreshed since the start
            self.reference.load_state_dict(resumed.extra["reference"])
        self.trainer.batches.reward.load_state_dict(resumed.extra.get("reward_norm", {}))
        self.health.history = resumed.extra.get("health_history", [])
        self.health.symptoms |= {k: Symptom(**v) for k, v in resumed.extra.get("health_symptoms", {}).items()}
        self.trainer.batches.rollout.sync_weights(self.engine.module)
        return resumed.extra.get("stage", {}), skipped

    def save(self, directory: str | Path, state: LoopState, stage_state: dict) -> None:
        """A resumable checkpoint of every engine, the loop, the health record and ``stage_state``."""
        loop_state.save(
            self.engine,
            directory,
            state,
            self.fingerprint,
            extra_engines=self.engines,
            keep=self.params.rl.keep_checkpoints,
            extra={
                "health_history": self.health.history,
                "health_symptoms": {k: s.to_dict() for k, s in self.health.symptoms.items()},
                "stage": stage_state,
                "reward_norm": self.trainer.batches.reward.state_dict(),
                **self._refreshed_reference(state),
            },
        )

    def _refreshed_reference(self, state: LoopState) -> dict:
        """The reference's weights once a refresh has moved them (rl.ref_sync_every): a resumed run
        must penalise KL to the same anchor."""
        every, ref = self.params.rl.ref_sync_every, self.reference
        if not every or ref is None or state.step < every:
            return {}
        return {"reference": {k: v.detach().cpu() for k, v in ref.state_dict().items()}}

    def export(self, out: str | Path) -> None:
        """The trained policy as a plain Hugging Face checkpoint."""
        checkpoint.export_model(self.engine, self.tokenizer, out)

    def close_rollouts(self) -> None:
        """Release the rollout engine (vLLM's engine core and process groups) once training is over."""
        self.trainer.batches.rollout.close()


def _policy_engine(params: Params, algorithm: Algorithm, reference_dir: Path) -> tuple[Any, Any, Any]:
    """``(policy, tokenizer, its DeepSpeed engine)``: the reference model as the starting policy,
    with gradient checkpointing and LoRA adapters as ``model`` asks, at the algorithm's learning rate."""
    rl = params.rl
    engine_cfg = rl.engine.model_copy(update={"lr": algorithm.policy_lr(params)})
    policy, tokenizer = load_pretrained(reference_dir)
    if params.model.gradient_checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if params.model.lora:
        policy = add_adapters(policy, params.model.lora)
    return policy, tokenizer, build_engine(policy, engine_cfg, rl.prompts_per_step * max(rl.generation_sizes()))


def _reference(params: Params, algorithm: Algorithm, engine: Any, reference_dir: Path) -> Any:
    """The frozen reference, or None when the run needs none (:func:`needs_reference`)."""
    if not needs_reference(params, algorithm):
        return None
    # A LoRA policy with its adapters off is the reference itself: no second copy of the model.
    if params.model.lora:
        return AdaptersDisabled(engine.module)
    # In the policy's dtype: a bf16 engine's reference pass costs a bf16 pass, not an fp32 one.
    return load_frozen(reference_dir, dtype=engine.module.dtype)


def _rollout(params: Params, engine: Any, tokenizer: Any, reference_dir: Path, prompter: Prompter) -> RolloutEngine:
    """The rollout engine ``rl.rollout_engine`` names, sampling the policy of ``engine``."""
    return build_rollout(
        params.rl.rollout_engine,
        engine.module,
        tokenizer,
        reference_dir,
        seed=params.experiment.seed,
        max_model_len=params.model.max_length,
        stop_ids=prompter.stop_ids,
        decode=params.rl.decode,
    )


def build_rl_run(
    params: Params,
    algorithm: Algorithm,
    *,
    data_dir: str | Path,
    reference_dir: str | Path,
    seed: int | None = None,
    rollout: RolloutEngine | None = None,
) -> RLRun:
    """Build the run of ``algorithm`` from ``params`` on the prepared data and the reference model.

    ``seed`` (default ``experiment.seed``) varies sampling and prompt order alone, on the same data
    and reference: the ablation's seed spread. ``rollout``: the engine to sample with instead of the
    one ``rl.rollout_engine`` names (tests inject recorded rollouts; sharding and scoring stay the run's)."""
    import torch

    rank, world = init_distributed()
    seed = params.experiment.seed if seed is None else seed
    torch.manual_seed(seed + rank)
    data_dir, reference_dir = Path(data_dir), Path(reference_dir)
    rl = params.rl
    policy, tokenizer, engine = _policy_engine(params, algorithm, reference_dir)
    reference = _reference(params, algorithm, engine, reference_dir)
    prompter = prompter_for(policy, tokenizer, params.prompt)
    if rollout is None:
        rollout = _rollout(params, engine, tokenizer, reference_dir, prompter)
    health = HealthMonitor()
    inputs = TrainerInputs(
        cfg=rl,
        engine=engine,
        ref_model=reference,
        rollout=rollout,
        tokenizer=tokenizer,
        reward=build_reward(params),
        prompts=read_jsonl(data_dir / "train.jsonl"),
        seed=seed,
        prompter=prompter,
        rank=rank,
        world=world,
        health=health,
    )
    built = algorithm.build(params, inputs, reference_dir)
    trainer = Trainer(inputs, built.update, kl_coef=catalog.kl_coef(params, algorithm.name), engines=built.engines)
    return RLRun(
        algorithm=algorithm,
        params=params,
        seed=seed,
        rank=rank,
        world=world,
        engine=engine,
        tokenizer=tokenizer,
        prompter=prompter,
        trainer=trainer,
        engines=built.engines,
        fingerprint=fingerprint(params, algorithm, data_dir, reference_dir, seed),
        val=read_jsonl(data_dir / "val.jsonl"),
        health=health,
    )
