"""The personal-data scan of prepare (grpoflow/data/pii.py): each type found, each mode applied,
the default synthetic data clean, the counts recorded beside the data hash."""

import json
import types
from dataclasses import replace
from pathlib import Path

import pytest

from grpoflow.config import ConfigError, PiiConfig, load_params, validate_params
from grpoflow.data import pii
from grpoflow.data.ingest import Ingested
from grpoflow.data.prepare import prepare
from grpoflow.data.records import PairRecord, Record

EVERY = list(PiiConfig().entities)
ROOT = Path(__file__).resolve().parents[2]

# Each type in a sentence, with the exact text that must be found (test values: documentation
# addresses and numbers, Stripe's and AWS's published example keys, a card number that passes Luhn).
FOUND = [
    ("email", "Write to jane.doe@example.com for the answer.", "jane.doe@example.com"),
    ("phone", "Call Tom on +1 (212) 555-0123 after six.", "+1 (212) 555-0123"),
    ("phone", "Ring the office on 020 7946 0958 today.", "020 7946 0958"),
    ("card", "She paid with card 4111 1111 1111 1111 twice.", "4111 1111 1111 1111"),
    ("iban", "Send it to DE89 3704 0044 0532 0130 00 by Friday.", "DE89 3704 0044 0532 0130 00"),
    ("ip", "The server at 203.0.113.17 answered.", "203.0.113.17"),
    ("ip", "The host 2001:db8:85a3::8a2e:370:7334 is up.", "2001:db8:85a3::8a2e:370:7334"),
    ("api_key", "key = 'AKIAIOSFODNN7EXAMPLE'", "AKIAIOSFODNN7EXAMPLE"),
    ("api_key", "token ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ here", "ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"),
]
# Look-alikes in maths and code rows that are no one's data (each was a match before its filter).
CLEAN = [
    "Tom has 5 apples and buys 3 more. How many apples does he have?\n5+3=8\n#### 8",
    "    evens = l[::2]\n    odds = l[1::2]\n    l[::3] = sorted(l[::3])",  # slices, not IPv6 addresses
    "assert abs(candidate(123.456) - 0.456) < 1e-6",  # a decimal, not a phone number
    "valid_date('06-04-2020') == True and candidate('04122003') == False",  # dates
    "def f(x):\n    return x * 1234567 + 0.5",
    "synthetic_code-0-1640",
]


def record(i: int, prompt: str, **extra) -> Record:
    return Record(f"r{i}", prompt, "8", "5+3=8\n#### 8", "src", "MIT", **extra)


# The hostile review's disguises: zero-width characters and soft hyphens inside the data, full-width forms,
# a Cyrillic letter in an address. Each is found, and redacted in the text as written.
DISGUISED = [
    ("email", "Write to ja\u200bne.doe@exam\u00adple.com for it.", "Write to <email> for it."),
    ("card", "Card 4111\u200b 1111 1111 1111 paid.", "Card <card> paid."),
    ("api_key", "key = 'AKIA\u200bIOSFODNN7EXAMPLE'", "key = '<api_key>'"),
    ("api_key", "token ghp_abcdefghijklm\u00adnopqrstuvwxyzABCDEFGHIJ here", "token <api_key> here"),
    (
        "email",
        "Mail \uff4a\uff41\uff4e\uff45\uff20\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0e\uff43\uff4f\uff4d now",
        "Mail <email> now",
    ),
    ("email", "Write to j\u0430ne.doe@example.com now", "Write to <email> now"),
]


# The fourth review's disguises (#50): default ignorable characters outside category Cf, each between
# every two characters of the data: an emoji and a text variation selector, a supplementary one, the
# combining grapheme joiner, a Mongolian free variation selector, and the Hangul fillers.
IGNORABLES = ["\ufe0f", "\ufe00", "\U000e0100", "\u034f", "\u180b", "\u3164", "\u115f", "\uffa0"]
PLAIN = [
    (entity, text, expected) for entity, text, expected in FOUND if entity in ("email", "phone", "card", "api_key")
]


