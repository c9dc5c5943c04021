"""Deterministic train/val/test assignment from a stable hash of the normalised prompt.

The split of a prompt depends on its text alone: not on input order, not on the other rows,
not on the seed. Re-ingesting a reordered or extended source keeps every old prompt where it
was, and exact duplicates (after normalisation) always land in the same split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from grpoflow.config import SplitConfig
from grpoflow.data.records import Record
from grpoflow.data.text import normalize_text

SPLITS = ("train", "val", "test")
_SALT = b"grpoflow-split-v1\0"


def unit_interval(text: str) -> float:
    """A uniform-looking number in [0, 1) fixed by the normalised text."""
    digest = hashlib.sha256(_SALT + normalize_text(text).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_split(prompt: str, cfg: SplitConfig) -> str:
    """The split of a prompt: a stable function of its normalised text's hash and the shares."""
    u = unit_interval(prompt)
    if u < cfg.train:
        return "train"
    if u < cfg.train + cfg.val:
        return "val"
    return "test"


def split_records(records: Iterable[Record], cfg: SplitConfig) -> dict[str, list[Record]]:
    """Records grouped by split; each list keeps the input's relative order."""
    out: dict[str, list[Record]] = {name: [] for name in SPLITS}
    for rec in records:
        out[assign_split(rec.prompt, cfg)].append(rec)
    return out
