"""Every pipeline stage, declared once: its CLI module, the paths it reads and writes (which are
also its command-line defaults), and the params keys it depends on.

dvc.yaml is generated from these declarations, each stage's code dependencies from the import
graph of its module, so that editing any file a stage imports makes ``dvc repro`` run it again:

    python -m tasks.stages --write     # regenerate dvc.yaml after changing a declaration (for the set
                                       # dvc.yaml's params_file names; --write --params X switches sets)
    python -m tasks.stages --check     # exit 1 when dvc.yaml differs (a unit test does the same)

A set's ``launch`` section (more than one process) puts ``torchrun`` with its options in front of
the commands of the stages it names (:func:`launchers`); one process keeps ``python -m``.

The Prefect flow reads stage order, outputs and metrics from here as well.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from grpoflow import catalog
from grpoflow.config import RM_DEFAULT_PATH, RM_REWARD
from grpoflow.config.orchestration import builtin_arms
from tasks.command import command_parser
from tasks.stage_model import PARAMS_VAR, Io, Stage, _io

GENERIC_TRAINING = "tasks.train"  # the stage CLI of an algorithm without one of its own (--algorithm NAME)
DVC_YAML = "dvc.yaml"
K8S_SUBMIT = ["python", "-m", "flows.k8s", "--params"]  # a launched stage as a Job (launch.kubernetes.enabled)


RAW_DIR = "data/raw"  # where a set's own data files go; prepare depends on the files its set names (local_sources)


def local_sources(params) -> list[str]:
    """The data files a set's prepare reads from disk (sources, benchmarks and pairs of kind ``file``; a
    ``package:`` file is the installed package's): its dependencies, so that a file another set reads, dropped
    into data/raw/, does not stale this set's prepare."""
    d = params.data
    found = [str(src.path) for src in (*d.sources, *d.benchmarks, *d.pairs) if src.kind == "file" and src.path]
    return sorted({path for path in found if not path.startswith("package:")})


# A set's reward model (rewards: [{name: rm}]) as a dependency: dropped where the set runs no
# reward_model stage (select() drops a list item that a stage left out would make).
RM_DEP = ("rm=" + RM_DEFAULT_PATH,)


def _training_io(name: str, where: str) -> tuple[Io, ...]:
    """What an RL training stage reads and writes; ``where`` places its outputs (``grpo``, ``arms/rloo-s1``)."""
    return (
        _io("data", "data/prepared", "dep", "the prepare stage's output directory"),
        _io(None, "data/verifier_validation", "dep", "the verifier gate must have passed"),
        _io(None, RM_DEP, "dep", "the reward model, where rewards use it"),
        _io("reference", "models/sft", "dep", "the reference policy, and the policy's starting point"),
        _io("out", f"models/{where}", "out", f"where to save {name}'s trained policy (Hugging Face format)"),
        # Kept across interrupted runs (DVC empties ordinary outs before a stage runs), so that
        # re-running the stage resumes from the last checkpoint.
        _io("checkpoints", f"checkpoints/{where}", "persist", "resumable checkpoints (kept across runs)"),
        _io("metrics", f"metrics/{where}.json", "metric", f"{name}'s metrics JSON"),
        _io("history", f"metrics/{where}_history.csv", "history", "per-step metrics CSV"),
    )


