"""The screenshots in docs/images, taken from a finished run as a user sees it: the MLflow parent
run, the GRPO run's charts, the run's page in MLflow's artifact viewer, and that page itself.

    python -m tests.e2e.screenshots [PROJECT]     # PROJECT: a checkout after `make demo` (default: .)
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from flows.pipeline import MLFLOW_VIEW
from grpoflow.ports import free_port
from tests.e2e.browser import mlflow_ui, screenshot

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def main(project: Path) -> None:
    store = project / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    (parent,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        "tags.`grpoflow.stage` = 'pipeline'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    eid, pid = parent.info.experiment_id, parent.info.run_id
    (grpo,) = client.search_runs([eid], f"tags.`mlflow.parentRunId` = '{pid}' and tags.`grpoflow.stage` = 'grpo'")
    with mlflow_ui(store, free_port()) as ui:  # as `make ui` serves it
        base = f"{ui}/#/experiments/{eid}/runs"
        view = f"?{MLFLOW_VIEW}"
        # A fresh server answers its first chart requests late (it registers its jobs first): a first look warms it,
        # and the charts of a real-model run load in about two minutes of page time (60 s left them spinning).
        screenshot(f"{base}/{grpo.info.run_id}/model-metrics{view}", IMAGES / "warm-up.png").unlink()
        print(screenshot(f"{base}/{pid}{view}", IMAGES / "mlflow-parent-run.png", height=1400))
        print(
            screenshot(
                f"{base}/{grpo.info.run_id}/model-metrics{view}",
                IMAGES / "mlflow-grpo-run.png",
                height=1400,
                wait_ms=120000,
            )
        )
        print(screenshot(f"{base}/{pid}/artifacts/run.html{view}", IMAGES / "mlflow-run-html.png", height=1400))
    print(
        screenshot(
            (project / "reports" / "run.html").resolve().as_uri(), IMAGES / "run-report.png", height=1800, wait_ms=3000
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
