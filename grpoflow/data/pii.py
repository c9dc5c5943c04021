"""Personal data in the rows the prepare stage admits: found, counted by type, and quarantined,
redacted or passed as ``data.pii`` says.

Training on user content needs it anonymised first. Nothing here is a hand-written pattern: the
recognizers are libraries made for this.

- e-mail addresses, payment card numbers, IBANs and IP addresses: Presidio's pattern recognizers
  (``presidio-analyzer``), each with its own validation (the e-mail's domain against the public
  suffix list, the card's Luhn sum, the IBAN's check digits, the address parsed by ``ipaddress``);
- phone numbers: Presidio's phone recognizer, which is Google's libphonenumber (``phonenumbers``)
  for Presidio's default regions (US, GB, DE, FR, IL, IN, CA, BR) and any number written with ``+``;
- API keys and tokens: detect-secrets' token-format plugins (AWS, GitHub, GitLab, Slack, Stripe,
  OpenAI, JWT, private-key headers, ...), each match confirmed by its plugin. Its entropy and
  keyword plugins are left out: they flag random identifiers and every ``password = ...`` in code.

No NLP model is loaded: the recognizers are called directly, not through Presidio's analyzer
engine. Importing the package still imports its NLP engines: spaCy always, and torch and
transformers' pipelines where they are installed, 8 of its 9.5 s on a 2-core machine. A stage that
never imports them itself loads the recognizers without them (:func:`finders`), in under 2 s.

Every quarantined row is written to quarantine.jsonl redacted, since that file is logged as an artifact:
the rows quarantined here, and the rows validation rejected for other reasons (an empty answer, a
wrong type), whose fields and reason are scanned as written (unless ``data.pii.mode`` is ``pass``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from functools import cache
from typing import Any

from grpoflow.config import PiiConfig
from grpoflow.data.ingest import Ingested
from grpoflow.data.records import PairRecord, Record, Rejected
from grpoflow.data.text import fold_with_positions

# Presidio's base score of a phone number (0.4) is its lowest that means a match: below it is only
# the IPv6 pattern for a bare '::' (0.1), which every Python slice like x[::] would trip.
MIN_SCORE = 0.4
# libphonenumber's STRICT_GROUPING: the digits must be grouped as the region writes them, so a date
# ('06-04-2020') or a decimal ('123.456') is not a number in some region's short plan (as with VALID).
PHONE_LENIENCY = 2
# The shortest full national number (area code included) of Presidio's regions: Israel's 9 digits.
# Shorter matches are local numbers or plain numbers (an 8-digit date '04122003' is valid in a plan).
MIN_PHONE_DIGITS = 9
# An IPv6 address written with fewer hextets is a Python slice as often as an address: l[::3], l[1::2].
MIN_IPV6_GROUPS = 3
# Every text field of a row is scanned, the id included (a user's own data may use an e-mail address as
# one); a redacted id keeps a number that makes it unique again (ID_SUFFIX). An id is checked for what
# an id can leak (ID_ENTITIES): a ten-digit row number is a valid phone number in many plans. The fields
# the schema holds to a closed set (NOT_SCANNED: a task name, an SPDX id) cannot carry any.
ID_SUFFIX = "#pii{}"
ID_ENTITIES = ("email", "api_key")
NOT_SCANNED = frozenset({"task", "license"})
REASON = "personal_data"  # the quarantine reason's prefix, counted in the stage's metrics
# The optional back ends of Presidio's NLP engines, which its package imports on the way to the pattern
# recognizers; nothing here runs a model, so a process that has not imported them loads Presidio without.
NLP_BACKENDS = ("torch", "transformers")


@dataclass(frozen=True)
class Match:
    """One piece of personal data: its type (``data.pii.entities``), where it is, how sure the recognizer is."""

    entity: str
    start: int
    end: int
    score: float


Finder = Callable[[str], list[Match]]


def _presidio(
    entity: str, recognizer: Any, keep: Callable[[str], bool] = bool, worth: Callable[[str], bool] = bool
) -> Finder:
    """Recognizer ``recognizer``'s matches of at least :data:`MIN_SCORE` that ``keep`` accepts, in
    the texts ``worth`` scanning: one that cannot hold a match ``keep`` accepts (too few digits for
    a phone number) is skipped, since the phone recognizer's eight regions are most of the time."""

    def find(text: str) -> list[Match]:
        if not worth(text):
            return []
        found = recognizer.analyze(text, recognizer.supported_entities, None)
        return [
            Match(entity, r.start, r.end, r.score)
            for r in found
            if r.score >= MIN_SCORE and keep(text[r.start : r.end])
        ]

    return find


def _full_phone_number(text: str) -> bool:
    return sum(c.isdigit() for c in text) >= MIN_PHONE_DIGITS


def _written_out_ip(text: str) -> bool:
    return ":" not in text or sum(1 for group in text.split("/")[0].split(":") if group) >= MIN_IPV6_GROUPS


