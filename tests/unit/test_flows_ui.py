"""``make ui``: one SIGINT to the UI's own process group, and a kill for one that ignores it."""

import signal
import subprocess
import sys
from pathlib import Path

import flows.ui as ui

CHILD = """import signal, sys, time
signal.signal(signal.SIGINT, {handler})
print("ready", flush=True)
time.sleep(600)
"""


def _child(handler: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(handler=handler)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # its handler is in place
    return proc


def test_the_ui_runs_one_local_worker_on_the_checkouts_store():
    command = ui.ui_command(5001, Path("/repo/mlflow.db"))
    assert command[1:] == [
        "ui",
        "--workers",
        "1",
        "--backend-store-uri",
        "sqlite:////repo/mlflow.db",
        "--host",
        "127.0.0.1",
        "--port",
        "5001",
    ]
    assert Path(command[0]).name == "mlflow"


def test_one_sigint_stops_a_server_that_honours_it():
    proc = _child("lambda *_: sys.exit(0)")
    assert ui._stop(proc) == 0


def test_a_server_that_ignores_sigint_is_killed_after_the_grace(monkeypatch):
    monkeypatch.setattr(ui, "GRACE_S", 0.2)
    proc = _child("signal.SIG_IGN")
    assert ui._stop(proc) == -signal.SIGKILL


def test_the_ui_prints_the_training_view_of_the_sets_experiment_and_its_latest_pipeline_run(tmp_path):
    import mlflow

    store = tmp_path / "mlflow.db"
    assert "No runs yet" in ui.landing_links(store, "grpoflow-default", "http://127.0.0.1:5000")[0]
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    try:
        experiment = mlflow.set_experiment("grpoflow-default")
        for _ in range(2):
            with mlflow.start_run(tags={"grpoflow.stage": "pipeline"}) as parent:
                pass
        with mlflow.start_run(tags={"grpoflow.stage": "sft"}):  # a stage's run is not the one linked
            pass
    finally:
        mlflow.set_tracking_uri(before)
    lines = ui.landing_links(store, "grpoflow-default", "http://127.0.0.1:5000")
    eid = experiment.experiment_id
    assert lines == [
        f"grpoflow-default: http://127.0.0.1:5000/#/experiments/{eid}?workflowType=machine_learning",
        f"latest pipeline run: http://127.0.0.1:5000/#/experiments/{eid}/runs/{parent.info.run_id}"
        "?workflowType=machine_learning",
    ]
    assert "No experiment 'grpoflow-other'" in ui.landing_links(store, "grpoflow-other", "http://x")[0]
