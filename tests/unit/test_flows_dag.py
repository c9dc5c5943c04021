from pathlib import Path

import pytest
import yaml

from flows.ablation import ablation_overrides
from flows.dag import pipeline_params_file, run_order, stage_order
from grpoflow.config import load_params
from tasks.stages import Io, Stage, for_params

ROOT = Path(__file__).resolve().parents[2]


def declare(name, deps=(), outs=(), metrics=()):
    io = [Io(None, p, "dep") for p in deps] + [Io(None, p, "out") for p in outs]
    io += [Io(None, p, "metric") for p in metrics]
    return Stage(name, f"tasks.{name}", tuple(io))


def test_order_follows_deps_on_outs_not_file_order():
    stages = [
        declare("train", deps=["data/prepared/train.jsonl", "models/ref"], outs=["models/policy"]),
        declare("sft", deps=["data/prepared"], outs=["models/ref"]),
        declare("prepare", deps=["src"], outs=["data/prepared"], metrics=["m.json"]),
        declare("report", deps=["m.json"]),
    ]
    assert [s.name for s in stage_order(stages)] == ["prepare", "sft", "train", "report"]


def test_subset_keeps_dag_order_and_unknown_names_fail():
    stages = [declare("b", deps=["a.out"]), declare("a", outs=["a.out"])]
    assert [s.name for s in stage_order(stages, only=["b", "a"])] == ["a", "b"]
    with pytest.raises(ValueError, match="unknown stage"):
        stage_order(stages, only=["c"])


def test_cycle_is_reported():
    stages = [declare("a", deps=["b.out"], outs=["a.out"]), declare("b", deps=["a.out"], outs=["b.out"])]
    with pytest.raises(ValueError, match="cycle"):
        stage_order(stages)


def test_the_projects_dvc_yaml_parses_and_names_its_params_file():
    params = load_params(ROOT / "params" / "default.yaml")
    assert [s.name for s in run_order(params)][:2] == ["base_model", "prepare"]
    assert pipeline_params_file(ROOT / "dvc.yaml") == "params/default.yaml"


def _dvc_paths(entries) -> list[str]:
    """dvc.yaml lists a path either as a string or as a one-key mapping of path -> options."""
    return [p for entry in entries or [] for p in ([entry] if isinstance(entry, str) else list(entry))]


def _dvc_upstream(text: str) -> dict[str, set[str]]:
    """Each dvc.yaml stage's upstream stages, read from the file the way DVC reads it (deps on outs)."""
    stages = yaml.safe_load(text)["stages"]
    writes = {name: _dvc_paths(s.get("outs")) + _dvc_paths(s.get("metrics")) for name, s in stages.items()}

    def feeds(outs, deps):
        return any(d == out or d.startswith(out.rstrip("/") + "/") for d in deps for out in outs)

    return {
        name: {o for o, outs in writes.items() if o != name and feeds(outs, _dvc_paths(s.get("deps")))}
        for name, s in stages.items()
    }


def _assert_flow_order_fits(text: str, params) -> list[str]:
    order = [s.name for s in run_order(params)]
    upstream = _dvc_upstream(text)
    assert sorted(order) == sorted(upstream)  # the flow runs exactly dvc.yaml's stages
    for i, name in enumerate(order):
        assert upstream[name] <= set(order[:i]), f"{name} runs before {upstream[name] - set(order[:i])}"
    return order


def test_the_flows_order_is_an_order_of_the_committed_dvc_yaml():
    text = (ROOT / "dvc.yaml").read_text()
    params = load_params(ROOT / pipeline_params_file(ROOT / "dvc.yaml"))
    order = _assert_flow_order_fits(text, params)
    assert order == list(yaml.safe_load(text)["stages"])  # and, as generated, its file order


@pytest.mark.parametrize(
    "overrides",
    [
        {"experiment.stages": ["base_model", "prepare", "sft"]},
        ablation_overrides(["grpo", "rloo"], [0, 1], None),
    ],
)
def test_the_flows_order_fits_the_dvc_yaml_generated_for_other_runs(overrides):
    params = load_params(ROOT / "params" / "default.yaml", overrides)
    _assert_flow_order_fits(for_params("params/default.yaml", params), params)
