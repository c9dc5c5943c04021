"""Text normalisation shared by splitting, de-duplication, the leakage gate and the personal-data scan.

Two prompts that differ only in case, whitespace, punctuation or number formatting
(``1,000`` vs ``1000``, ``3.50`` vs ``3.5``) normalise to the same string, so they hash to the
same split and count as exact duplicates.

What a reader cannot see must not tell two texts apart either: :func:`fold` removes every default
ignorable code point (Unicode's Default_Ignorable_Code_Point: zero-width spaces and joiners, soft
hyphens, bidi controls, variation selectors, Hangul fillers) and any other format character (Cf), applies
NFKC (full-width forms) and maps each character that Unicode's confusables data (UTS #39) lists as
the look-alike of exactly one ASCII character to it (Cyrillic ``а``, Greek ``Ο``). :func:`match_key`
(fold, then :func:`normalize_text`) is what de-duplication and the leakage gate compare, and the
personal-data scan reads folded text (:func:`fold_with_positions` maps a match back). The split's
hash keeps :func:`normalize_text` alone, so that no existing row moves between splits.

Linear in the text's length, whatever the text: every regex starts with a literal or a character
class (a fast scan) and never rescans a digit run from each of its characters (the previous
``(\\d+)\\.(\\d*?)0+\\b`` took 5 s on 20k digits), and runs of combining marks are cut per the
Stream-Safe Text Format before NFKC, whose canonical reordering is quadratic in the length of such
a run (8 s on 100k alternating marks). The output is the previous implementation's on any other text.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from importlib import resources
from itertools import repeat

import regex

_THOUSANDS = re.compile(r",(?<=\d,)(?=\d{3}\b)")
# A decimal point after a digit, and a fraction that ends in zeros.
_TRAILING_ZEROS = re.compile(r"(\.(?<=\d\.)\d*0)\b")
# A run of symbols and of dots that are not decimal points: each would become a blank. The
# possessive run and the single dot cannot overlap, so each character is read once.
_PUNCTUATION = re.compile(r"(?:[^\w\s.]++|\.(?:(?<!\d\.)|(?!\d)))+")
# Unicode Standard Annex #15, section 13 (Stream-Safe Text Format): after at most 30 non-starters,
# insert U+034F COMBINING GRAPHEME JOINER, a starter, so that no reordering run is longer.
_MAX_NON_STARTERS = 30
_CGJ = "\u034f"
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _has_non_starter(char: str) -> bool:
    """Whether ``char`` or any character of its compatibility decomposition has a combining class."""
    if unicodedata.combining(char):
        return True
    return bool(unicodedata.decomposition(char)) and any(
        unicodedata.combining(c) for c in unicodedata.normalize("NFKD", char)
    )


def _class(codes: list[int]) -> str:
    """A regex character class of the given code points, as ranges."""
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges) + "]"


@functools.cache
def _non_starter_tables() -> tuple[re.Pattern[str], dict[int, str]]:
    """A regex for runs of more than 30 BMP non-starters, and a table that maps every astral
    non-starter to a BMP one (a class with astral ranges is searched range by range: 20x slower).
    Built once, from a scan of all code points (about 0.2 s)."""
    codes = [c for c in range(0x110000) if _has_non_starter(chr(c))]
    bmp = [c for c in codes if c <= 0xFFFF]
    run = re.compile(f"{_class(bmp)}{{{_MAX_NON_STARTERS + 1},}}")
    return run, {c: chr(bmp[0]) for c in codes if c > 0xFFFF}


def _stream_safe(text: str) -> str:
    """``text`` with a grapheme joiner after every 30th character of a long run of non-starters."""
    if text.isascii():
        return text
    run, astral_to_bmp = _non_starter_tables()
    probe = text.translate(astral_to_bmp) if _ASTRAL.search(text) else text  # same length, same positions
    pieces, done = [], 0
    for m in run.finditer(probe):
        pieces.append(text[done : m.start()])
        pieces.append(
            _CGJ.join(
                text[i : min(i + _MAX_NON_STARTERS, m.end())] for i in range(m.start(), m.end(), _MAX_NON_STARTERS)
            )
        )
        done = m.end()
    return "".join(pieces) + text[done:] if pieces else text


def _drop_trailing_zeros(text: str) -> str:
    """``3.50`` -> ``3.5``, ``3.00`` -> ``3``. Like the previous ``(\\d+)\\.(\\d*?)0+\\b``, which consumed
    the integer digits, it leaves alone a decimal point right after a number it rewrote (``1.50.20``)."""
    parts = _TRAILING_ZEROS.split(text)  # text, fraction, text, fraction, ..., text
    if "" not in parts[2:-1:2]:  # no fraction right after another: strip them all at C speed
        parts[1::2] = map(str.rstrip, map(str.rstrip, parts[1::2], repeat("0")), repeat("."))
        return "".join(parts)
    rewrote = False
    for i in range(1, len(parts), 2):
        if rewrote and not parts[i - 1]:
            rewrote = False
        else:
            parts[i] = parts[i].rstrip("0").rstrip(".")
            rewrote = True
    return "".join(parts)


def normalize_text(text: str) -> str:
    """Lower-cased, accent-folded, punctuation-free text with canonical numbers and spaces."""
    text = unicodedata.normalize("NFKC", _stream_safe(text)).casefold()
    text = _THOUSANDS.sub("", text)
    text = _drop_trailing_zeros(text)
    # Punctuation becomes blanks, then every run of blanks one space: str.split() splits on exactly
    # the characters that ``\s`` matches.
    return " ".join(_PUNCTUATION.sub(" ", text).split())


@functools.cache
def _ascii_prototypes() -> dict[int, str]:
    """Each non-ASCII character that Unicode's confusables data (UTS #39, as the confusable-homoglyphs
    package ships it) lists as a look-alike of exactly one printable ASCII character, mapped to it."""
    data = json.loads((resources.files("confusable_homoglyphs") / "confusables.json").read_text(encoding="utf-8"))
    table: dict[int, str] = {}
    for char, alikes in data.items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_alikes = {a["c"] for a in alikes if len(a["c"]) == 1 and a["c"].isascii() and a["c"].isprintable()}
        if len(ascii_alikes) == 1 and not ascii_alikes <= {" "}:
            table[ord(char)] = ascii_alikes.pop()
    return table


@functools.cache
def _ignorables() -> dict[int, None]:
    """Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt, as the ``regex``
    package reads it), as a ``str.translate`` table that deletes them: the characters a renderer
    shows as nothing. Category Cf alone misses 4,036 of them, among them variation selectors
    (U+FE00-FE0F, U+E0100-E01EF, Mn), the combining grapheme joiner U+034F, the Mongolian free
    variation selectors and the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0 (Lo)."""
    runs = regex.compile(r"\p{Default_Ignorable_Code_Point}+").finditer("".join(map(chr, range(0x110000))))
    return {code: None for m in runs for code in range(m.start(), m.end())}


def _fold_char(char: str) -> str:
    ignorable = _ignorables()
    if ord(char) in ignorable or unicodedata.category(char) == "Cf":
        return ""
    folded = unicodedata.normalize("NFKC", char).translate(_ascii_prototypes())
    # NFKC can make an ignorable of a visible-looking one (U+3164 HANGUL FILLER -> U+1160): fold those too.
    return folded if folded.isascii() else folded.translate(ignorable)


# Categories a reader cannot see or tell from a space: format characters, and spaces and separators other than ' '.
HIDDEN = ("Cf", "Zs", "Zl", "Zp")


def hidden_characters(text: str, limit: int = 3) -> str:
    """The characters of ``text`` a reader cannot see or tell from a space, named with their 1-based
    positions (``U+200B ZERO WIDTH SPACE at character 4``), at most ``limit``; "" when there are none.
    What an error message adds, so that a value that looks right on screen (``168``) is seen to hold more."""
    if text.isascii():
        return ""
    ignorable = _ignorables()
    at = [i for i, c in enumerate(text) if ord(c) in ignorable or unicodedata.category(c) in HIDDEN and c != " "]
    named = [f"U+{ord(text[i]):04X} {unicodedata.name(text[i], 'unnamed')} at character {i + 1}" for i in at[:limit]]
    return ", ".join(named) + (f" and {len(at) - limit} more" if len(at) > limit else "")


def fold(text: str) -> str:
    """``text`` as a reader sees it: ignorable and format characters removed, NFKC, ASCII look-alikes made ASCII."""
    if text.isascii():
        return text
    return "".join(map(_fold_char, text))


def fold_with_positions(text: str) -> tuple[str, list[int]]:
    """``(fold(text), origin)``: ``origin[j]`` is the index in ``text`` of the folded character ``j``
    (a match at ``[a, b)`` in the folded text covers ``[origin[a], origin[b - 1] + 1)`` of ``text``)."""
    if text.isascii():
        return text, list(range(len(text)))
    pieces, origin = [], []
    for i, char in enumerate(text):
        piece = _fold_char(char)
        pieces.append(piece)
        origin.extend([i] * len(piece))
    return "".join(pieces), origin


def match_key(text: str) -> str:
    """What de-duplication and the leakage gate compare: :func:`normalize_text` of :func:`fold`."""
    return normalize_text(fold(text))
