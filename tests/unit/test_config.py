from pathlib import Path

import pydantic
import pytest
import yaml

from grpoflow.config import ConfigError, Params, RLConfig, describe_schema, has_dotted, load_params, validate_params

DEFAULT = Path(__file__).resolve().parents[2] / "params" / "default.yaml"


def test_default_params_validate_and_match_the_schema_defaults_where_unset():
    p = load_params(DEFAULT)
    assert p.experiment.seed == 0
    assert p.mlflow_experiment == "grpoflow-default"


def test_a_set_that_names_no_experiment_is_named_after_its_file(tmp_path, monkeypatch):
    """#51: such a set logged to grpoflow-default, among the default set's runs."""
    monkeypatch.chdir(tmp_path)
    raw = yaml.safe_load(DEFAULT.read_text())
    del raw["experiment"]["name"]
    Path("params").mkdir()
    Path("params/mine.yaml").write_text(yaml.safe_dump(raw))
    Path("params/named.yaml").write_text(yaml.safe_dump({**raw, "experiment": {**raw["experiment"], "name": "x"}}))
    Path("params/bare.yaml").write_text(yaml.safe_dump({k: v for k, v in raw.items() if k != "experiment"}))
    assert load_params("params/mine.yaml").mlflow_experiment == "grpoflow-mine"
    assert load_params("params/bare.yaml").experiment.name == "bare"
    assert load_params("params/named.yaml").mlflow_experiment == "grpoflow-x"  # a name given is kept


def test_every_field_is_documented():
    undocumented = [key for key, _, desc in describe_schema() if not desc.strip()]
    assert undocumented == []


def test_misspelt_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError) as exc:
        validate_params({"data": {"synthetic": {"num_exmples": 10}}}, source="p.yaml")
    msg = str(exc.value)
    assert "p.yaml" in msg and "data.synthetic.num_exmples: unknown key" in msg and "num_examples" in msg


def test_unknown_section_is_named():
    with pytest.raises(ConfigError, match=r"grpo_typo: unknown key"):
        validate_params({"grpo_typo": {}})


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError, match=r"experiment.seed: .*integer.*'zero'"):
        validate_params({"experiment": {"seed": "zero"}})


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"data": {"split": {"train": 0.5, "val": 0.1, "test": 0.1}}}, "must be 1"),
        ({"data": {"synthetic": {"min_ops": 3, "max_ops": 2}}}, "min_ops"),
        ({"data": {"synthetic": {"ops": ["^"]}}}, r"data.synthetic.ops.0"),
        ({"model": {"hidden_size": 100, "num_heads": 3}}, "divisible"),
        ({"rl": {"num_generations": 1}}, r"rl.num_generations: Input should be greater than or equal to 2"),
        (
            {"rl": {"generation_schedule": [{"from_step": 5, "num_generations": 1}]}},
            r"rl.generation_schedule.0.num_generations",
        ),
        ({"rewards": [{"name": "maths"}]}, r"rewards.0: .*unknown verifier 'maths' \(did you mean 'math'\?\)"),
        ({"evaluate": {"k": 8, "n_samples": 4}}, r"k \(8\) must be <= n_samples \(4\)"),
    ],
)
def test_impossible_combinations_are_errors(raw, message):
    with pytest.raises(ConfigError, match=message):
        validate_params(raw)


def test_overrides_are_validated(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({"experiment": {"seed": 1}}))
    assert load_params(f, {"experiment.seed": 7}).experiment.seed == 7
    with pytest.raises(ConfigError, match="experiment.sed: unknown key"):
        load_params(f, {"experiment.sed": 7})


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_params(top)


def test_params_are_immutable():
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        Params().experiment.seed = 3  # type: ignore[misc]


def test_a_key_in_the_wrong_section_names_where_it_lives():
    with pytest.raises(ConfigError) as err:
        validate_params({"grpo": {"steps": 3, "num_generatoins": 4, "sampling": {"temperature": 1.0}}})
    message = str(err.value)
    assert "grpo.steps: unknown key (did you mean 'rl.steps'?)" in message
    assert "grpo.num_generatoins: unknown key (did you mean 'rl.num_generations'?)" in message
    assert "grpo.sampling: unknown key (did you mean 'rl.sampling'?)" in message


def test_the_schema_defaults_are_the_demo_except_the_leakage_thresholds_and_the_tuned_ppo():
    from grpoflow.config import load_params

    demo, schema = load_params("params/default.yaml").model_dump(), Params().model_dump()
    leakage = ("ngram_min_overlap", "near_threshold")
    for key in leakage:  # real data keeps the schema's; generated problems share template phrases
        assert demo["data"]["leakage"].pop(key) != schema["data"]["leakage"].pop(key)
    # PPO as `make tune` tuned it for this set (docs/tuning/default.md): a set's values, not the schema's
    tuned = ("lam_actor", "lam_critic", "actor_lr", "kl_coef", "cliprange_value", "critic_warmup_steps")
    for key in tuned:
        assert demo["ppo"].pop(key) != schema["ppo"].pop(key)
    assert demo["ppo"]["critic_engine"].pop("lr") != schema["ppo"]["critic_engine"].pop("lr")
    assert demo == schema


