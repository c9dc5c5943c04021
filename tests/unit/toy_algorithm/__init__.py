"""A fourth algorithm with settings of its own, added as a user adds one: this folder, and
``GRPOFLOW_ALGORITHMS=tests.unit.toy_algorithm`` (tests/unit/test_algorithm_folder.py). Nothing outside
it names it: its params section, its tune space, its smoke size, its arm and its rules come from here.

REINFORCE with a KL penalty (:mod:`.update`): opt-in (a default run does not train it), and its
stage needs no accelerator."""

from grpoflow.algorithms.entry import Entry

ENTRY = Entry(
    name="reinforce_kl",
    title="REINFORCE-KL",
    module="tests.unit.toy_algorithm.update",
    config="tests.unit.toy_algorithm.config",
    kl_key="reinforce_kl.kl_coef",
    curves=("reward_mean", "kl"),
    smoke={"reinforce_kl.baseline": "none", "tune.reinforce_kl.kl_coef.high": 0.01},
    gpu_limited=False,
    opt_in=True,
)
