"""Text normalisation shared by splitting and leakage checks.

Two prompts that differ only in case, whitespace, punctuation or number formatting
(``1,000`` vs ``1000``, ``3.50`` vs ``3.5``) normalise to the same string, so they hash to the
same split and count as exact duplicates.
"""

from __future__ import annotations

import re
import unicodedata

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_TRAILING_ZEROS = re.compile(r"(\d+)\.(\d*?)0+\b")
_NON_WORD = re.compile(r"[^\w\s.]|(?<!\d)\.|\.(?!\d)")
_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Lower-cased, accent-folded, punctuation-free text with canonical numbers and spaces."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _THOUSANDS.sub("", text)
    text = _TRAILING_ZEROS.sub(lambda m: m.group(1) + ("." + m.group(2) if m.group(2) else ""), text)
    text = _NON_WORD.sub(" ", text)
    return _SPACE.sub(" ", text).strip()
