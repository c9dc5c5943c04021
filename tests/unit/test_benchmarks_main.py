"""``make bench``'s runner (benchmarks/__main__.py): what it records beside the benchmarks."""

from __future__ import annotations

import json

import torch

from benchmarks.__main__ import main


def test_the_results_name_the_machine_and_whether_its_bf16_is_native(tmp_path):
    """2026-12-07: one session's CPU had AMX, the next's AVX2 only; bf16 seconds moved 14x between them."""
    out = tmp_path / "bench.json"
    out.write_text(json.dumps({"earlier": {"ratio": 0.5}}))
    assert main(["no-such-benchmark", "--out", str(out)]) == 0  # runs none: the record alone
    written = json.loads(out.read_text())
    assert written["earlier"] == {"ratio": 0.5}  # an earlier benchmark's results are kept
    machine = written["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["native_bf16"] in (True, False, None) and machine["cpu"] and machine["torch"] == torch.__version__
