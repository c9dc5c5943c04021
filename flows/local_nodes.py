"""Every node of a multi-node torchrun launch on this one machine (``launch.local_nodes``): the same
torchrun command started once per node, as a cluster's scheduler starts it once on each node.

    python -m flows.local_nodes --nnodes 2 -- torchrun --nproc_per_node 1 --nnodes 2 ... -m tasks.grpo ...

It rehearses the multi-node path on a CPU: two agents meet in c10d's rendezvous and each runs its
node's workers, exactly as two hosts would. An endpoint on port 0 gets one free port of this host
for all agents; the first agent hosts c10d's store (``is_host``), the others join it. Node 0's
output passes through untouched (the flow reads the stage's progress there); every other node's
lines are prefixed ``[node i]``. When an agent fails the others are stopped, and its exit code is
this command's; a signal to this command stops them all.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from flows.node_lines import node_prefix
from flows.process_tree import stop_tree
from grpoflow.ports import free_port

GRACE_S = 10.0  # for the other agents to stop after one failed, before firmer signals
POLL_S = 0.2
# Seconds a joining agent waits for the first one's store: torch's 60 s default is short while a
# loaded 2-core machine imports torch in every agent at once.
READ_TIMEOUT_S = 300


def with_endpoint(words: Sequence[str], port: int) -> list[str]:
    """``words`` with a ``--rdzv_endpoint host:0`` given ``port``: every agent must name the same one."""
    out = list(words)
    for i, word in enumerate(out[:-1]):
        if word in ("--rdzv_endpoint", "--rdzv-endpoint") and out[i + 1].endswith(":0"):
            out[i + 1] = f"{out[i + 1][:-2]}:{port}"
    return out


def agent_command(words: Sequence[str], node: int) -> list[str]:
    """Node ``node``'s torchrun command: the first agent hosts the rendezvous store, the others only
    join it (both would try to host on one machine, and which won would be a race)."""
    if not words or not words[0].endswith("torchrun"):
        raise SystemExit(f"flows.local_nodes: expected a torchrun command after --, got {' '.join(words[:1])!r}")
    host = f"is_host={int(node == 0)},read_timeout={READ_TIMEOUT_S}"
    out = list(words)
    for i, word in enumerate(out[:-1]):
        if word in ("--rdzv_conf", "--rdzv-conf"):
            out[i + 1] = f"{out[i + 1]},{host}"
            return out
    return [out[0], "--rdzv_conf", host, *out[1:]]


def _write_line(line: str) -> None:
    """``line`` (with its newline) in one write: node 0's agent shares this stdout, and print's two
    writes (under a write-through stream such as pytest's capture) let the agent's line fall between."""
    sys.stdout.write(line)
    sys.stdout.flush()


def _relay(proc: subprocess.Popen, node: int) -> None:
    prefix = node_prefix(node)
    for line in proc.stdout:  # type: ignore[union-attr]
        _write_line(prefix + line)


def say(text: str) -> None:
    _write_line(f"local_nodes: {text}\n")


def start_agents(words: Sequence[str], nnodes: int) -> list[subprocess.Popen]:
    """One torchrun agent per node, node 0 first; node 0 writes to this process's stdout and stderr."""
    port = free_port()
    agents: list[subprocess.Popen] = []
    for node in range(nnodes):
        command = agent_command(with_endpoint(words, port), node)
        if node == 0:
            agents.append(subprocess.Popen(command))
        else:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            threading.Thread(target=_relay, args=(proc, node), name=f"node-{node}", daemon=True).start()
            agents.append(proc)
        say(f"node {node} of {nnodes}: agent started (pid {agents[-1].pid})")
    return agents


def wait_all(agents: list[subprocess.Popen], grace_s: float = GRACE_S) -> int:
    """0 once every agent ended well; the first failure's exit code otherwise, the others stopped."""
    while True:
        codes = [agent.poll() for agent in agents]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            say(f"an agent failed (exit {failed[0]}): stopping the others")
            for agent in agents:
                if agent.poll() is None:
                    stop_tree(agent, grace_s)
            return failed[0]
        if all(code == 0 for code in codes):
            say(f"all {len(agents)} agents ended well")
            return 0
        time.sleep(POLL_S)


def run(words: Sequence[str], nnodes: int) -> int:
    """Run ``words`` (a torchrun command) as ``nnodes`` agents on this machine until they end."""

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)  # DVC and the flow stop a stage with SIGTERM after SIGINT
    agents = start_agents(words, nnodes)
    try:
        return wait_all(agents)
    except KeyboardInterrupt:
        for agent in agents:
            stop_tree(agent, GRACE_S)
        return 130


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.local_nodes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nnodes", type=int, required=True, help="agents to start, one per node")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the torchrun command every node runs")
    args = parser.parse_args(argv)
    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.nnodes < 1:
        parser.error("--nnodes must be at least 1")
    return run(words, args.nnodes)


if __name__ == "__main__":
    sys.exit(main())
