"""How the flow shows a stage that runs on several nodes: node 0's output as it is (the flow reads
the stage's events and progress there), every other node's lines behind ``[node i]``. Both the
local agents (flows/local_nodes.py) and a cluster Job's pods (flows/k8s_watch.py) are shown so,
and the console's noise filter (flows/stage_run.py) looks past the prefix."""

from __future__ import annotations

import re

OTHER_NODE = re.compile(r"^\[node \d+\] ")


def node_prefix(node: int | str) -> str:
    """What goes before each line of node ``node``'s output (a pod's index may be "?" before the Job
    controller annotates it: shown as it is)."""
    return "" if str(node) == "0" else f"[node {node}] "
