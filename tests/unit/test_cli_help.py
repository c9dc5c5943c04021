"""``--help`` of every CLI: answered before any heavy import, examples shown as written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tasks.command import help_text
from tasks.stages import STAGES

HEAVY = ("torch", "deepspeed", "transformers", "mlflow", "matplotlib", "vllm")
PROBE = """import runpy, sys
sys.argv = ["prog", "--help"]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit:
    pass
print("LOADED", sorted(m for m in {heavy!r} if m in sys.modules))
"""


def _help(module: str, heavy: tuple[str, ...] = HEAVY) -> tuple[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, heavy=heavy)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    text, _, loaded = out.stdout.rpartition("LOADED ")
    return text, loaded.strip()


@pytest.mark.parametrize(
    "module",
    [s.module for s in STAGES]
    + ["tasks.arm", "tasks.ablation_report", "tasks.tune_trial", "tasks.stages", "flows.serve"],
)
def test_a_stage_cli_answers_help_without_loading_torch_mlflow_or_matplotlib(module):
    text, loaded = _help(module)
    assert text.startswith("usage: python -m") and loaded == "[]", (text[-500:], loaded)


def test_the_pipeline_help_lists_the_stages_and_shows_its_examples_as_written():
    text, loaded = _help("flows.pipeline", heavy=("torch", "deepspeed", "transformers"))
    assert loaded == "[]"
    assert "stages, in order: " + " ".join(s.name for s in STAGES if not s.opt_in) + "\n" in text
    assert "opt-in stages" in text  # reward_model: listed apart, since a set that does not ask for it refuses it
    assert "\n  python -m flows.pipeline --stages prepare validate_verifiers\n" in text
    assert "``" not in text and ":mod:" not in text


def test_help_text_drops_rest_markup_and_keeps_indented_examples():
    doc = "Runs ``dvc repro`` per stage (:mod:`flows.workspace`, :func:`~x.y`).\n\n    python -m x --a 1\n"
    assert help_text(doc) == "Runs dvc repro per stage (flows.workspace, x.y).\n\n    python -m x --a 1"