def test_generation_schedule_anneals_g():
    cfg = RLConfig(
        num_generations=16,
        generation_schedule=[{"from_step": 10, "num_generations": 8}, {"from_step": 20, "num_generations": 4}],
    )
    assert [cfg.generations_at(s) for s in (0, 9, 10, 19, 20, 99)] == [16, 16, 8, 8, 4, 4]


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {"rl": {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 16}}},
            r"24 sequences per process .* not a multiple of rl.engine.micro_batch_size=16",
        ),
        ({"rl": {"sampling": {"temperature": 0.0}}}, "temperature 0 makes every completion of a group identical"),
        (
            {"rl": {"adaptive_kl": {"enabled": True}}, "grpo": {"beta": 0}, "ppo": {"kl_coef": 0}},
            "adaptive_kl needs a starting",
        ),
    ],
)
def test_config_errors_that_need_no_model_fail_when_the_params_are_loaded(raw, message):
    with pytest.raises(ConfigError, match=message):
        validate_params(raw)


def test_has_dotted_sees_only_what_the_file_spells_out():
    raw = {"rl": {"steps": 0, "sampling": None}, "grpo": 3}
    assert has_dotted(raw, "rl.steps") and has_dotted(raw, "rl.sampling")  # falsy values are there
    assert not has_dotted(raw, "rl.sampling.temperature")  # below a None
    assert not has_dotted(raw, "grpo.beta") and not has_dotted(raw, "ppo")


def test_the_dapo_preset_sets_its_recipe_except_what_the_file_sets_itself():
    from grpoflow.config import ConfigError, validate_params

    p = validate_params({"rl": {"preset": "dapo", "sampling": {"max_completion_length": 100}}})
    assert (
        p.rl.clip_eps,
        p.rl.clip_eps_high,
        p.rl.aggregation,
        p.rl.dynamic_sampling.enabled,
        p.rl.overlong_buffer,
        p.grpo.beta,
    ) == (0.2, 0.28, "bnpo", True, 20, 0.0)  # the buffer: a fifth of the cap, as in the paper
    mine = validate_params({"rl": {"preset": "dapo", "clip_eps_high": 0.3}, "grpo": {"beta": 0.01}})
    assert mine.rl.clip_eps_high == 0.3 and mine.grpo.beta == 0.01 and mine.rl.aggregation == "bnpo"
    assert validate_params({}).rl.dynamic_sampling.enabled is False  # no preset: the paper's GRPO
    with pytest.raises(ConfigError, match="rl.preset"):
        validate_params({"rl": {"preset": "dapo2"}})


def test_reward_entries_name_a_verifier_or_the_reward_model():
    import pytest

    from grpoflow.config import ConfigError, validate_params

    rm = [validate_params({"rewards": [{"name": "rm", **path}]}).rewards[0] for path in ({}, {"path": "x/rm"})]
    assert [r.model_path for r in rm] == [
        "models/reward_model",
        "x/rm",
    ]  # two rm components: grpoflow.config.rules refuses
    with pytest.raises(ConfigError, match="path is for a reward model"):
        validate_params({"rewards": [{"name": "math", "path": "models/reward_model"}]})
    with pytest.raises(ConfigError, match="rm takes no options"):
        validate_params({"rewards": [{"name": "rm", "options": {"batch_size": 4}}]})
    with pytest.raises(ConfigError, match="unknown verifier 'rmm'.*did you mean 'rm'"):
        validate_params({"rewards": [{"name": "rmm"}]})
    with pytest.raises(ConfigError, match="normalize"):
        validate_params({"rewards": [{"name": "rm", "normalize": "batch"}]})


# ---------------------------------------------------------------- hostile params files (issue 23, items 6 and 7)


def test_a_params_file_of_nested_aliases_is_refused_at_once_naming_file_and_line(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"{n}: &{n} [{','.join(['*' + p] * 9)}]" for p, n in zip("abcdef", "bcdefg")]
    bomb.write_text("\n".join(lines + ["experiment: {seed: *g}"]))  # 9**7 strings, expanded
    with pytest.raises(ConfigError) as refused:
        load_params(bomb)
    assert str(refused.value).startswith(f"{bomb}, line 1: YAML anchor &a is not allowed")
    assert len(str(refused.value)) < 300


