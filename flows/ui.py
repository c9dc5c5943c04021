"""The MLflow UI of this checkout (``make ui``), stopped by one Ctrl-C:

    python -m flows.ui [--port 5000]

``mlflow ui`` alone needed a second Ctrl-C when the first came while its uvicorn workers were
starting: the terminal's SIGINT killed a worker mid-import and uvicorn's supervisor started it
again. Here the UI runs one uvicorn worker (plenty for one user) without MLflow's GenAI job runner
and its huey consumers (the pipeline submits no such job), in a session of its own, so that the
terminal's Ctrl-C reaches only this process, which passes one SIGINT on (``mlflow ui`` forwards it
to its server: a clean shutdown, no traceback). A second Ctrl-C, or a server still up after
:data:`GRACE_S`, kills the whole process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

GRACE_S = 20.0


def ui_command(port: int, store: Path) -> list[str]:
    """The ``mlflow ui`` command line: one worker, the checkout's SQLite store, local only."""
    mlflow = Path(sys.executable).with_name("mlflow")
    return [str(mlflow), "ui", "--workers", "1", "--backend-store-uri", f"sqlite:///{store}"] + [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def _stop(proc: subprocess.Popen) -> int:
    """One SIGINT to ``mlflow ui``; the process group killed if it is not gone within the grace."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


# MLflow 3's UI opens on its GenAI home; these links open the model-training view instead.
TRAINING_VIEW = "workflowType=machine_learning"


def landing_links(store: Path, experiment: str, base: str) -> list[str]:
    """The training view of the set's experiment and of its latest pipeline (parent) run, as lines
    to print; a hint instead where the store has no such experiment yet."""
    if not store.is_file():
        return [f"No runs yet ({store} does not exist): `make demo` or `make smoke` makes some."]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return [f"No experiment {experiment!r} in {store} yet; the UI lists the others."]
    eid = found.experiment_id
    lines = [f"{experiment}: {base}/#/experiments/{eid}?{TRAINING_VIEW}"]
    parents = client.search_runs(
        [eid], "tags.`grpoflow.stage` = 'pipeline'", max_results=1, order_by=["start_time DESC"]
    )
    if parents:
        lines.append(f"latest pipeline run: {base}/#/experiments/{eid}/runs/{parents[0].info.run_id}?{TRAINING_VIEW}")
    return lines


def _experiment_name(params_file: str | None) -> str | None:
    """The experiment of ``params_file``; without one, of the set that ran last here (flows/summary.py)."""
    from flows.summary import last_run

    params_file = params_file or (last_run() or {}).get("params_file")
    if not params_file or not Path(params_file).is_file():
        return None
    from grpoflow.config import load_params

    return load_params(params_file).mlflow_experiment


def main(argv: list[str] | None = None) -> int:
    """Run the UI until Ctrl-C; its exit status."""
    from tasks.cli import command_parser

    parser = command_parser("flows.ui", __doc__)
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--store", type=Path, default=Path("mlflow.db"), help="the SQLite tracking store")
    parser.add_argument(
        "--params",
        default=None,
        help="the parameter set whose experiment to link (default: the set that ran last here; make ui: PARAMS=)",
    )
    args = parser.parse_args(argv)
    name = _experiment_name(args.params)
    if name:
        for line in landing_links(args.store.resolve(), name, f"http://127.0.0.1:{args.port}"):
            print(line, flush=True)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(ui_command(args.port, args.store.resolve()), env=env, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        print("MLflow UI stopped.", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
