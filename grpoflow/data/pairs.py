"""Preference pairs for the reward model: two completions of one prompt, the first preferred, read
from a preference file or built from the policy's own samples ranked by the verifiers
(:func:`pairs_from_samples`); split into train and held-out by a stable hash of the prompt, and
encoded as the token ids the reward model scores."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from grpoflow.data.text import normalize_text


class Prompter(Protocol):
    """What encoding a pair needs of a prompter (:class:`grpoflow.models.prompting.Prompter` is one),
    stated here: the data layer imports nothing of the models'."""

    def prompt_ids(self, question: str) -> list[int]:
        """The token ids that put ``question`` to the model."""
        ...

    def target_ids(self, solution: str) -> list[int]:
        """The token ids of ``solution`` as the model's answer."""
        ...


EncodedPair = tuple[list[int], list[int]]  # (prompt + chosen ids, prompt + rejected ids)

SOURCE_SELF = "self"  # a pair of two of the policy's samples, ranked by the verifiers
SOURCE_GOLD = "gold"  # the row's gold solution over the policy's worst sample
_SPLIT_SALT = b"grpoflow-rm-split-v1\0"


@dataclass(frozen=True)
class Pair:
    """Two completions of one prompt, the first preferred."""

    prompt: str
    chosen: str
    rejected: str
    id: str
    source: str


def _first_argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))


def _first_argmin(values: Sequence[float]) -> int:
    return min(range(len(values)), key=lambda i: (values[i], i))


def pairs_from_samples(
    rows: Sequence[Mapping[str, Any]],
    samples: Sequence[Sequence[str]],
    scores: Sequence[Sequence[float]],
    *,
    gold: bool,
) -> list[Pair]:
    """Preference pairs from the policy's samples of each row, ranked by their verifier scores.

    Per row, with ``best`` and ``worst`` the first sample of highest and of lowest score:

    - ``{id}:best-worst`` (source ``self``): best over worst, when their scores differ. A group whose
      samples all score the same says nothing about which is better and gives no pair.
    - ``{id}:gold-worst`` (source ``gold``, only with ``gold``): the row's solution over the worst
      sample, when the row has a solution and the worst sample is *wrong*: its score is below the
      best in its group or below 1 (a verifier's full marks), i.e. below ``max(1, best)``. When every
      sample is right the pair would only teach the gold solution's style over a correct answer, so
      it is left out; when every sample is equally wrong it is the row's only signal.

    A pair whose two texts are the same (the policy reproduced the solution) is skipped.
    """
    if not len(rows) == len(samples) == len(scores):
        raise ValueError(f"rows, samples and scores differ in length: {len(rows)}, {len(samples)}, {len(scores)}")
    pairs: list[Pair] = []
    for row, texts, values in zip(rows, samples, scores):
        if len(texts) != len(values):
            raise ValueError(f"row {row['id']}: {len(texts)} samples but {len(values)} scores")
        if not texts:
            continue
        best, worst = _first_argmax(values), _first_argmin(values)
        candidates = []
        if values[best] > values[worst]:
            candidates.append(Pair(row["prompt"], texts[best], texts[worst], f"{row['id']}:best-worst", SOURCE_SELF))
        solution = (row.get("solution") or "").strip()
        if gold and solution and values[worst] < max(1.0, values[best]):
            candidates.append(Pair(row["prompt"], solution, texts[worst], f"{row['id']}:gold-worst", SOURCE_GOLD))
        pairs += [p for p in candidates if p.chosen.strip() != p.rejected.strip()]
    return pairs


def heldout_unit(prompt: str, seed: int) -> float:
    """A uniform-looking number in [0, 1) fixed by the normalised prompt and ``seed``."""
    digest = hashlib.sha256(_SPLIT_SALT + f"{seed}\0".encode() + normalize_text(prompt).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_pairs(pairs: Sequence[Pair], heldout_share: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """``(train, heldout)`` by a stable hash of each pair's normalised prompt (as the data split):
    every pair of one prompt lands on the same side, whatever the order or the other pairs, so a
    held-out prompt's completions are never trained on. Each side keeps the input order."""
    train: list[Pair] = []
    heldout: list[Pair] = []
    for p in pairs:
        (heldout if heldout_unit(p.prompt, seed) < heldout_share else train).append(p)
    return train, heldout


def encode_pair(pair: Pair, prompter: Prompter, max_length: int) -> EncodedPair | None:
    """``(prompt + chosen, prompt + rejected)`` token ids, each completion followed by the end-of-turn
    token as in SFT (:meth:`Prompter.target_ids`); None when either is longer than ``max_length``
    (truncating would cut off the ending that the preference is often about)."""
    prompt = prompter.prompt_ids(pair.prompt)
    chosen, rejected = prompt + prompter.target_ids(pair.chosen), prompt + prompter.target_ids(pair.rejected)
    if max(len(chosen), len(rejected)) > max_length:
        return None
    return chosen, rejected


def encode_pairs(pairs: Sequence[Pair], prompter: Prompter, max_length: int) -> tuple[list[EncodedPair], int]:
    """The pairs that fit in ``max_length`` tokens, encoded, and how many did not."""
    encoded = [encode_pair(p, prompter, max_length) for p in pairs]
    kept = [e for e in encoded if e is not None]
    return kept, len(encoded) - len(kept)
