"""``make bench``'s runner (benchmarks/__main__.py): what it records beside the benchmarks."""

from __future__ import annotations

import json

import torch

from benchmarks.__main__ import main, write_results


def test_the_results_name_the_machine_and_whether_its_bf16_is_native(tmp_path):
    """2026-12-07: one session's CPU had AMX, the next's AVX2 only; bf16 seconds moved 14x between them."""
    out = tmp_path / "bench.json"
    write_results(out, {"loss": {"ratio": 0.5}})
    machine = json.loads(out.read_text())["loss"]["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["native_bf16"] in (True, False, None) and machine["cpu"] and machine["torch"] == torch.__version__


def test_a_later_run_keeps_the_other_benchmarks_with_the_machine_they_ran_on(tmp_path):
    """A run of some benchmarks once relabelled every earlier result with its own machine."""
    out = tmp_path / "bench.json"
    elsewhere = {"cpu": "another CPU", "native_bf16": True}
    earlier = {"loss": {"ratio": 0.5, "machine": elsewhere}, "bf16": {"ratio": 2.0}}
    out.write_text(json.dumps({**earlier, "machine": elsewhere}))  # the old shape: one record for all
    write_results(out, {"bf16": {"ratio": 1.5}})
    written = json.loads(out.read_text())
    assert written["loss"] == earlier["loss"]  # kept, with its own machine
    assert written["bf16"]["ratio"] == 1.5 and written["bf16"]["machine"]["cpu"] != "another CPU"
    assert "machine" not in written  # the old file's record was the last run's, not the others'


def test_a_run_of_no_benchmark_changes_no_result(tmp_path):
    out = tmp_path / "bench.json"
    out.write_text(json.dumps({"loss": {"ratio": 0.5}}))
    assert main(["no-such-benchmark", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == {"loss": {"ratio": 0.5}}