def test_a_key_given_twice_is_refused_with_both_lines_not_silently_overridden(tmp_path):
    # The hostile review's case: a visible allow_unsandboxed: false undone by a later true (PyYAML keeps the last).
    twice = tmp_path / "twice.yaml"
    twice.write_text("sandbox:\n  allow_unsandboxed: false\n  workers: 2\n  allow_unsandboxed: true\n")
    with pytest.raises(ConfigError) as refused:
        load_params(twice)
    assert str(refused.value) == (
        f"{twice}, line 4: key 'allow_unsandboxed' is given twice in one mapping (first on line 2): "
        "the later value would silently win; keep one"
    )
    once = tmp_path / "once.yaml"
    once.write_text("sandbox:\n  allow_unsandboxed: false\nexperiment:\n  seed: 3\n")
    assert load_params(once).experiment.seed == 3  # the same key in two sections is two keys


def test_a_params_file_name_a_shell_would_run_is_refused_by_load_params(tmp_path):
    hostile = tmp_path / "x$(id>pwned).yaml"
    hostile.write_text("experiment: {seed: 1}\n")
    with pytest.raises(ConfigError, match=r"may contain only letters, digits and \. _ / -"):
        load_params(hostile)


def test_a_bad_value_is_echoed_short_in_the_error():
    with pytest.raises(ConfigError) as refused:
        validate_params({"experiment": {"seed": ["x" * 100] * 100_000}})
    message = str(refused.value)
    assert "experiment.seed: Input should be a valid integer (got [" in message and len(message) < 600


@pytest.mark.parametrize(
    "package, message",
    [
        ("--index-url=https://evil.example/simple", "pip options are not allowed"),
        ("-e .", "pip options are not allowed"),
        ("git+https://example.com/x.git", "not a PEP 508 requirement"),
        ("*.whl", "not a PEP 508 requirement"),
        ("gguf", "needs one exact version"),
    ],
)
def test_model_packages_are_pinned_requirements_only(package, message):
    with pytest.raises(ConfigError, match=rf"model: .*packages\[1\]: .*{message}"):
        validate_params({"model": {"packages": ["gguf==0.19.0", package]}})


def test_model_packages_are_kept_in_normal_form():
    assert validate_params({"model": {"packages": ["gguf == 0.19.0"]}}).model.packages == ["gguf==0.19.0"]


def test_the_schema_imports_no_maths_and_no_verifier_implementation():
    import subprocess
    import sys

    from grpoflow.provenance import module_files

    # The import graph (dvc.yaml's code deps of every stage): names only, no implementation.
    graph = module_files("grpoflow.config")
    assert [
        f
        for f in graph
        if f
        in (
            "grpoflow/rl/advantages.py",
            "verifiers/math.py",
            "verifiers/code.py",
            "verifiers/format.py",
            "verifiers/sandbox.py",
        )
    ] == []
    # At run time a set loads without torch; a verifier's module is imported only to check its options.
    code = (
        "import sys; from grpoflow.config import load_params; p = load_params('params/default.yaml'); "
        "print([m for m in ('torch', 'grpoflow.rl.advantages', 'verifiers.code', 'verifiers.sandbox') "
        "if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]"


def test_verifier_and_estimator_names_fail_at_load_with_a_hint():
    with pytest.raises(ConfigError, match="unknown verifier 'maths' \\(did you mean 'math'\\?\\)"):
        validate_params({"rewards": [{"name": "maths"}]})
    with pytest.raises(ConfigError, match="fallback_lastnumber"):
        validate_params({"rewards": [{"name": "math", "options": {"fallback_lastnumber": False}}]})
    with pytest.raises(ConfigError, match="unknown advantage estimator 'rlo' \\(did you mean 'rloo'\\?\\)"):
        validate_params({"grpo": {"advantage_estimator": "rlo"}})


def test_a_section_given_in_part_keeps_its_fields_default_for_the_rest(tmp_path):
    # rl.engine's default sets lr=2e-4 and micro_batch_size=64 over EngineConfig's own 1e-3 and 16:
    # a set (or an override) that names only zero_stage must not fall back to the class's values.
    raw = {"rl": {"engine": {"zero_stage": 2}}, "sft": {"engine": {"lr": 1e-3}}}
    p = validate_params(raw)
    assert (p.rl.engine.zero_stage, p.rl.engine.lr, p.rl.engine.micro_batch_size) == (2, 2e-4, 64)
    assert (p.sft.engine.lr, p.sft.engine.warmup_steps, p.sft.engine.micro_batch_size) == (1e-3, 20, 32)
    assert p.ppo.critic_engine.micro_batch_size == 64 and p.reward_model.engine.lr == 1e-4
    path = tmp_path / "p.yaml"
    path.write_text("rl:\n  steps: 3\n")
    assert load_params(path, {"rl.engine.zero_stage": 1}).rl.engine.lr == 2e-4
    assert validate_params({"rl": {"engine": {"lr": 5e-5}}}).rl.engine.lr == 5e-5