STAGES: list[Stage] = [
    Stage(
        "base_model",
        "tasks.base_model",
        (
            _io("out", "models/base", "out", "the starting model: converted from GGUF, or its source record"),
            _io("metrics", "metrics/base_model.json", "metric", "the stage's metrics JSON"),
        ),
        params=("experiment.cpu_kernels", "model", "prompt"),
    ),
    Stage(
        "prepare",
        "tasks.prepare",
        (
            _io(None, RAW_DIR, "dep", "local source files: the set's own (local_sources), data/raw/ by default"),
            _io("out", "data/prepared", "out", "directory for the splits, quarantine and report"),
            _io("metrics", "metrics/prepare.json", "metric", "the stage's metrics JSON"),
        ),
        params=("experiment.seed", "data"),
    ),
    Stage(
        "validate_verifiers",
        "tasks.validate_verifiers",
        (
            _io("data", "data/prepared", "dep", "the prepare stage's output directory"),
            _io(None, RM_DEP, "dep", "the reward model, where rewards use it (its gate)"),
            _io(
                None, ("rm-metrics=metrics/reward_model.json",), "dep", "the reward model's held-out pairwise accuracy"
            ),
            _io("out", "data/verifier_validation", "out", "directory for the report and confusions"),
            _io("metrics", "metrics/validate_verifiers.json", "metric", "the stage's metrics JSON"),
        ),
        params=("experiment.seed", "rewards", "sandbox", "verifier_gate"),
    ),
    Stage(
        "sft",
        "tasks.sft",
        (
            _io("data", "data/prepared", "dep", "the prepare stage's output directory"),
            _io("base", "models/base", "dep", "the starting model (the base_model stage)"),
            _io("out", "models/sft", "out", "where to save the reference model (Hugging Face format)"),
            _io("metrics", "metrics/sft.json", "metric", "the stage's metrics JSON"),
        ),
        params=(
            "experiment.seed",
            "experiment.cpu_kernels",
            "model",
            "prompt",
            "rewards",
            "sandbox",
            "sft",
            "rl.rollout_engine",
            "rl.decode",
            "rl.sampling.max_completion_length",
        ),
        builds="judges",  # its val accuracy
    ),
    Stage(
        "reward_model",
        "tasks.reward_model",
        (
            _io("data", "data/prepared", "dep", "the prepare stage's output directory (train prompts, data.pairs)"),
            _io(
                "policy", "models/sft", "dep", "the SFT policy: the samples of self-built pairs, and the RM's backbone"
            ),
            _io("out", RM_DEFAULT_PATH, "out", "where to save the reward model (a sequence classifier, one score)"),
            _io("report", "reports/reward_model", "report", "directory for the pairs' summary and the margin plot"),
            _io("metrics", "metrics/reward_model.json", "metric", "held-out pairwise accuracy and margins"),
        ),
        params=(
            "experiment.seed",
            "experiment.cpu_kernels",
            "model",
            "prompt",
            "rewards",
            "sandbox",
            "reward_model",
            "rl.rollout_engine",
            "rl.decode",
            "rl.sampling.max_completion_length",
        ),
        opt_in=True,
    ),
    *[
        Stage(
            a.name,
            a.stage_module or GENERIC_TRAINING,
            _training_io(a.name, a.name),
            params=("experiment.seed", "experiment.cpu_kernels", "model", "prompt", "rewards", "sandbox", "rl")
            + a.sections,
            plot={"title": f"{a.title} training curves", "y": list(a.curves)},
            args=() if a.stage_module else ("--algorithm", a.name),
            loads=(a.module,),
        )
        for a in map(catalog.entry, catalog.default_run())  # an opt-in algorithm trains as an arm only
    ],
    Stage(
        "evaluate",
        "tasks.evaluate",
        (
            _io("data", "data/prepared", "dep", "the prepare stage's output directory"),
            _io(
                "models",
                ("sft=models/sft", *(f"{a}=models/{a}" for a in catalog.default_run())),
                "dep",
                "the policies to evaluate, as name=path (sft is the reference of the forgetting check)",
            ),
            _io("out", "data/evaluation", "out", "directory for per-example outputs"),
            _io("metrics", "metrics/evaluate.json", "metric", "the stage's metrics JSON"),
        ),
        params=(
            "experiment.seed",
            "experiment.cpu_kernels",
            "model.max_length",
            "evaluate",
            "prompt",
            "rewards",
            "sandbox",
            "rl.rollout_engine",
            "rl.decode",
            "rl.sampling.max_completion_length",
        ),
        builds="judges",
    ),
    Stage(
        "compare",
        "tasks.compare",
        (
            _io("evaluation", "metrics/evaluate.json", "dep", "the evaluate stage's metrics"),
            _io("outputs", "data/evaluation", "dep", "the evaluate stage's per-prompt outputs (the paired tests)"),
            *(_io(None, f"metrics/{a}.json", "dep", f"the {a} stage's metrics") for a in catalog.default_run()),
            *(_io(None, f"metrics/{a}_history.csv", "dep", f"the {a} stage's history") for a in catalog.default_run()),
            _io("out", "reports/compare", "report", "directory for the report and plots"),
            _io("metrics", "metrics/compare.json", "metric", "the stage's metrics JSON"),
        ),
    ),
]
BY_NAME = {s.name: s for s in STAGES}
ABLATION_REPORT = "ablation_report"