@pytest.mark.parametrize("hidden", IGNORABLES, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("entity, text, expected", PLAIN, ids=lambda v: v if isinstance(v, str) and len(v) < 9 else "")
def test_default_ignorable_characters_do_not_hide_personal_data(hidden, entity, text, expected):
    disguised = text.replace(expected, hidden.join(expected))
    matches = pii.find(disguised, EVERY)
    assert [m.entity for m in matches] == [entity]
    assert pii.redact(disguised, matches) == text.replace(expected, f"<{entity}>")


@pytest.mark.parametrize("entity, text, redacted", DISGUISED)
def test_invisible_and_look_alike_characters_do_not_hide_personal_data(entity, text, redacted):
    matches = pii.find(text, EVERY)
    assert [m.entity for m in matches] == [entity]
    assert pii.redact(text, matches) == redacted  # the span of the text as written


@pytest.mark.parametrize("entity, text, expected", FOUND)
def test_each_type_is_found_where_it_is(entity, text, expected):
    matches = pii.find(text, EVERY)
    assert [(m.entity, text[m.start : m.end]) for m in matches] == [(entity, expected)]
    assert pii.redact(text, matches) == text.replace(expected, f"<{entity}>")


@pytest.mark.parametrize("text", CLEAN)
def test_numbers_dates_and_slices_are_not_personal_data(text):
    assert pii.find(text, EVERY) == []


def test_only_the_configured_types_are_looked_for():
    text = "Mail jane.doe@example.com or call +1 (212) 555-0123."
    assert [m.entity for m in pii.find(text, ["phone"])] == ["phone"]
    assert pii.find(text, []) == []


def test_redact_merges_overlapping_matches():
    text = "abcdefghij"
    matches = [pii.Match("email", 2, 6, 1.0), pii.Match("phone", 4, 8, 0.4), pii.Match("ip", 9, 10, 0.6)]
    assert pii.redact(text, matches) == "ab<email>i<ip>"
    assert pii.redact(text, []) == text


def _ingested(rows: list) -> Ingested:
    return Ingested(list(rows), [], {r.id: ("rows.jsonl", i + 1) for i, r in enumerate(rows)}, source_file="rows.jsonl")


def test_quarantine_moves_the_row_out_redacted_with_its_file_and_line():
    rows = [record(0, "How many apples?"), record(1, "Mail jane.doe@example.com: how many apples?")]
    got, scan = _ingested(rows), pii.PiiScan(PiiConfig(mode="quarantine"))
    scan.screen(got)
    assert [r.id for r in got.records] == ["r0"]
    (q,) = got.rejected
    assert (q.source_file, q.line) == ("rows.jsonl", 2) and q.reason.startswith("personal_data: email in prompt")
    assert "jane.doe" not in json.dumps(q.to_dict()) and q.row["prompt"] == "Mail <email>: how many apples?"
    summary = scan.summary()
    assert (summary["rows_scanned"], summary["rows_with_pii"], summary["matches"]["email"]) == (2, 1, 1)
    assert summary["matches"]["phone"] == 0 and set(summary["matches"]) == set(EVERY)


@pytest.mark.parametrize("mode", ["quarantine", "redact"])
def test_rows_rejected_for_other_reasons_reach_quarantine_redacted_field_reason_and_depth(mode):
    # The hostile review's row: an empty answer with an e-mail, a card and an AWS key, rejected before the scan.
    from grpoflow.data.records import Rejected

    raw = {
        "question": "Mail jane.doe@example.com, card 4111 1111 1111 1111",
        "answer": "",
        "meta": {"keys": ["AKIAIOSFODNN7EXAMPLE"], "n": 3},
    }
    got, scan = _ingested([record(0, "How many apples?")]), pii.PiiScan(PiiConfig(mode=mode))
    got.rejected.append(Rejected("rows.jsonl", 7, "empty_answer: 'answer' is '' (near jane.doe@example.com)", raw))
    scan.screen(got)
    (q,) = got.rejected
    written = json.dumps(q.to_dict())
    assert not any(secret in written for secret in ("jane.doe", "4111 1111", "AKIAIOSFODNN7EXAMPLE"))
    assert q.row == {"question": "Mail <email>, card <card>", "answer": "", "meta": {"keys": ["<api_key>"], "n": 3}}
    assert (q.source_file, q.line) == ("rows.jsonl", 7) and q.reason == "empty_answer: 'answer' is '' (near <email>)"
    assert scan.summary()["rejected_rows_redacted"] == 1 and [r.id for r in got.records] == ["r0"]


@pytest.mark.parametrize(
    "raw, written",
    [  # the fourth review's rows (#50): data in a key, and a card number given as a number
        ({"question": "", "answer": "4", "note": {"jane.roe@example.com": "contact"}}, {"<email>": "contact"}),
        ({"question": "", "answer": 4111111111111111}, "<card>"),
        ({"question": "", "notes": {"a@example.org": 1, "b@example.org": 2}}, {"<email>": 1, "<email>#1": 2}),
    ],
)
def test_keys_and_numbers_of_a_rejected_row_reach_quarantine_redacted(raw, written):
    from grpoflow.data.records import Rejected

    got, scan = _ingested([]), pii.PiiScan(PiiConfig(mode="quarantine"))
    got.rejected.append(Rejected("rows.jsonl", 3, "empty_question", raw))
    scan.screen(got)
    (q,) = got.rejected
    assert not any(s in json.dumps(q.to_dict()) for s in ("example.", "4111111111111111")), q.row
    assert written in q.row.values() and q.row["question"] == ""


def test_a_plain_number_in_a_rejected_row_stays_a_number():
    from grpoflow.data.records import Rejected

    got, scan = _ingested([]), pii.PiiScan(PiiConfig(mode="quarantine"))
    got.rejected.append(Rejected("rows.jsonl", 3, "empty_question", {"question": "", "answer": 42, "ok": True}))
    scan.screen(got)
    assert (
        got.rejected[0].row == {"question": "", "answer": 42, "ok": True}
        and scan.summary()["rejected_rows_redacted"] == 0
    )


@pytest.mark.parametrize("mode", ["quarantine", "redact"])
def test_personal_data_in_a_rows_id_is_found_and_never_reaches_a_split(mode):
    rows = [record(0, "How many apples?"), replace(record(1, "How many pears?"), id="jane.doe@example.com")]
    rows.append(replace(record(2, "How many plums?"), id="john.roe@example.com"))
    got, scan = _ingested(rows), pii.PiiScan(PiiConfig(mode=mode))
    scan.screen(got)
    assert "example.com" not in json.dumps([r.to_dict() for r in got.records] + [q.to_dict() for q in got.rejected])
    if mode == "quarantine":
        assert [r.id for r in got.records] == ["r0"] and [q.line for q in got.rejected] == [2, 3]
        assert got.rejected[0].reason.startswith("personal_data: email in id")
    else:  # each redacted id stays unique
        assert [r.id for r in got.records] == ["r0", "<email>#pii1", "<email>#pii2"]


def test_an_id_is_checked_for_what_an_id_can_leak_and_a_redacted_one_keeps_its_line():
    """#50 review: a row number is not a phone number, an e-mail address in an id is still found, and
    a redacted id still names its row's file and line for the checks after the scan."""
    number = "2125550123"  # ten digits, a valid US number: in a prompt it is one
    rows = [replace(record(0, "How many apples?"), id=number), replace(record(1, "How many?"), id="a@example.com")]
    rows.append(record(2, f"Call {number}"))
    got, scan = _ingested(rows), pii.PiiScan(PiiConfig(mode="redact"))
    scan.screen(got)
    assert [r.id for r in got.records] == [number, "<email>#pii1", "r2"]
    assert got.records[2].prompt == "Call <phone>"
    assert got.origin["<email>#pii1"] == got.origin["a@example.com"] == ("rows.jsonl", 2)


def test_pass_leaves_rejected_rows_as_written():
    from grpoflow.data.records import Rejected

    got, scan = _ingested([]), pii.PiiScan(PiiConfig(mode="pass"))
    got.rejected.append(Rejected("rows.jsonl", 1, "empty_answer", {"question": "jane.doe@example.com"}))
    scan.screen(got)
    assert got.rejected[0].row == {"question": "jane.doe@example.com"}


def test_redact_keeps_the_row_with_every_field_redacted():
    tests = ("assert f('a@example.org') == 1", "assert f('b') == 0")
    rows = [record(0, "Call +1 (212) 555-0123", tests=tests, task="code")]
    got, scan = _ingested(rows), pii.PiiScan(PiiConfig(mode="redact"))
    scan.screen(got)
    (kept,) = got.records
    assert got.rejected == [] and kept.prompt == "Call <phone>"
    assert kept.tests == ("assert f('<email>') == 1", "assert f('b') == 0")
    assert scan.summary()["rows_by_type"] == {"email": 1, "phone": 1, "card": 0, "iban": 0, "ip": 0, "api_key": 0}


def test_pass_keeps_the_row_as_it_is_and_counts_it():
    pair = PairRecord("p0", "Who?", "Ask jane.doe@example.com", "Nobody", "src", "MIT")
    got, scan = _ingested([pair]), pii.PiiScan(PiiConfig(mode="pass"))
    scan.screen(got)
    assert got.records == [pair] and got.rejected == []
    assert scan.summary()["matches"]["email"] == 1 and scan.summary()["rows_with_pii"] == 1


def test_no_types_means_no_scan():
    got, scan = _ingested([record(0, "jane.doe@example.com")]), pii.PiiScan(PiiConfig(entities=[]))
    scan.screen(got)
    assert len(got.records) == 1 and scan.summary()["rows_scanned"] == 0


def test_the_mode_and_types_are_validated():
    assert validate_params({}).data.pii == PiiConfig(mode="quarantine", entities=EVERY)
    with pytest.raises(ConfigError, match="data.pii.mode"):
        validate_params({"data": {"pii": {"mode": "drop"}}})
    with pytest.raises(ConfigError, match="data.pii.entities"):
        validate_params({"data": {"pii": {"entities": ["ssn"]}}})


def test_the_default_synthetic_data_scans_clean():
    params = load_params(ROOT / "params" / "default.yaml")
    summary = prepare(params.experiment.seed, params.data).summary()
    assert summary["pii"]["rows_scanned"] >= params.data.synthetic.num_examples * 0.9  # less the duplicates
    assert summary["pii"]["rows_with_pii"] == 0 and summary["passed"]


def test_the_default_code_tasks_scan_clean():
    cfg = validate_params({"data": {"sources": [{"kind": "synthetic_code"}]}}).data
    assert prepare(0, cfg).summary()["pii"]["rows_with_pii"] == 0


def _source_file(tmp_path: Path) -> None:
    rows = [
        {"question": f"Tom has {i} apples and buys 3 more. How many now?", "answer": f"#### {i + 3}"} for i in range(30)
    ]
    rows.append({"question": "Tom (tom@example.com) has 2 apples and buys 3. How many?", "answer": "#### 5"})
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_prepare_quarantines_and_the_stage_records_the_counts_with_the_data_hash(tmp_path, monkeypatch):
    import contextlib

    from tasks import prepare as stage
    from tasks import tracking

    _source_file(tmp_path)
    params = validate_params(
        {
            "data": {
                "sources": [{"kind": "file", "path": "rows.jsonl", "license": "MIT"}],
                "split": {"train": 0.6, "val": 0.2, "test": 0.2},
            }
        }
    )
    result = prepare(0, params.data, root=tmp_path)
    assert [q.reason.split(":")[0] for q in result.quarantine] == ["personal_data"]
    assert result.quarantine[0].line == 31 and result.summary()["quarantine_reasons"] == {"personal_data": 1}
    assert not any("tom@example.com" in r.prompt for rows in result.splits.values() for r in rows)

    tags: dict = {}
    fake = types.SimpleNamespace(
        set_tag=lambda k, v: tags.update({k: v}), set_tags=tags.update, log_artifact=lambda *a, **k: None
    )
    monkeypatch.setitem(__import__("sys").modules, "mlflow", fake)
    monkeypatch.setattr(tracking, "stage_run", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(tracking, "log_summary", lambda *a, **k: None)
    monkeypatch.setattr(stage, "prepare", lambda seed, data: prepare(seed, data, root=tmp_path))
    args = types.SimpleNamespace(out=str(tmp_path / "out"), metrics=str(tmp_path / "prepare.json"), params="p.yaml")
    stage.main(args, params)
    metrics = json.loads((tmp_path / "prepare.json").read_text())
    assert metrics["data_hash"] and metrics["pii"]["matches"]["email"] == 1 and metrics["pii"]["mode"] == "quarantine"
    assert tags["data_hash"] == metrics["data_hash"] and tags["pii"] == "1 of 31 rows (quarantine)"
    assert "tom@example.com" not in (tmp_path / "out" / "quarantine.jsonl").read_text()


# A fresh interpreter loads every recognizer, finds each type, and leaves torch and transformers unimported
# (Presidio's package would import both); once loaded, both import as usual.
FRESH_PROCESS = """
import json, sys
from grpoflow.data import pii
found = [[text[m.start:m.end] for m in pii.find(text, [e])] for e, text, _ in json.loads(sys.argv[1])]
loaded = sorted(n for n in pii.NLP_BACKENDS if n in sys.modules)
import torch, transformers
print(json.dumps({"found": found, "loaded": loaded, "after": [torch.__name__, transformers.__name__]}))
"""


def test_a_fresh_process_loads_the_recognizers_without_torch_or_transformers():
    import subprocess
    import sys

    cases = [c for c in FOUND if c[0] != "api_key"]  # detect-secrets is not Presidio
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(cases)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["loaded"] == [] and out["after"] == ["torch", "transformers"]
    for (entity, text, expected), found in zip(cases, out["found"], strict=True):
        assert expected in found, (entity, text, found)


def _module(tmp_path: Path, monkeypatch, name: str) -> str:
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    return name


def test_absent_hides_a_module_not_yet_imported_and_only_inside_the_block(tmp_path, monkeypatch):
    import importlib

    name = _module(tmp_path, monkeypatch, "grpoflow_pii_backend_a")
    monkeypatch.setattr(pii.threading, "active_count", lambda: 1)  # as in a stage before its MLflow run
    with pii.absent([name, "json"]) as hidden:
        assert hidden == [name]  # json is imported already: it stays visible
        with pytest.raises(ImportError):
            importlib.import_module(name)
        assert importlib.import_module("json").dumps(1) == "1"
    assert importlib.import_module(name).VALUE == 7


def test_absent_hides_nothing_while_another_thread_runs(tmp_path, monkeypatch):
    import importlib

    name = _module(tmp_path, monkeypatch, "grpoflow_pii_backend_b")
    monkeypatch.setattr(pii.threading, "active_count", lambda: 2)  # e.g. MLflow's system metrics
    with pii.absent([name]) as hidden:
        assert hidden == [] and importlib.import_module(name).VALUE == 7
