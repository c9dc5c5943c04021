"""Leakage check at scale: 100k train x 10k reference texts (the data issue's target: well under
a minute on 2 cores), against the reference cost of just normalising and tokenising the same texts.

Texts are GSM8K-like synthetic word problems, generated here so the benchmark runs anywhere.
"""

from __future__ import annotations

import time

from grpoflow.config import SyntheticConfig
from grpoflow.data.leakage import leakage
from grpoflow.data.synthetic import generate
from grpoflow.data.text import normalize_text


def _texts(seed: int, n: int) -> list[str]:
    cfg = SyntheticConfig(num_examples=n, min_ops=2, max_ops=4, operand_max=500, ops=["+", "-", "*", "/"])
    return [p.question for p in generate(seed, cfg)]


def run(n_train: int = 100_000, n_ref: int = 10_000) -> dict:
    train, ref = _texts(1, n_train), _texts(2, n_ref)
    ref[:50] = train[:50]  # planted exact leaks
    start = time.perf_counter()
    for t in train + ref:
        normalize_text(t).split()
    t_tokenise = time.perf_counter() - start
    start = time.perf_counter()
    leaks = leakage(train, ref, ngram=8, ngram_min_overlap=0.5, near_threshold=0.8)
    t_leak = time.perf_counter() - start
    exact = sum(1 for leak in leaks if leak.kind == "exact")
    return {
        "train": n_train,
        "reference": n_ref,
        "leakage_seconds": round(t_leak, 2),
        "tokenise_seconds": round(t_tokenise, 2),
        "leakage_over_tokenise": round(t_leak / t_tokenise, 2),
        "planted_exact_found": exact,
        "leaks_by_kind": {k: sum(1 for x in leaks if x.kind == k) for k in ("exact", "ngram", "near")},
    }
