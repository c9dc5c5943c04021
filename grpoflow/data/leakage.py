"""Leakage between training prompts and evaluation/benchmark prompts, three ways.

- **exact**: equal after :func:`~grpoflow.data.text.match_key` (case, spacing, punctuation, number format,
  invisible characters and look-alike letters).
- **ngram**: the train text shares word n-grams (default 8, as open-r1's decontamination) with one
  reference text, covering at least ``ngram_min_overlap`` of the train text's n-grams (0 = any
  shared n-gram, the classic rule; a higher share tolerates template phrases that many distinct
  problems share).
- **near**: Jaccard similarity of word-trigram shingle sets >= ``near_threshold``, found with
  MinHash + LSH banding (Broder 1997; Leskovec et al., "Mining of Massive Datasets", ch. 3) and
  confirmed exactly, so the cost grows linearly with the corpus, not with train x reference.

Texts shorter than n words contribute their whole word sequence as their one n-gram.

Numbers are compared as values (``numbers="values"``): an n-gram or near match counts only where every
number of the reference text is in the train text too (``1,050`` and ``1050.0`` are one value). Templated
siblings, the same words around other numbers ("splits 50 coins among 2" against "splits 88 coins among
2"), are different problems with different answers, not copies; a copy keeps the numbers, and so does a
train text that embeds a reference text whole. ``numbers="ignore"`` counts siblings as leaks too.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from grpoflow.data.text import match_key

_PRIME = (1 << 61) - 1
_NUMBER_WORD = re.compile(r"\d+(?:\.\d+)?")  # a number as match_key writes it: no sign, separators or trailing zeros
Compatible = Callable[[int, int], bool]  # whether train text i may leak into reference text j
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Leak:
    """A train text that matches a reference text: which, how (kind) and how much (score)."""

    train_index: int
    reference_index: int
    kind: str  # "exact" | "ngram" | "near"
    score: float  # 1.0 for exact; overlap share for ngram; Jaccard for near

    def to_dict(self) -> dict:
        """The leak as a JSON-able dict."""
        return asdict(self)


def _word_ids(texts: list[list[str]], vocab: dict[str, int]) -> list[tuple[int, ...]]:
    """Words as integers. A tuple of ints hashes the same in every process (str hashes are
    salted), so grams and MinHash signatures are reproducible for the same inputs."""
    return [tuple(vocab.setdefault(w, len(vocab)) for w in words) for words in texts]


def _grams(ids: tuple[int, ...], n: int) -> set[int]:
    if len(ids) < n:
        return {hash(ids)} if ids else set()
    return {hash(ids[i : i + n]) for i in range(len(ids) - n + 1)}


def _exact(train_norm: list[str], ref_norm: list[str]) -> dict[int, Leak]:
    first: dict[str, int] = {}
    for j, text in enumerate(ref_norm):
        if text:  # an empty text carries nothing to leak
            first.setdefault(text, j)
    return {i: Leak(i, first[t], "exact", 1.0) for i, t in enumerate(train_norm) if t in first}


def _numbers_fit(train_words: list[list[str]], ref_words: list[list[str]]) -> Compatible:
    """The check of ``numbers="values"``: every number of reference text j (with its count) is in train text i."""
    train_numbers = [Counter(w for w in words if _NUMBER_WORD.fullmatch(w)) for words in train_words]
    ref_numbers = [Counter(w for w in words if _NUMBER_WORD.fullmatch(w)) for words in ref_words]
    return lambda i, j: not (ref_numbers[j] - train_numbers[i])


def _ngram(
    train_words, ref_words, n: int, min_overlap: float, fits: Compatible | None = None, common: int = 64
) -> dict[int, Leak]:
    """Best single-reference n-gram overlap of each train text.

    Candidates come from the train text's *rare* shared n-grams (in at most ``common`` reference
    texts); phrases shared by many references (templates, boilerplate) only add to the count of a
    candidate found otherwise. This keeps the cost linear instead of train x reference on
    templated corpora; a text built only of common phrases is compared with the references of
    its least common one.
    """
    ref_grams = [_grams(w, n) for w in ref_words]
    index: dict[int, list[int]] = defaultdict(list)
    for j, grams in enumerate(ref_grams):
        for g in grams:
            index[g].append(j)
    leaks = {}
    for i, words in enumerate(train_words):
        grams = _grams(words, n)
        shared = [index[g] for g in grams if g in index]
        if not shared:
            continue
        rare = [refs for refs in shared if len(refs) <= common]
        if rare:
            # A candidate can reach the threshold only with enough rare hits plus every common one.
            hits: dict[int, int] = defaultdict(int)
            for refs in rare:
                for j in refs:
                    hits[j] += 1
            need = min_overlap * len(grams) - (len(shared) - len(rare))
            candidates = [j for j, h in hits.items() if h >= need] or [max(hits, key=lambda j: hits[j])]
        else:
            candidates = min(shared, key=len)[:common]
        candidates = [j for j in candidates if fits is None or fits(i, j)]
        if not candidates:
            continue
        count, j = max((len(grams & ref_grams[j]), -j) for j in candidates)
        share = count / len(grams)
        if share >= min_overlap and share > 0:
            leaks[i] = Leak(i, -j, "ngram", round(share, 4))
    return leaks


class _MinHasher:
    """``num_perm`` universal hash functions ``(a*x + b)`` over 64-bit shingle hashes."""

    def __init__(self, num_perm: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME, num_perm, dtype=np.uint64) | np.uint64(1)
        self.b = rng.integers(0, _PRIME, num_perm, dtype=np.uint64)

    def signatures(self, shingle_sets: list[set[int]], chunk: int = 20_000) -> np.ndarray:
        """One row of ``num_perm`` minima per set (all-max for an empty set), vectorised in chunks."""
        out = np.full((len(shingle_sets), len(self.a)), np.iinfo(np.uint64).max, dtype=np.uint64)
        for lo in range(0, len(shingle_sets), chunk):
            sets = shingle_sets[lo : lo + chunk]
            lens = np.fromiter((len(x) for x in sets), dtype=np.int64, count=len(sets))
            nonempty = np.flatnonzero(lens)
            if not len(nonempty):
                continue
            flat = np.fromiter((h for x in sets for h in x), dtype=np.int64, count=int(lens.sum())).view(np.uint64)
            # uint64 arithmetic wraps: a universal-enough family for LSH, fully vectorised.
            values = np.outer(flat, self.a) + self.b
            starts = np.concatenate(([0], np.cumsum(lens)[:-1]))[nonempty]
            out[lo + nonempty] = np.minimum.reduceat(values, starts, axis=0)
        return out


def _band_keys(sigs: np.ndarray, bands: int) -> np.ndarray:
    """One 64-bit key per (text, band): equal bands give equal keys (collisions only add candidates)."""
    rows = sigs.shape[1] // bands
    mix = np.array([0x9E3779B97F4A7C15 * (k + 1) & _MASK64 for k in range(rows)], dtype=np.uint64)
    return (sigs.reshape(len(sigs), bands, rows) * mix).sum(axis=2, dtype=np.uint64)


def _near(
    train_words, ref_words, threshold: float, fits: Compatible | None = None, num_perm: int = 64, bands: int = 16
) -> dict[int, Leak]:
    hasher = _MinHasher(num_perm)
    ref_sh = [_grams(w, 3) for w in ref_words]
    train_sh = [_grams(w, 3) for w in train_words]
    ref_keys = _band_keys(hasher.signatures(ref_sh), bands)
    buckets: list[dict[int, list[int]]] = [defaultdict(list) for _ in range(bands)]
    for j in range(len(ref_sh)):
        if ref_sh[j]:
            for b in range(bands):
                buckets[b][int(ref_keys[j, b])].append(j)
    train_keys = _band_keys(hasher.signatures(train_sh), bands)
    leaks = {}
    for i, sh in enumerate(train_sh):
        if not sh:
            continue
        candidates = {j for b in range(bands) for j in buckets[b].get(int(train_keys[i, b]), ())}
        candidates = {j for j in candidates if fits is None or fits(i, j)}
        best = max(((len(sh & ref_sh[j]) / len(sh | ref_sh[j]), -j) for j in candidates), default=None)
        if best and best[0] >= threshold:
            leaks[i] = Leak(i, -best[1], "near", round(best[0], 4))
    return leaks


def leakage(
    train: Sequence[str],
    reference: Sequence[str],
    *,
    ngram: int = 8,
    ngram_min_overlap: float = 0.0,
    near_threshold: float | None = 0.8,
    numbers: str = "values",
) -> list[Leak]:
    """Every train text that leaks into ``reference``, with its strongest kind (exact > ngram > near);
    ``numbers``: "values" (templated siblings are no leak, see the module's docstring) or "ignore"."""
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    train_norm = [match_key(t) for t in train]
    ref_norm = [match_key(t) for t in reference]
    vocab: dict[str, int] = {}
    ref_words = _word_ids([t.split() for t in ref_norm], vocab)
    train_words = _word_ids([t.split() for t in train_norm], vocab)
    if numbers not in ("values", "ignore"):
        raise ValueError(f"numbers must be 'values' or 'ignore', got {numbers!r}")
    fits = _numbers_fit([t.split() for t in train_norm], [t.split() for t in ref_norm]) if numbers == "values" else None
    found = _near(train_words, ref_words, near_threshold, fits) if near_threshold is not None else {}
    found.update(_ngram(train_words, ref_words, ngram, ngram_min_overlap, fits))
    found.update(_exact(train_norm, ref_norm))
    return [found[i] for i in sorted(found)]


def find_leaks(train: Sequence[str], reference: Sequence[str], *, ngram: int = 8) -> list[int]:
    """Indices of ``train`` texts that leak into any ``reference`` text (exact, n-gram or near)."""
    return [leak.train_index for leak in leakage(train, reference, ngram=ngram)]
