"""A run's overrides are written into its parameter set with the set's text kept: its comments (the
documentation of every setting), quotes and layout (grpoflow/config/yaml_edit.py; #51: `dvc exp apply`
once brought back a params/default.yaml without a single comment)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.config.yaml_edit import set_keys

ROOT = Path(__file__).resolve().parents[2]
SETS = sorted((ROOT / "params").rglob("*.yaml"))


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_every_committed_set_comes_back_byte_for_byte(path):
    assert set_keys(path.read_text(), {}) == path.read_text()


def test_an_override_changes_its_own_line_and_nothing_else():
    text = (ROOT / "params" / "default.yaml").read_text()
    after = set_keys(text, {"rl.steps": 20, "grpo.beta": 0.02})
    assert sorted(changed_lines(text, after)) == sorted(
        ["-  steps: 150", "+  steps: 20", "-  beta: 0.04", "+  beta: 0.02"]
    )


def test_a_float_in_exponent_form_reads_back_as_a_float():
    """hypothesis found it: ruamel writes 1e-05, which PyYAML (YAML 1.1) reads as a string."""
    after = set_keys("rl:\n  steps: 3\n", {"rl.steps": 1e-05, "rl.lr": 3e20, "rl.beta": 0.04})
    assert yaml.safe_load(after) == {"rl": {"steps": 1e-05, "lr": 3e20, "beta": 0.04}}


@pytest.mark.parametrize("value", ["\x85", "a\nb", "\t", "\u2028", " lead", "NO"])
def test_a_string_that_single_quotes_would_fold_reads_back_as_written(value):
    """hypothesis found it: '\x85' (NEL, a YAML line break) came back as a space from single quotes."""
    assert yaml.safe_load(set_keys("rl:\n  steps: 3\n", {"rl.steps": value})) == {"rl": {"steps": value}}


def test_a_missing_section_is_made_and_a_null_written_out():
    text = "# the set\nrl:\n  steps: 3  # few\n"
    after = set_keys(text, {"model.lora.rank": 4, "rl.clip": None})
    assert after == "# the set\nrl:\n  steps: 3  # few\n  clip: null\nmodel:\n  lora:\n    rank: 4\n"


@given(
    st.dictionaries(
        st.sampled_from(["rl.steps", "grpo.beta", "data.synthetic.ops", "experiment.seed", "new.key"]),
        st.one_of(
            st.integers(-(10**6), 10**6),
            st.floats(allow_nan=False, allow_infinity=False),
            st.none(),
            st.lists(st.sampled_from(["+", "-", "*"]), max_size=3),
            st.text(max_size=12),
        ),
        max_size=4,
    )
)
def test_the_edited_text_reads_back_as_the_set_with_the_values(values):
    text = (ROOT / "params" / "default.yaml").read_text()
    expected = yaml.safe_load(text)
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = expected
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    after = set_keys(text, values)
    assert yaml.safe_load(after) == expected
    assert sum(line.lstrip("+- ").startswith("#") for line in changed_lines(text, after)) == 0  # no comment lost
