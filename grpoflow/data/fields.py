"""Which fields of a source's rows hold the question and the answer (the gsm8k and math forms).

A source may name them (``question_field``, ``answer_field``); what it leaves unset is found from
the common pairs, :data:`KNOWN_PAIRS`, the format's own pair first, among the field names of the
first :data:`SAMPLE_ROWS` rows that are objects. One pair present there is the answer; none, or more
than one (``question``/``answer`` beside ``prompt``/``response``), is the file's problem, a
``ValueError`` naming the file and the fields its rows have, since every row would otherwise be
quarantined or read from a guess. A row that lacks the chosen fields later is that row's problem
(``missing_field``), as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, islice

from grpoflow.data.normalise import FIELDS, excerpt
from grpoflow.data.raw import RawRow

KNOWN_PAIRS: tuple[tuple[str, str], ...] = (("question", "answer"), ("problem", "solution"), ("prompt", "response"))
SAMPLE_ROWS = 20  # rows looked at: enough to step over a few bad ones, few enough to hold
_NAMES_SHOWN = 20


def _candidates(fmt: str, question: str | None, answer: str | None) -> list[tuple[str, str]]:
    """The pairs to look for, the format's own first, with the names the source set in place."""
    ordered = [FIELDS[fmt], *(p for p in KNOWN_PAIRS if p != FIELDS[fmt])]
    out: list[tuple[str, str]] = []
    for q, a in ordered:
        pair = (question or q, answer or a)
        if pair not in out:
            out.append(pair)
    return out


def _names(rows: list[RawRow]) -> str:
    """The field names the sampled rows have, for an error message."""
    names = sorted({str(k) for r in rows if isinstance(r.value, dict) for k in r.value})
    shown = ", ".join(excerpt(n, 40) for n in names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def _pairs_text(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{q}/{a}" for q, a in pairs)


def find_fields(
    rows: Iterable[RawRow], fmt: str, source_file: str, question: str | None = None, answer: str | None = None
) -> tuple[Iterator[RawRow], tuple[str, str]]:
    """The rows (all of them, the sampled ones first) and the ``(question, answer)`` field names.

    Raises ``ValueError`` naming ``source_file`` when no pair, or more than one, is found.
    """
    it = iter(rows)
    sample = list(islice(it, SAMPLE_ROWS))
    rows_out = chain(sample, it)
    candidates = _candidates(fmt, question, answer)
    objects = [r.value for r in sample if isinstance(r.value, dict)]
    if not objects:  # nothing to judge by: each row is judged (and quarantined) on its own
        return rows_out, candidates[0]
    names = {k for row in objects for k in row}  # a pair split over bad rows still says which it is
    found = [p for p in candidates if p[0] in names and p[1] in names]
    if len(found) == 1:
        return rows_out, found[0]
    setting = "set question_field and answer_field on the source"
    if found:
        raise ValueError(
            f"data file {source_file}: the rows have more than one question/answer pair of fields "
            f"({_pairs_text(found)}); {setting} to choose. Fields found: {_names(sample)}"
        )
    wanted = _pairs_text(candidates)
    raise ValueError(
        f"data file {source_file}: no question/answer pair of fields in the rows (looked for {wanted} in the "
        f"first {len(sample)}); {setting}. Fields found: {_names(sample)}"
    )
