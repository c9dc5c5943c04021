"""Each stage's one-line MLflow description, from the metrics it records, against the line by hand."""

from __future__ import annotations

from grpoflow import catalog
from tasks import notes


def test_prepare_counts_the_splits_and_the_quarantine_and_gives_the_gate():
    metrics = {
        "rows": {"train": 2480, "val": 310, "test": 310, "kept": 3100, "quarantined": 0},
        "benchmarks": {},
        "pairs": {"kept": 0, "sources": {}},
        "passed": True,
        "failures": [],
    }
    assert notes.prepare_note(metrics) == "2,480 train / 310 val / 310 test prompts; 0 quarantined; gate passed"
    metrics |= {
        "rows": {"train": 900, "val": 50, "test": 50, "quarantined": 1234},
        "benchmarks": {"gsm8k": 1319, "aime": 30},
        "pairs": {"kept": 120},
        "passed": False,
        "failures": ["leakage gate: 1 train rows leak", "too many rejected rows"],
    }
    assert notes.prepare_note(metrics) == (
        "900 train / 50 val / 50 test prompts; 1,234 quarantined; benchmarks aime 30, gsm8k 1,319; "
        "120 preference pairs; gate FAILED: leakage gate: 1 train rows leak (+1 more)"
    )


def test_the_verifier_gate_counts_its_cases_and_names_the_weakest_rates():
    metrics = {
        "verifiers": {
            "math.val": {"cases": 50, "precision": 1.0, "recall": 0.98},
            "math.bench_gsm8k": {"cases": 13, "precision": 0.9, "recall": 1.0},
        },
        "passed": True,
        "failures": [],
    }
    assert notes.verifiers_note(metrics) == (
        "verifier gate passed; 63 cases on 2 sets, lowest precision 90.0%, lowest recall 98.0%"
    )
    metrics = {
        "verifiers": {"code.val": {"cases": 8, "precision": 0.5, "recall": 1.0}},
        "reward_model": {"win_rate": 0.875, "cases": 16},
        "passed": False,
        "failures": ["code.val: precision 0.5 < 0.95"],
    }
    assert notes.verifiers_note(metrics) == (
        "verifier gate FAILED: code.val: precision 0.5 < 0.95; 8 cases on 1 set, lowest precision 50.0%, "
        "lowest recall 100.0%; reward model beats perturbed answers in 87.5% of 16 rows"
    )


def test_sft_gives_the_references_score_and_its_training():
    metrics = {"val_accuracy": 0.3125, "val_examples": 64, "final_loss": 0.21349, "steps": 120}
    assert notes.sft_note(metrics) == "val 31.2% on 64 prompts after 120 steps (final loss 0.213)"
    untrained = {"val_accuracy": 0.05, "val_examples": 16, "final_loss": None, "steps": 0}
    assert notes.sft_note(untrained) == "val 5.0% on 16 prompts; not fine-tuned (the base model is the reference)"


def test_evaluate_lists_every_models_score_the_reference_first():
    models = {
        "ppo": {"test": {"pass@1": 0.375, "examples": 240}, "forgetting_flagged": True},
        "grpo": {"test": {"pass@1": 0.4375, "pass@1_se": 0.015, "examples": 240}, "forgetting_flagged": False},
        "sft": {"test": {"pass@1": 0.3125, "pass@1_se": 0.013, "examples": 240}, "forgetting_flagged": False},
    }
    assert notes.evaluate_note({"models": models}) == (
        "test pass@1: sft 31.2% ± 1.3, grpo 43.8% ± 1.5, ppo 37.5% (240 prompts); forgetting flagged: ppo"
    )
    big = {"sft": {"test": {"pass@1": 0.102, "pass@1_se": 0.0096, "examples": 1000}}}
    assert (
        notes.evaluate_note({"models": big}) == "test pass@1: sft 10.2% ± 1.0 (1,000 prompts); forgetting flagged: none"
    )
    assert notes.evaluate_note({"models": {"sft": {"test": {"pass@4": 0.5}}}}) == "not evaluated on the test split"


def test_compare_names_the_winner_its_scores_and_the_memory_ratio():
    metrics = {
        "summaries": {"grpo": {"test_pass@1": 0.4375}, "ppo": {"test_pass@1": 0.375}},
        "memory": {"pair": ["grpo", "ppo"], "grpo_over_ppo": 0.8712},
        "winner_on_test_pass@1": "grpo",
    }
    assert notes.compare_note(metrics) == (
        "winner on test pass@1: grpo (grpo 43.8%, ppo 37.5%); peak memory GRPO / PPO 0.87"
    )


def test_the_memory_ratio_of_another_pair_is_read_under_that_pairs_key():
    """#52: the key is the pair's, not a hand-typed grpo_over_ppo."""
    metrics = {
        "summaries": {"rloo": {"test_pass@1": 0.5}, "ppo": {"test_pass@1": 0.25}},
        "memory": {"pair": ["rloo", "ppo"], "rloo_over_ppo": 0.9049, "grpo_over_ppo": 0.1},
        "winner_on_test_pass@1": "rloo",
    }
    note = notes.compare_note(metrics)
    assert note.endswith(f"peak memory {catalog.title('rloo')} / PPO 0.90"), note
    assert notes.compare_note({**metrics, "memory": {}}) == "winner on test pass@1: rloo (rloo 50.0%, ppo 25.0%)"


def test_the_reward_model_and_the_base_model_in_one_line():
    metrics = {
        "heldout_accuracy": 0.8125,
        "pairs": {"data": 300, "self_built": 20, "train": 256, "heldout": 64, "too_long": 0},
    }
    assert notes.reward_model_note(metrics) == (
        "held-out pairwise accuracy 81.2% on 64 pairs (train 256: 300 from data.pairs, 20 self-built)"
    )
    record = {"kind": "tiny", "source": "gpt2-config", "license": "MIT", "sha256": "ab"}
    assert notes.base_model_note(record) == "tiny gpt2-config (licence MIT)"


def test_the_health_verdict_names_what_stands_and_what_cleared():
    cleared = {"name": "reward_flat", "status": "cleared", "cleared_by": 80}
    standing = {"name": "kl_rising_fast", "status": "standing"}
    assert notes.health_text([], []) == "health ok"
    assert notes.health_text([], [cleared]) == "health ok (cleared: reward_flat)"
    assert notes.health_text(["kl_rising_fast"], [standing, cleared]) == "health kl_rising_fast (cleared: reward_flat)"
