"""Own data: answers as a plain number, '#### n' or \\boxed{}, and the question/answer fields
named by the source or found among the common pairs."""

import json

import pytest
from pydantic import ValidationError

from grpoflow.config import DataConfig, SourceConfig
from grpoflow.data.ingest import RawRow, ingest
from grpoflow.data.normalise import final_answer
from grpoflow.data.prepare import prepare
from grpoflow.data.raw import RowError


def rows_of(*rows):
    return [RawRow(i + 1, r) for i, r in enumerate(rows)]


def run(*rows, fmt="gsm8k", **fields):
    return ingest(rows_of(*rows), fmt, source="s", source_file="mine.jsonl", license="MIT", **fields)


@pytest.mark.parametrize(
    "text, answer",
    [
        ("361", "361"),
        (" 1,234 ", "1234"),
        ("-3.5", "-3.5"),
        ("$18", "18"),
        ("Work.\n#### 1,002", "1002"),
        ("So $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
    ],
)
def test_each_answer_form_gives_the_reference(text, answer):
    assert final_answer(text, "answer")[0] == answer


def test_a_plain_number_gets_a_final_line_the_format_reward_accepts():
    from verifiers.format import score

    gsm8k, math = final_answer("361", "answer")[1], final_answer("361", "solution", boxed_first=True)[1]
    assert (gsm8k, math) == ("#### 361", "\\boxed{361}")
    assert score(gsm8k) == score(math) == 1.0


def test_the_format_decides_which_form_is_read_first():
    both = "\\boxed{7}\n#### 8"
    assert final_answer(both, "a")[0] == "8" and final_answer(both, "a", boxed_first=True)[0] == "7"


@pytest.mark.parametrize("text", ["three hundred", "361 apples", "1/2", "#### twelve", "The answer is 4."])
def test_an_unparseable_answer_names_the_field(text):
    with pytest.raises(RowError, match=r"^unparseable_answer: reply:"):
        final_answer(text, "reply")


def test_plain_number_answers_are_kept_and_bad_ones_quarantined_with_file_line_and_field():
    got = run({"question": "15 + 346?", "answer": "361"}, {"question": "q?", "answer": "many"})
    assert [(r.prompt, r.reference_answer, r.solution) for r in got.records] == [("15 + 346?", "361", "#### 361")]
    bad = got.rejected[0]
    assert (bad.source_file, bad.line, bad.reason.split(":")[:2]) == (
        "mine.jsonl",
        2,
        ["unparseable_answer", " answer"],
    )


@pytest.mark.parametrize(
    "row",
    [{"problem": "p?", "solution": "\\boxed{4}"}, {"prompt": "p?", "response": "4"}, {"question": "p?", "answer": "4"}],
)
def test_the_common_field_pairs_are_recognised(row):
    got = run(row)
    assert (got.records[0].prompt, got.records[0].reference_answer, got.rejected) == ("p?", "4", [])


def test_named_fields_win_over_the_common_ones():
    got = run({"q": "p?", "a": "5", "question": "other?", "answer": "6"}, question_field="q", answer_field="a")
    assert (got.records[0].prompt, got.records[0].reference_answer) == ("p?", "5")


def test_no_known_fields_is_a_clear_error_naming_the_file_and_the_fields():
    with pytest.raises(
        ValueError, match=r"data file mine.jsonl: no question/answer pair .* Fields found: 'input', 'output'"
    ):
        run({"input": "p?", "output": "4"})
    with pytest.raises(ValueError, match=r"mine.jsonl: .*looked for q/a.*Fields found: 'input'"):
        run({"input": "p?"}, question_field="q", answer_field="a")


def test_two_known_pairs_are_ambiguous():
    with pytest.raises(ValueError, match=r"mine.jsonl: .*more than one .*question/answer, prompt/response"):
        run({"question": "p?", "answer": "4", "prompt": "x", "response": "y"})


def test_a_row_missing_the_found_fields_is_still_only_that_rows_problem():
    got = run({"question": "p?", "answer": "4"}, {"answer": "5"}, "not an object")
    assert [(q.line, q.reason.split(":")[0]) for q in got.rejected] == [(2, "missing_field"), (3, "wrong_type")]


def test_field_names_are_for_question_answer_sources_only():
    SourceConfig(kind="file", path="d.jsonl", license="MIT", question_field="q", answer_field="a")
    with pytest.raises(ValidationError, match="question_field apply to file and hub sources"):
        SourceConfig(kind="file", path="d.jsonl", license="MIT", format="code", question_field="q")
    with pytest.raises(ValidationError, match="the same field"):
        SourceConfig(kind="file", path="d.jsonl", license="MIT", question_field="q", answer_field="q")


def test_a_file_of_plain_number_answers_prepares_with_no_quarantine(tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text(
        "".join(json.dumps({"question": f"What is {i} + 300?", "answer": str(i + 300)}) + "\n" for i in range(50))
    )
    cfg = DataConfig(sources=[SourceConfig(kind="file", path=str(mine), license="CC-BY-4.0")])
    result = prepare(0, cfg, tmp_path)
    assert result.failures == [] and result.quarantine == []
    assert sum(len(rows) for rows in result.splits.values()) == 50


def test_the_reference_gives_every_source_key_a_type_and_an_example():
    from grpoflow.config.docs import schema_rows

    rows = [r for r in schema_rows() if r.key.startswith("data.sources[].")]
    assert {"data.sources[].question_field", "data.sources[].answer_field"} <= {r.key for r in rows}
    assert [r.key for r in rows if not (r.type and r.example)] == []


def test_a_pair_split_over_bad_rows_is_still_recognised():
    got = run({"question": "p?"}, {"answer": "4"})
    assert [(q.line, q.reason) for q in got.rejected] == [(1, "missing_field: answer"), (2, "missing_field: question")]
