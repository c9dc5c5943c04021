"""flows.local_nodes: one torchrun command started once per node on this machine. The commands it
builds, by hand; and its handling of agents, with a stand-in ``torchrun`` (a Python script that
prints its arguments, then exits or waits as told), since the real agents run in the e2e test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flows import local_nodes
from grpoflow.config import validate_params
from tasks.stages import launchers

TORCHRUN = ["torchrun", "--nproc_per_node", "1", "--nnodes", "2", "--rdzv_endpoint", "127.0.0.1:0", "-m", "tasks.grpo"]


def test_every_agent_meets_at_one_port_and_only_the_first_hosts_the_store():
    words = local_nodes.with_endpoint(TORCHRUN, 41234)
    assert words[words.index("--rdzv_endpoint") + 1] == "127.0.0.1:41234"
    assert local_nodes.with_endpoint(["torchrun", "--rdzv_endpoint", "h:29500"], 1) == [
        "torchrun",
        "--rdzv_endpoint",
        "h:29500",
    ]  # a port the set names is kept
    first, second = (local_nodes.agent_command(words, node) for node in (0, 1))
    timeout = f"read_timeout={local_nodes.READ_TIMEOUT_S}"
    assert first[:3] == ["torchrun", "--rdzv_conf", f"is_host=1,{timeout}"] and first[3:] == words[1:]
    assert second[:3] == ["torchrun", "--rdzv_conf", f"is_host=0,{timeout}"]
    merged = local_nodes.agent_command(["torchrun", "--rdzv_conf", "join_timeout=900", "-m", "x"], 1)
    assert merged == ["torchrun", "--rdzv_conf", f"join_timeout=900,is_host=0,{timeout}", "-m", "x"]
    with pytest.raises(SystemExit, match="expected a torchrun command"):
        local_nodes.agent_command(["python", "-m", "x"], 0)


def test_a_launch_of_local_nodes_wraps_the_training_stages_torchrun():
    params = validate_params({"launch": {"nnodes": 2, "local_nodes": True}})
    grpo = launchers(params)["grpo"]
    assert grpo[:6] == ["python", "-m", "flows.local_nodes", "--nnodes", "2", "--"]
    assert grpo[6:] == params.launch.torchrun_args(params.experiment.name)
    one_node = validate_params({"launch": {"nproc_per_node": 2, "local_nodes": True}})
    assert launchers(one_node)["grpo"][0] == "torchrun"  # one agent: nothing to start beside it


def _fake_torchrun(tmp_path: Path) -> Path:
    """A ``torchrun`` that prints its node's words, then exits with $FAKE_CODE_<is_host> after
    $FAKE_WAIT_<is_host> seconds, and records that it ran to the end in a file."""
    script = tmp_path / "torchrun"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "conf = sys.argv[sys.argv.index('--rdzv_conf') + 1]\n"
        "host = conf.split('is_host=')[1][0]\n"
        "print('agent', host, ' '.join(sys.argv[1:]), flush=True)\n"
        "time.sleep(float(os.environ.get('FAKE_WAIT_' + host, '0')))\n"
        f"open(os.path.join({str(tmp_path)!r}, 'ended-' + host), 'w').close()\n"
        "sys.exit(int(os.environ.get('FAKE_CODE_' + host, '0')))\n"
    )
    script.chmod(0o755)
    return script


def test_agents_that_end_well_end_the_command_well_and_the_second_speaks_prefixed(tmp_path, capfd):
    script = _fake_torchrun(tmp_path)
    assert local_nodes.main(["--nnodes", "2", "--", str(script), "--rdzv_endpoint", "127.0.0.1:0", "-m", "x"]) == 0
    out = capfd.readouterr().out.splitlines()
    first = next(line for line in out if line.startswith("agent 1 "))  # node 0 hosts: is_host=1, no prefix
    second = next(line for line in out if line.startswith("[node 1] agent 0 "))
    port = first.split("127.0.0.1:")[1].split()[0]
    assert port != "0" and f"127.0.0.1:{port} " in second  # one port, picked for both
    assert {p.name for p in tmp_path.glob("ended-*")} == {"ended-0", "ended-1"}


def test_a_failed_agent_stops_the_others_and_its_code_is_the_commands(tmp_path, monkeypatch):
    script = _fake_torchrun(tmp_path)
    monkeypatch.setenv("FAKE_WAIT_1", "600")  # node 0 would wait ten minutes
    monkeypatch.setenv("FAKE_CODE_0", "3")  # node 1 fails at once
    assert local_nodes.main(["--nnodes", "2", "--", str(script), "-m", "x"]) == 3
    assert (tmp_path / "ended-0").exists()  # node 1 (is_host=0) ran to its failure
    assert not (tmp_path / "ended-1").exists()  # node 0 was stopped, not left to finish its ten minutes


def test_each_line_of_its_own_is_one_write(monkeypatch):
    # Node 0's agent writes to this process's stdout: under a write-through stream (pytest's capture),
    # a line written in two calls (print: the text, then the newline) let the agent's line in between.
    class Writes(list):
        def write(self, text: str) -> int:
            self.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    writes = Writes()
    monkeypatch.setattr(sys, "stdout", writes)
    local_nodes.say("node 1 of 2: agent started (pid 7)")
    assert writes == ["local_nodes: node 1 of 2: agent started (pid 7)\n"]