def arm_stage(arm: str, seed: int, custom: bool = False) -> Stage:
    """The ablation's stage for ``arm`` at training seed ``seed``: trains on the shared data and
    reference, then scores test pass@1 (tasks/arm.py). One DVC stage per (arm, seed), cached alone.
    An arm the set defines itself (``custom``, or any arm not built in) depends on its definition
    there too: a tuned overlay comes in that way (flows/ablation.py)."""
    return Stage(
        f"arm_{arm}_s{seed}",
        "tasks.arm",
        _training_io("the arm", f"arms/{arm}-s{seed}"),
        params=(
            "experiment.seed",
            "experiment.cpu_kernels",
            "model",
            "prompt",
            "rewards",
            "sandbox",
            "rl",
            *catalog.sections(),
            "evaluate",
            *((f"ablation.custom_arms.{arm}",) if custom or arm not in builtin_arms() else ()),
        ),
        args=("--arm", arm, "--seed", str(seed)),
        loads=tuple(a.module for a in catalog.ALGORITHMS.values()),  # the arm's, whichever it names
    )


def ablation_report_stage(arms: list[str], seeds: list[int]) -> Stage:
    """The stage that reads every (arm, seed) and writes the arms' table, verdicts and curves."""
    results = tuple(f"{arm}-s{seed}=metrics/arms/{arm}-s{seed}.json" for arm in arms for seed in seeds)
    return Stage(
        ABLATION_REPORT,
        "tasks.ablation_report",
        (
            _io("results", results, "dep", "each arm and seed's metrics, as arm-sSEED=path, the baseline arm first"),
            *(
                _io(None, f"metrics/arms/{arm}-s{seed}_history.csv", "dep", "its history")
                for arm in arms
                for seed in seeds
            ),
            _io("out", "reports/ablation", "report", "directory for the report, table and curves"),
            _io("metrics", "metrics/ablation.json", "metric", "per arm: mean, std, 95% interval; the verdicts"),
        ),
    )


def ablation_stages(arms: list[str], seeds: list[int], custom_arms: Collection[str] = ()) -> list[Stage]:
    """Every (arm, seed) stage and the report, or none without arms; ``custom_arms``: the arms the set
    defines itself (ablation.custom_arms)."""
    if not arms:
        return []
    stages = [arm_stage(arm, seed, arm in custom_arms) for arm in arms for seed in seeds]
    return [*stages, ablation_report_stage(arms, seeds)]


# Written by the Prefect flow when it saves a run as a DVC experiment (flows/experiments.py).
RUN_RECORD = "metrics/run.json"
REPORT_PLOTS = [f"reports/compare/{name}" for name in ("curves.png", "cost.png", "wall_clock.png", "memory.png")]
TRAINING = [s for s in STAGES if s.name in catalog.ALGORITHMS]  # the RL stages, one per algorithm a default run trains
ABLATION_OUT = ablation_report_stage([], []).file("out")
ABLATION_METRICS = ablation_report_stage([], []).file("metrics")
# What every arm starts from: the ablation and the tuning flows run these first (flows/ablation.py, flows/tune.py).
SHARED_STAGES = ["base_model", "prepare", "validate_verifiers", "sft"]


def stage(name: str) -> Stage:
    """The declaration of stage ``name``."""
    return BY_NAME[name]


def launchers(params) -> dict[str, list[str]]:
    """Per stage the set launches on several processes (``launch.stages``), torchrun and its options;
    empty for one process, whose stages run as ``python -m`` exactly as without the section. With
    ``launch.kubernetes.enabled``, the command that submits the stage's Job and waits for it (flows/k8s.py)."""
    launch = params.launch
    if launch.kubernetes.enabled:  # a Job on the cluster runs the rest of the command under torchrun on every node
        return {name: [*K8S_SUBMIT, PARAMS_VAR, "--submit", name, "--"] for name in launch.stages}
    if launch.world_size == 1:
        return {}
    torchrun = launch.torchrun_args(params.experiment.name)
    if launch.local_nodes and launch.nnodes > 1:  # every node's agent on this machine
        torchrun = ["python", "-m", "flows.local_nodes", "--nnodes", str(launch.nnodes), "--", *torchrun]
    return {name: torchrun for name in launch.stages}