def _email_recognizer() -> Any:
    """Presidio's e-mail recognizer, its domain check on the public suffix list shipped with
    tldextract: by default tldextract first downloads the list, which offline fails after a wait."""
    import tldextract
    from presidio_analyzer.predefined_recognizers import EmailRecognizer

    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class OfflineEmailRecognizer(EmailRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            return offline(pattern_text).fqdn != ""

    return OfflineEmailRecognizer()


def _api_key_finder() -> Finder:
    """detect-secrets' token formats: every match of a plugin's patterns that the plugin confirms."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.ip_public import IPPublicDetector

    by_type: dict[str, type] = get_mapping_from_secret_type_to_class()
    classes = [by_type[name] for name in sorted(by_type)]
    # The regex-based plugins are the token formats (the entropy and keyword ones are not); IP
    # addresses are Presidio's, all of them, not only detect-secrets' public ones.
    plugins = [cls() for cls in classes if issubclass(cls, RegexBasedDetector) and cls is not IPPublicDetector]

    def find(text: str) -> list[Match]:
        out = []
        for plugin in plugins:
            for pattern in plugin.denylist:
                for m in pattern.finditer(text):
                    if any(True for _ in plugin.analyze_string(m.group(0))):
                        out.append(Match("api_key", m.start(), m.end(), 1.0))
        return out

    return find


@contextmanager
def absent(names: Sequence[str]) -> Iterator[list[str]]:
    """Imports in the block see the modules ``names`` as not installed (the import system raises
    ImportError for a name whose ``sys.modules`` entry is None); yields the names hidden. A module
    already imported stays visible, and nothing is hidden while another thread runs, since that
    thread's own import of one would fail. An optional import made in the block stays without them
    for the process (Presidio's transformers engine, thinc's torch ops): none is used here."""
    hidden = [] if threading.active_count() > 1 else [n for n in names if n not in sys.modules]
    try:
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]
        yield hidden
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


@cache
def finders(entities: tuple[str, ...]) -> tuple[Finder, ...]:
    """The recognizers of ``entities``, built once per process (the import is the slow part: call
    it before a stage starts threads, such as MLflow's system metrics, to load them without
    :data:`NLP_BACKENDS`)."""
    if not entities:
        return ()
    with absent(NLP_BACKENDS):
        from presidio_analyzer.predefined_recognizers import (
            CreditCardRecognizer,
            IbanRecognizer,
            IpRecognizer,
            PhoneRecognizer,
        )

    make: dict[str, Callable[[], Finder]] = {
        "email": lambda: _presidio("email", _email_recognizer()),
        "phone": lambda: _presidio(
            "phone", PhoneRecognizer(leniency=PHONE_LENIENCY), _full_phone_number, worth=_full_phone_number
        ),
        "card": lambda: _presidio("card", CreditCardRecognizer()),
        "iban": lambda: _presidio("iban", IbanRecognizer()),
        "ip": lambda: _presidio("ip", IpRecognizer(), _written_out_ip),
        "api_key": _api_key_finder,
    }
    return tuple(make[e]() for e in entities)


def find(text: str, entities: Sequence[str]) -> list[Match]:
    """Every piece of personal data of the kinds ``entities`` in ``text``, in order of position. The
    recognizers read the text as a reader sees it (:func:`grpoflow.data.text.fold`: no zero-width
    characters or soft hyphens, full-width and look-alike letters made ASCII), and each match is
    mapped back to the span of ``text`` it covers."""
    scan = finders(tuple(entities))
    if text.isascii():  # nothing to fold: no position map to build for most rows
        found = [m for finder in scan for m in finder(text)]
    else:
        folded, origin = fold_with_positions(text)
        found = [
            replace(m, start=origin[m.start], end=origin[m.end - 1] + 1)
            for finder in scan
            for m in finder(folded)
            if m.end > m.start
        ]
    return sorted(found, key=lambda m: (m.start, -m.end))


def redact(text: str, matches: Sequence[Match]) -> str:
    """``text`` with each match replaced by ``<type>``; overlapping matches become one, named by the first."""
    out, pos = [], 0
    for m in sorted(matches, key=lambda m: (m.start, -m.end)):
        if m.start < pos:  # inside (or overlapping) the span already replaced
            if m.end > pos:
                pos = m.end
            continue
        out += [text[pos : m.start], f"<{m.entity}>"]
        pos = m.end
    return "".join(out) + text[pos:]


def _texts(row: Record | PairRecord) -> dict[str, list[str]]:
    """Every text field of the row by name, each as a list of strings (``tests`` has several)."""
    out = {}
    for f in fields(row):
        if f.name in NOT_SCANNED:
            continue
        value = getattr(row, f.name)
        if isinstance(value, str):
            out[f.name] = [value]
        elif isinstance(value, tuple) and all(isinstance(v, str) for v in value):
            out[f.name] = list(value)
    return out


def _as_text(value: Any) -> str | None:
    """A number as the text a scan reads (a card number given as an integer), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return str(value)
    except ValueError:  # an integer past Python's digit limit: no card, phone or key is that long
        return None


@dataclass
class PiiScan:
    """The scan of every admitted row under one ``data.pii``: what it found, and what it did."""

    config: PiiConfig = field(default_factory=PiiConfig)
    rows_scanned: int = 0
    rows_with_pii: int = 0
    matches: Counter[str] = field(default_factory=Counter)  # by type
    rows_by_type: Counter[str] = field(default_factory=Counter)
    rejected_redacted: int = 0  # rows rejected for other reasons, quarantined with personal data redacted
    seconds: float = 0.0

    def screen(self, got: Ingested[Any]) -> None:
        """Scan a source's records; per ``mode``, move the rows with personal data into its
        rejected rows (redacted, with their file and line), redact them in place, or keep them."""
        if not self.config.entities:
            return
        finders(tuple(self.config.entities))  # the import is not the scan's time
        start = time.perf_counter()
        if self.config.mode != "pass":  # rows validation rejected go to quarantine.jsonl, an artifact: redacted too
            got.rejected[:] = [self._redacted_rejection(r) for r in got.rejected]
        kept: list[Record | PairRecord] = []
        for row in got.records:
            source_file, line = got.origin.get(row.id, (got.source_file, None))
            row, found = self._scan(row)
            if line is not None:  # a redacted id is still traced to its file and line by later checks
                got.origin.setdefault(row.id, (source_file, line))
            if found and self.config.mode == "quarantine":
                got.rejected.append(Rejected(source_file, line, self._reason(found), row.to_dict()))
                continue
            kept.append(row)
        got.records[:] = kept
        self.seconds += time.perf_counter() - start

    def _scan(self, row: Record | PairRecord) -> tuple[Record | PairRecord, dict[str, list[Match]]]:
        """``(the row, redacted unless mode is pass; its matches by field)``."""
        self.rows_scanned += 1
        found: dict[str, list[Match]] = {}
        redacted: dict[str, Any] = {}
        for name, texts in _texts(row).items():
            entities = [e for e in self.config.entities if name != "id" or e in ID_ENTITIES]
            per_text = [find(t, entities) for t in texts]
            if any(per_text):
                found[name] = [m for ms in per_text for m in ms]
                clean = [redact(t, ms) for t, ms in zip(texts, per_text)]
                redacted[name] = tuple(clean) if isinstance(getattr(row, name), tuple) else clean[0]
        if found:
            self.rows_with_pii += 1
            if "id" in redacted:
                redacted["id"] += ID_SUFFIX.format(self.rows_with_pii)
            every = [m.entity for ms in found.values() for m in ms]
            self.matches.update(every)
            self.rows_by_type.update(set(every))
        return (row if self.config.mode == "pass" or not found else replace(row, **redacted)), found

    def _redacted_rejection(self, rejected: Rejected) -> Rejected:
        """A rejected row as written, and its reason (which may quote it), with personal data redacted
        wherever it is: any field, any depth, keys and numbers too (a number with data in it becomes
        its redacted text; two keys that redact alike stay apart by a number)."""
        found: list[Match] = []

        def text(value: str) -> str:
            matches = find(value, self.config.entities)
            found.extend(matches)
            return redact(value, matches) if matches else value

        def clean(value: Any) -> Any:
            if isinstance(value, str):
                return text(value)
            if isinstance(value, dict):
                out: dict[Any, Any] = {}
                for k, v in value.items():
                    key = text(k) if isinstance(k, str) else k
                    out[key if key not in out else f"{key}#{len(out)}"] = clean(v)
                return out
            if isinstance(value, list):
                return [clean(v) for v in value]
            number = _as_text(value)
            if number is not None and (redacted := text(number)) != number:
                return redacted
            return value

        row, reason = clean(rejected.row), clean(rejected.reason)
        if not found:
            return rejected
        self.rejected_redacted += 1
        self.matches.update(m.entity for m in found)
        return replace(rejected, row=row, reason=reason)

    @staticmethod
    def _reason(found: dict[str, list[Match]]) -> str:
        parts = [f"{', '.join(sorted({m.entity for m in ms}))} in {name}" for name, ms in found.items()]
        return f"{REASON}: {'; '.join(parts)} (redacted here; data.pii.mode says what happens to such rows)"

    def summary(self) -> dict[str, Any]:
        """The stage's record of the scan: mode, types looked for, rows scanned and with personal
        data, matches and rows by type (every type listed, 0 included), and its speed."""
        entities = list(self.config.entities)
        return {
            "mode": self.config.mode,
            "entities": entities,
            "rows_scanned": self.rows_scanned,
            "rows_with_pii": self.rows_with_pii,
            "rejected_rows_redacted": self.rejected_redacted,
            "matches": {e: self.matches.get(e, 0) for e in entities},
            "rows_by_type": {e: self.rows_by_type.get(e, 0) for e in entities},
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(self.rows_scanned / self.seconds, 1) if self.seconds else None,
        }
