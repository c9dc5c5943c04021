"""Leakage between training prompts and evaluation/benchmark prompts, three ways.

- **exact**: equal after :func:`normalize_text` (case, spacing, punctuation, number format).
- **ngram**: the train text shares word n-grams (default 8, as open-r1's decontamination) with one
  reference text, covering at least ``ngram_min_overlap`` of the train text's n-grams (0 = any
  shared n-gram, the classic rule; a higher share tolerates template phrases that many distinct
  problems share).
- **near**: Jaccard similarity of word-trigram shingle sets >= ``near_threshold``, found with
  MinHash + LSH banding (Broder 1997; Leskovec et al., "Mining of Massive Datasets", ch. 3) and
  confirmed exactly, so the cost grows linearly with the corpus, not with train x reference.

Texts shorter than n words contribute their whole word sequence as their one n-gram.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from grpoflow.data.text import normalize_text

_PRIME = (1 << 61) - 1
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Leak:
    train_index: int
    reference_index: int
    kind: str  # "exact" | "ngram" | "near"
    score: float  # 1.0 for exact; overlap share for ngram; Jaccard for near

    def to_dict(self) -> dict:
        return asdict(self)


def _hash(token: str) -> int:
    # Stable across processes (unlike hash()), so reports and tests are reproducible.
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")


def _grams(words: list[str], n: int) -> set[int]:
    if len(words) < n:
        return {_hash(" ".join(words))} if words else set()
    return {_hash(" ".join(words[i : i + n])) for i in range(len(words) - n + 1)}


def _exact(train_norm: list[str], ref_norm: list[str]) -> dict[int, Leak]:
    first = {}
    for j, text in enumerate(ref_norm):
        if text:  # an empty text carries nothing to leak
            first.setdefault(text, j)
    return {i: Leak(i, first[t], "exact", 1.0) for i, t in enumerate(train_norm) if t in first}


def _ngram(train_words, ref_words, n: int, min_overlap: float) -> dict[int, Leak]:
    index: dict[int, list[int]] = defaultdict(list)
    for j, words in enumerate(ref_words):
        for g in _grams(words, n):
            index[g].append(j)
    leaks = {}
    for i, words in enumerate(train_words):
        grams = _grams(words, n)
        hits: dict[int, int] = defaultdict(int)
        for g in grams:
            for j in index.get(g, ()):
                hits[j] += 1
        if not hits:
            continue
        j, count = max(hits.items(), key=lambda kv: (kv[1], -kv[0]))
        share = count / len(grams)
        if share >= min_overlap and share > 0:
            leaks[i] = Leak(i, j, "ngram", round(share, 4))
    return leaks


class _MinHasher:
    """``num_perm`` universal hash functions ``(a*x + b) mod p`` over 64-bit shingle hashes."""

    def __init__(self, num_perm: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME, num_perm, dtype=np.uint64)
        self.b = rng.integers(0, _PRIME, num_perm, dtype=np.uint64)

    def signature(self, shingles: set[int]) -> np.ndarray:
        x = np.fromiter(shingles, dtype=np.uint64, count=len(shingles)) % np.uint64(_PRIME)
        # uint64 arithmetic wraps: a universal-enough family for LSH, and fully vectorised.
        return (np.outer(x, self.a) + self.b).min(axis=0)


def _near(train_words, ref_words, threshold: float, num_perm: int = 64, bands: int = 16) -> dict[int, Leak]:
    rows = num_perm // bands
    hasher = _MinHasher(num_perm)
    ref_sh = [_grams(w, 3) for w in ref_words]
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for j, sh in enumerate(ref_sh):
        if sh:
            sig = hasher.signature(sh)
            for b in range(bands):
                buckets[(b, sig[b * rows : (b + 1) * rows].tobytes())].append(j)
    leaks = {}
    for i, words in enumerate(train_words):
        sh = _grams(words, 3)
        if not sh:
            continue
        sig = hasher.signature(sh)
        candidates = {j for b in range(bands) for j in buckets.get((b, sig[b * rows : (b + 1) * rows].tobytes()), ())}
        best = max(((len(sh & ref_sh[j]) / len(sh | ref_sh[j]), j) for j in candidates), default=None)
        if best and best[0] >= threshold:
            leaks[i] = Leak(i, best[1], "near", round(best[0], 4))
    return leaks


def leakage(
    train: Sequence[str],
    reference: Sequence[str],
    *,
    ngram: int = 8,
    ngram_min_overlap: float = 0.0,
    near_threshold: float | None = 0.8,
) -> list[Leak]:
    """Every train text that leaks into ``reference``, with its strongest kind (exact > ngram > near)."""
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    train_norm = [normalize_text(t) for t in train]
    ref_norm = [normalize_text(t) for t in reference]
    train_words = [t.split() for t in train_norm]
    ref_words = [t.split() for t in ref_norm]
    found = _near(train_words, ref_words, near_threshold) if near_threshold is not None else {}
    found.update(_ngram(train_words, ref_words, ngram, ngram_min_overlap))
    found.update(_exact(train_norm, ref_norm))
    return [found[i] for i in sorted(found)]


def find_leaks(train: Sequence[str], reference: Sequence[str], *, ngram: int = 8) -> list[int]:
    """Indices of ``train`` texts that leak into any ``reference`` text (exact, n-gram or near)."""
    return [leak.train_index for leak in leakage(train, reference, ngram=ngram)]