def _dvc_stage(s: Stage, launcher: list[str] | None = None, built: Mapping[str, Sequence[str]] | None = None) -> dict:
    deps = s.paths("dep") + s.code(built)
    entry: dict = {"cmd": s.command(launcher), "deps": list(dict.fromkeys(deps))}
    if s.params:
        entry["params"] = [{PARAMS_VAR: list(s.params)}]
    outs: list = []
    for i in s.io:
        for p in i.paths:
            if i.kind == "out":
                outs.append(p)
            # "persist" (training checkpoints) is left out: a resume cache, guarded by its run's fingerprint
            # (grpoflow/rl/run.py), not an output. As an uncached out, DVC could neither restore it nor keep
            # it off `dvc status`: going back to a baseline left it "modified" (#51).
            elif i.kind in ("history", "report"):
                outs.append({p: {"cache": False}})
    if outs:
        entry["outs"] = outs
    metrics = [{p: {"cache": False}} for p in s.paths("metric")]
    if metrics:
        entry["metrics"] = metrics
    return entry


def stage_names(params) -> list[str] | None:
    """The stages a validated set runs: its ``experiment.stages``; else every stage, the opt-in
    reward_model stage only where a reward is the model it trains (None: every stage, none opted in)."""
    if params.experiment.stages is not None:
        return list(params.experiment.stages)
    if any(r.name == RM_REWARD and r.model_path == RM_DEFAULT_PATH for r in params.rewards):
        return [s.name for s in STAGES]
    return None


def select(names: list[str] | None, extra: list[Stage] | None = None) -> list[Stage]:
    """The declared stages a parameter set runs (``experiment.stages``; None: all but the opt-in
    ones), then ``extra`` (the ablation's). A list input fed by a stage left out loses that item
    (evaluate evaluates fewer models); a required input that such a stage would produce is an
    error naming both."""
    if names is None:
        names = [s.name for s in STAGES if not s.opt_in]
    unknown = sorted(set(names) - BY_NAME.keys())
    if unknown:
        raise ValueError(f"experiment.stages: unknown stage(s) {unknown}; declared: {[s.name for s in STAGES]}")
    dropped = {p: s.name for s in STAGES if s.name not in names for p in s.outs}
    chosen = []
    for declared in [*(s for s in STAGES if s.name in names), *(extra or [])]:
        io = []
        for i in declared.io:
            if i.kind == "dep" and isinstance(i.path, str) and i.path in dropped:
                raise ValueError(f"experiment.stages: {declared.name} needs {i.path}, which {dropped[i.path]} makes")
            if i.kind == "dep" and not isinstance(i.path, str):
                i = Io(
                    i.flag, tuple(item for item, path in zip(i.path, i.paths) if path not in dropped), i.kind, i.help
                )
            io.append(i)
        chosen.append(replace(declared, io=tuple(io)))
    return chosen


def with_sources(s: Stage, sources: Sequence[str] | None) -> Stage:
    """``s`` with its data/raw/ dependency replaced by ``sources`` (none left when the set reads no file)."""
    if sources is None or not any(i.path == RAW_DIR for i in s.io):
        return s
    io = [i for i in s.io if i.path != RAW_DIR]
    if sources:
        io.insert(0, Io(None, tuple(sources), "dep", "the set's own data files"))
    return replace(s, io=tuple(io))


