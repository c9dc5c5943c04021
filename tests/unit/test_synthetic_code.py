import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.config import SyntheticCodeConfig
from grpoflow.data.ingest import RawRow, ingest
from grpoflow.data.synthetic_code import _permuted, combinations, generate, make_task
from grpoflow.data.text import normalize_text

ASSERT = re.compile(r"^assert \w+\((-?\d+)\) == (-?\d+|True|False)$")


def passes(task) -> bool:
    """Whether the task's solution passes every one of its asserts (trusted generated code: plain exec)."""
    scope: dict = {}
    exec(task.solution, scope)
    try:
        for test in task.tests:
            exec(test, scope)
    except AssertionError:
        return False
    return True


def test_same_seed_same_tasks_and_prefix_stable():
    cfg = SyntheticCodeConfig(num_examples=60)
    a = list(generate(3, cfg))
    assert a == list(generate(3, cfg))
    assert [t.row(3) for t in a] == [t.row(3) for t in generate(3, cfg)]
    assert a[:20] == list(generate(3, cfg.model_copy(update={"num_examples": 20})))
    assert a != list(generate(4, cfg))


def test_every_solution_passes_its_own_asserts_and_a_constant_answer_does_not():
    cfg = SyntheticCodeConfig(num_examples=combinations(SyntheticCodeConfig()))
    for task in generate(0, cfg):
        assert passes(task), task
        calls = [ASSERT.match(t).groups() for t in task.tests]
        assert len({x for x, _ in calls}) == cfg.tests_per_task  # distinct inputs
        if task.template != "times" or task.constant != 0:  # x * 0 is 0 whatever x is
            assert len({expected for _, expected in calls}) > 1, task


def test_a_wrong_constant_fails_the_asserts():
    task = next(t for t in generate(0, SyntheticCodeConfig(num_examples=200)) if t.template == "plus")
    wrong = task.solution.replace(f"+ {task.constant}", f"+ {task.constant + 1}")
    assert wrong != task.solution
    assert not passes(type(task)(**{**task.__dict__, "solution": wrong}))


def test_prompts_are_distinct_until_every_combination_is_used():
    cfg = SyntheticCodeConfig(constant_min=2, constant_max=4)
    size = combinations(cfg)
    prompts = [normalize_text(t.prompt) for t in generate(1, cfg.model_copy(update={"num_examples": size + 5}))]
    assert len(set(prompts[:size])) == size
    assert prompts[size:] == prompts[:5]  # then the stream starts over (prepare de-duplicates the repeats)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1000])
def test_the_task_order_is_a_permutation(size):
    assert sorted(_permuted(i, size, 9) for i in range(size)) == list(range(size))


@settings(max_examples=100)
@given(st.integers(0, 10_000), st.integers(0, 100_000), st.integers(0, 50), st.integers(0, 50), st.integers(1, 10))
def test_constants_stay_in_range_and_solutions_pass(seed, index, low, span, per_task):
    cfg = SyntheticCodeConfig(constant_min=low, constant_max=max(low + span, 1), tests_per_task=per_task)
    task = make_task(seed, index, cfg)
    assert cfg.constant_min <= task.constant <= cfg.constant_max
    assert str(task.constant) in task.prompt and str(task.constant) in task.solution
    assert passes(task)


def test_rows_ingest_as_code_records_without_rejects():
    tasks = list(generate(0, SyntheticCodeConfig(num_examples=100)))
    got = ingest([RawRow(t.index + 1, t.row(0)) for t in tasks], "code", source="s", source_file="<g>", license="CC0")
    assert got.rejected == [] and len(got.records) == 100
    rec = got.records[0]
    assert rec.task == "code" and rec.id == "synthetic_code-0-0" and rec.entry_point is None
    assert rec.tests == tasks[0].tests and rec.solution == rec.reference_answer == tasks[0].solution
    assert rec.prompt.startswith("Write a Python function ")
