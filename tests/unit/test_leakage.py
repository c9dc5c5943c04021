from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.data.leakage import find_leaks, leakage

REF = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did she sell?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
]


def test_exact_after_normalisation():
    train = [
        "NATALIA sold clips to 48 of her friends in April,   and then she sold half as many clips in May! "
        "How many clips did she sell",
        "Something unrelated about trains and distances.",
    ]
    leaks = leakage(train, REF)
    assert [(leak.train_index, leak.reference_index, leak.kind) for leak in leaks] == [(0, 0, "exact")]


def test_ngram_overlap_any_and_thresholded():
    train = [
        "Before anything else: a robe takes 2 bolts of blue fiber and half that much white fiber, "
        "then we dye it red and sell it at the market for profit."
    ]
    assert [leak.kind for leak in leakage(train, REF, ngram_min_overlap=0.0, near_threshold=None)] == ["ngram"]
    assert leakage(train, REF, ngram_min_overlap=0.9, near_threshold=None) == []
    assert find_leaks(train, REF, ngram=8) == [0]  # the public API flags any shared 8-gram
    assert find_leaks(train, REF, ngram=30) == []  # no 30-word passage is shared


def test_near_duplicate_with_a_few_words_changed():
    train = [
        "Natalia sold clips to 48 of her friends in April and then she sold half as many clips in May. "
        "How many clips did she sell overall?"
    ]
    leaks = leakage(train, REF, ngram=50)  # long n-grams: only the near-duplicate rule can fire
    assert [(leak.kind, leak.reference_index) for leak in leaks] == [("near", 0)]
    assert 0.8 <= leaks[0].score < 1.0


def test_unrelated_texts_do_not_leak():
    train = ["How many legs do 3 spiders have?", "What is 12 times 12?", ""]
    assert leakage(train, REF, ngram_min_overlap=0.0) == []


def test_strongest_kind_wins():
    leaks = leakage([REF[1]], REF, ngram_min_overlap=0.0)
    assert [leak.kind for leak in leaks] == ["exact"]


@settings(max_examples=50)
@given(st.lists(st.text(alphabet="abc de", min_size=0, max_size=40), min_size=1, max_size=20))
def test_every_text_leaks_into_itself_and_indices_are_valid(texts):
    leaks = leakage(texts, texts, ngram=3)
    nonempty = [i for i, t in enumerate(texts) if t.split()]
    assert sorted(leak.train_index for leak in leaks) == nonempty
    assert all(0 <= leak.reference_index < len(texts) for leak in leaks)


# A GSM8K test question, disguised as the hostile review disguised it: invisible characters inside words,
# soft hyphens, Cyrillic look-alike letters. Each is the same question to a reader, and to the gate.
QUESTION = "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning. How many are left?"
DISGUISED = [
    QUESTION.replace("ducks", "du\u200bcks").replace("breakfast", "break\u200bfast"),
    QUESTION.replace("breakfast", "break\u00adfast").replace("morning", "mor\u00adning"),
    QUESTION.replace("a", "\u0430").replace("e", "\u0435").replace("o", "\u043e"),
    # The fourth review's (#50): default ignorables outside category Cf, after every letter e.
    *(
        QUESTION.replace("e", "e" + hidden)
        for hidden in ("\ufe0f", "\ufe00", "\U000e0100", "\u034f", "\u180b", "\u3164", "\u115f")
    ),
]


def test_invisible_characters_and_look_alike_letters_do_not_dodge_the_gate():
    for text in DISGUISED:
        (leak,) = leakage([text, "Tom has 5 apples."], [QUESTION])
        assert (leak.train_index, leak.kind) == (0, "exact"), text


def _sibling(coins: int, friends: int, extra: str = "") -> str:
    return (
        f"Tom splits {coins} coins among {friends} friends equally, and each friend then gives one coin back to "
        f"Tom. How many coins does each friend keep in the end?{extra}"
    )


def test_templated_siblings_with_other_numbers_are_no_leak_but_copies_are():
    reference = [_sibling(88, 2)]
    train = [
        _sibling(50, 2),  # a sibling: the same words around another number
        _sibling(88, 2, " Show your work."),  # a copy with a sentence added
        "Before that: " + _sibling(88, 2) + " Then 7 more coins arrive.",  # the reference embedded, more numbers
        _sibling(88.0, 2).replace("88.0", "88.00"),  # the same values, written otherwise
    ]
    strict = dict(ngram_min_overlap=0.5, near_threshold=0.8)
    assert [leak.train_index for leak in leakage(train, reference, **strict)] == [1, 2, 3]
    assert [leak.train_index for leak in leakage(train, reference, numbers="ignore", **strict)] == [0, 1, 2, 3]
    assert leakage([_sibling(2, 88)], reference, **strict) != []  # numbers compared as a multiset, not in order


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 99))
def test_a_sibling_leaks_exactly_when_it_holds_every_number_of_the_reference(a, b, friends):
    found = leakage([_sibling(a, friends)], [_sibling(b, friends)], ngram_min_overlap=0.5, near_threshold=0.8)
    assert (found != []) == (a == b)