def dvc_spec(
    params_file: str = "params/default.yaml",
    stages: list[str] | None = None,
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
    launch: dict[str, list[str]] | None = None,
    custom_arms: Collection[str] = (),
    sources: Sequence[str] | None = None,
    built: Mapping[str, Sequence[str]] | None = None,
) -> dict:
    """dvc.yaml's content for the stages a set runs (and its ablation's arms and seeds), reading
    parameters from ``params_file``; the stages in ``launch`` (:func:`launchers`) run under its launcher;
    prepare depends on ``sources`` (:func:`local_sources`; None: all of data/raw/), and a stage that builds
    verifiers on the code of those in ``built`` (:func:`Stage.code`; None: every built-in one)."""
    chosen = [with_sources(s, sources) for s in select(stages, ablation_stages(arms or [], seeds or [], custom_arms))]
    plots: list = [
        {s.plot["title"]: {"x": "step", "y": {s.paths("history")[0]: s.plot["y"]}}} for s in chosen if s.plot
    ]
    return {
        "vars": [{"params_file": params_file}],
        "stages": {s.name: _dvc_stage(s, (launch or {}).get(s.name), built) for s in chosen},
        "metrics": [RUN_RECORD],
        "plots": plots + (REPORT_PLOTS if "compare" in {s.name for s in chosen} else []),
    }


HEADER = """\
# GENERATED from tasks/stages.py by `python -m tasks.stages --write`: edit the declarations there.
# The pipeline DAG: `dvc repro` runs it; the Prefect flow (flows/pipeline.py) runs each stage
# through `dvc repro --single-item`, so both share DVC's cache, lock and lineage. Each stage's
# code deps are the project files its module imports (the import graph, lazy imports included).
#
# To run another parameter set, change params_file below; the flow does this for the length of
# one run when it is given another set (python -m flows.pipeline --params params/x.yaml).
"""


def render(
    params_file: str = "params/default.yaml",
    stages: list[str] | None = None,
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
    launch: dict[str, list[str]] | None = None,
    custom_arms: Collection[str] = (),
    sources: Sequence[str] | None = None,
    built: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """dvc.yaml as text, for the set in ``params_file`` running ``stages`` (None: all) and the
    ablation ``arms`` x ``seeds`` (none by default), the stages in ``launch`` under its launcher, prepare
    reading ``sources``, the verifiers ``built``."""
    spec = dvc_spec(params_file, stages, arms, seeds, launch, custom_arms, sources, built)
    return HEADER + yaml.safe_dump(spec, sort_keys=False, width=120)


def for_params(params_file: str, params) -> str:
    """dvc.yaml for a validated set: its stages, its ablation's arms and seeds, and its launch."""
    from grpoflow.config.judges import built_verifiers

    a = params.ablation
    arms = (a.arms, a.seeds, launchers(params), list(a.custom_arms))
    return render(params_file, stage_names(params), *arms, local_sources(params), built_verifiers(params))


def stages_for(params) -> list[Stage]:
    """The stages a validated set runs, in declaration order: its ``experiment.stages`` and its
    ablation's arms x seeds."""
    a = params.ablation
    return select(stage_names(params), ablation_stages(a.arms, a.seeds, list(a.custom_arms)))


def params_file_var(path: str | Path = DVC_YAML) -> str | None:
    """The ``params_file`` var that the stages of the dvc.yaml at ``path`` read their parameters from."""
    spec = yaml.safe_load(Path(path).read_text()) or {}
    return next(
        (str(v["params_file"]) for v in spec.get("vars") or [] if isinstance(v, dict) and "params_file" in v), None
    )


def main(argv: list[str] | None = None) -> int:
    """``--write`` regenerates dvc.yaml; ``--check`` reports whether it is current."""
    parser = command_parser("tasks.stages", __doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="regenerate dvc.yaml from the declarations")
    group.add_argument("--check", action="store_true", help="exit 1 if dvc.yaml is not what the declarations give")
    parser.add_argument(
        "--params", default=None, help="the parameter set dvc.yaml reads (default: its params_file var)"
    )
    args = parser.parse_args(argv)
    params_file = args.params or (params_file_var() if Path(DVC_YAML).is_file() else None) or "params/default.yaml"
    from grpoflow.config import ConfigError, load_params
    from grpoflow.guard import InputError, check_params_file

    try:
        text = for_params(check_params_file(params_file), load_params(params_file))  # it lands in every command
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.write:
        Path(DVC_YAML).write_text(text)
        print(f"wrote {DVC_YAML} ({len(STAGES)} stages)")
        return 0
    if yaml.safe_load(Path(DVC_YAML).read_text()) != yaml.safe_load(text):
        print(f"{DVC_YAML} is out of date: run `python -m tasks.stages --write`", file=sys.stderr)
        return 1
    print(f"{DVC_YAML} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
