import random
import re
from collections import Counter

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grpoflow.config import SplitConfig
from grpoflow.data.records import Record
from grpoflow.data.split import assign_split, split_records
from grpoflow.data.text import normalize_text

CFG = SplitConfig()


def rec(i: int, prompt: str) -> Record:
    return Record(str(i), prompt, "1", None, "test", "CC0-1.0")


def test_split_is_independent_of_input_order():
    rows = [rec(i, f"Question number {i}: how many?") for i in range(500)]
    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)
    a, b = split_records(rows, CFG), split_records(shuffled, CFG)
    assert {k: {r.id for r in v} for k, v in a.items()} == {k: {r.id for r in v} for k, v in b.items()}


def test_surface_variants_of_one_prompt_share_a_split():
    variants = ["Tom has 1,000 apples.", "tom  has 1000 apples", "TOM HAS 1000 APPLES!", "Tom has 1000.0 apples."]
    assert len({assign_split(v, CFG) for v in variants}) == 1


def test_shares_follow_the_ratios():
    counts = Counter(assign_split(f"prompt {i}", SplitConfig(train=0.6, val=0.2, test=0.2)) for i in range(20_000))
    assert abs(counts["train"] / 20_000 - 0.6) < 0.02
    assert abs(counts["val"] / 20_000 - 0.2) < 0.02


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=80))
def test_normalisation_is_idempotent_but_for_a_fraction_chained_to_a_rewritten_number(text):
    # Split assignment hashes the normalised text, so its output stays the previous implementation's
    # (tests/unit/test_text.py): that one left a decimal point right after a number it rewrote alone,
    # "0.0.0" -> "0.0" -> "0". Everywhere else one pass is final. (Hypothesis found "0.0.0" in CI.)
    once = normalize_text(text)
    assume(not re.search(r"\d\.\d*0\b", once))
    assert normalize_text(once) == once


def test_a_fraction_chained_to_a_rewritten_number_is_left_as_before():
    assert normalize_text("0.0.0") == "0.0" and normalize_text("1.50.20") == "1.5.20"


def test_normalisation_examples():
    assert normalize_text("  Hello,   World!  ") == "hello world"
    assert normalize_text("It costs $1,234.50.") == "it costs 1234.5"
    assert normalize_text("3.0 and 3.10 and 2.") == "3 and 3.1 and 2"
