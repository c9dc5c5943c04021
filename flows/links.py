"""The addresses a run links to: its MLflow run in the UI that serves it (a tracking server's own, or the project's
store as ``make ui`` serves it, on ``UI_PORT``), and its Prefect flow run."""

from __future__ import annotations

import os

from flows import serve
from flows.summary import smoke_kept_in
from tasks import tracking


def _mlflow_ui() -> tuple[str, str]:
    """The MLflow UI's address, and how to reach it: a tracking server serves its own; the local
    SQLite store is served by `make ui`. Shown in Prefect: without the URI's credentials."""
    uri = tracking.shown_tracking_uri()
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/"), f"the MLflow tracking server at {uri}"
    base = f"http://127.0.0.1:{os.environ.get('UI_PORT', '5000')}"
    return base, "the MLflow UI, once `make ui` serves this project's store (mlflow.db) there"


# MLflow 3's UI opens on its GenAI view unless a link asks for the model-training one.
MLFLOW_VIEW = "workflowType=machine_learning"


def _mlflow_link(experiment_id: str, run_id: str) -> str:
    """The run in the MLflow UI, in its model-training view."""
    return f"{_mlflow_ui()[0]}/#/experiments/{experiment_id}/runs/{run_id}?{MLFLOW_VIEW}"


def _prefect_link(flow_run_id: str) -> str:
    """The flow run in Prefect's UI; empty on the temporary server, which serves no UI."""
    from prefect.settings import PREFECT_UI_URL

    base = PREFECT_UI_URL.value()
    return f"{base.rstrip('/')}/runs/flow-run/{flow_run_id}" if base and not serve.on_temporary_server() else ""


def run_links(experiment_id: str, parent_id: str, flow_run_id: str) -> dict[str, str]:
    """The run page's way back, by name: the MLflow parent run and the Prefect flow run (none
    without a flow run id). None for a smoke run: its MLflow store and Prefect server go with its
    scratch copy, and the page it keeps would link to nothing."""
    if smoke_kept_in():
        return {}
    prefect = _prefect_link(flow_run_id) if flow_run_id else ""
    return {"MLflow parent run": _mlflow_link(experiment_id, parent_id), "Prefect flow run": prefect}
