"""The commands the README and docs/operations.md show work as written.

Every command of their ``bash`` blocks (and the ``make``/``python -m`` commands quoted inline) is
checked without training anything: a Python module answers ``--help`` and accepts each option the
docs give it, a ``make`` target expands (``make -n``), a DVC subcommand exists; the quick ones
(``make experiments``, ``make metrics``, the configuration table) run for real. Commands that need
a server, change git or run tests are named in :data:`NOT_RUN`. The smoke run itself is ``slow``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "docs" / "operations.md"]
STAMP = ".venv/.grpoflow-installed"  # `make -o` it: the set-up is not what these tests check
RUN_FOR_REAL = {"make experiments", "make metrics", ".venv/bin/python -m grpoflow.config.docs"}
NOT_RUN = {
    "export": "sets a variable for the commands after it",
    "git": "commits to the checkout",
    ".venv/bin/prefect": "needs the Prefect server of `make serve` (tests/e2e/test_operations.py runs them)",
    "pytest": "the test suite itself",
    "docker": "needs a Docker daemon and a registry (tests/unit/test_deploy_image.py lints the Dockerfile)",
    "kubectl": "needs a Kubernetes cluster",
    "hf": "downloads from the model hub, which this machine cannot reach",
    **dict.fromkeys(("cat", "head", "tail", "echo", "ls", "mkdir", "cp"), "a shell utility: nothing of the project's"),
}
# Parameter sets a section asks the reader to write first (their commands are still checked otherwise).
WRITTEN_BY_THE_READER = {"params/mine.yaml": "README, 'Bring your own data': the set naming the reader's file"}
NOT_RUN_MODULES = {"tests.e2e.screenshots": "retakes the docs' screenshots from a finished run, in a browser"}


def _blocks(text: str) -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = re.split(r"\s+#", " " + line)[0].strip()
            lines += [command] if command else []
    return lines


def documented_commands() -> list[str]:
    """Every command of the docs' bash blocks, and the make/python commands quoted inline
    (those with a placeholder, ``...`` or ``<...>``, left out)."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        inline = [" ".join(c.split()) for c in re.findall(r"`((?:make|(?:\.venv/bin/)?python) [^`]+)`", text)]
        found += _blocks(text) + [c for c in inline if "..." not in c and "<" not in c]
    return list(dict.fromkeys(found))


def _python_module(argv: list[str]) -> str | None:
    if len(argv) > 2 and argv[0] in ("python", ".venv/bin/python") and argv[1] == "-m":
        return argv[2]
    return None


@cache
def _run(command: tuple[str, ...]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(list(command), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def check(command: str) -> tuple[str, ...] | None:
    """The command that checks ``command`` (None: not run, see :data:`NOT_RUN`)."""
    argv = shlex.split(command)
    if argv[0] in NOT_RUN or _python_module(argv) in NOT_RUN_MODULES:
        return None
    if command in RUN_FOR_REAL:  # make -s: the very command (and output) the table tests below read
        return (argv[0], "-s", "-o", STAMP, *argv[1:]) if argv[0] == "make" else (sys.executable, *argv[1:])
    if argv[0] == "make":
        return ("make", "-n", "-o", STAMP, *argv[1:])
    if argv[0] == ".venv/bin/dvc":
        return (sys.executable, "-m", "dvc", argv[1], "--help")
    module = _python_module(argv)
    assert module, f"a documented command this test does not know how to check: {command}"
    return (sys.executable, "-m", module, "--help")


def test_the_docs_show_the_commands_this_test_knows():
    commands = documented_commands()
    assert {"make smoke", "make experiments", "make metrics", "make ui"} <= set(commands)
    assert any(c.startswith(".venv/bin/python -m flows.pipeline --params") for c in commands)
    for command in commands:
        check(command)  # raises for a command of a kind it cannot check


def test_every_documented_command_works():
    commands = [c for c in documented_commands() if check(c) is not None]
    checks = sorted({check(c) for c in commands}, key=str)
    with ThreadPoolExecutor(max_workers=3) as pool:  # most of the time is imports: overlap them
        results = dict(zip(checks, pool.map(_run, checks)))
    for command in commands:
        out = results[check(command)]
        assert out.returncode == 0, f"{command}: exit {out.returncode}\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
        if _python_module(shlex.split(command)) and check(command)[-1] == "--help":  # type: ignore[index]
            for option in re.findall(r"(?<!\S)(--[\w-]+)", command):
                assert option in out.stdout, f"{command}: {option} is not an option of its CLI"
        for params in re.findall(r"--params (\S+)", command) + re.findall(r"PARAMS=(\S+)", command):
            assert params in WRITTEN_BY_THE_READER or (REPO / params).is_file(), f"{command}: no parameter set {params}"


def test_make_metrics_and_make_experiments_print_their_tables():
    metrics = _run(("make", "-s", "-o", STAMP, "metrics")).stdout
    assert "test pass@1" in metrics or metrics.startswith("no metrics yet"), metrics
    shown = _run(("make", "-s", "-o", STAMP, "experiments")).stdout
    assert shown.startswith(("experiment ", "no DVC experiments yet")), shown


@pytest.mark.slow
def test_the_smoke_run_succeeds_in_a_fresh_clone(tmp_path):
    """``make smoke`` as the README shows it, in a clone of the committed checkout."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    (clone / ".venv").symlink_to((REPO / ".venv").resolve())
    out = subprocess.run(["make", "-o", STAMP, "smoke"], cwd=clone, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    shown = subprocess.run(["make", "-s", "-o", STAMP, "metrics"], cwd=clone, capture_output=True, text=True)
    assert "test pass@1" in shown.stdout and "grpo" in shown.stdout, shown.stdout
