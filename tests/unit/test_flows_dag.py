import pytest
import yaml

from flows.dag import pipeline_params_file, stage_order


def write(tmp_path, stages, vars_=None):
    spec = {"stages": stages}
    if vars_:
        spec["vars"] = vars_
    path = tmp_path / "dvc.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_order_follows_deps_on_outs_not_file_order(tmp_path):
    path = write(
        tmp_path,
        {
            "train": {"cmd": "x", "deps": ["data/prepared/train.jsonl", "models/ref"], "outs": ["models/policy"]},
            "sft": {"cmd": "x", "deps": ["data/prepared"], "outs": ["models/ref"]},
            "prepare": {"cmd": "x", "deps": ["src"], "outs": ["data/prepared"], "metrics": [{"m.json": {"cache": False}}]},
            "report": {"cmd": "x", "deps": ["m.json"]},
        },
    )
    assert [s.name for s in stage_order(path)] == ["prepare", "sft", "train", "report"]


def test_subset_keeps_dag_order_and_unknown_names_fail(tmp_path):
    path = write(tmp_path, {"b": {"cmd": "x", "deps": ["a.out"]}, "a": {"cmd": "x", "outs": ["a.out"]}})
    assert [s.name for s in stage_order(path, only=["b", "a"])] == ["a", "b"]
    with pytest.raises(ValueError, match="unknown stage"):
        stage_order(path, only=["c"])


def test_cycle_is_reported(tmp_path):
    path = write(tmp_path, {"a": {"cmd": "x", "deps": ["b.out"], "outs": ["a.out"]}, "b": {"cmd": "x", "deps": ["a.out"], "outs": ["b.out"]}})
    with pytest.raises(ValueError, match="cycle"):
        stage_order(path)


def test_the_projects_dvc_yaml_parses_and_names_its_params_file():
    assert [s.name for s in stage_order("dvc.yaml")][:2] == ["base_model", "prepare"]
    assert pipeline_params_file("dvc.yaml") == "params/default.yaml"
