"""Pipeline stages as CLIs (``python -m tasks.<stage>``): I/O, tracking and wiring, no algorithms.

A stage started under an interpreter without the project's packages (``dvc repro`` from a shell where the
venv is not activated) runs under the checkout's ``.venv`` instead (:mod:`tasks.interpreter`).

Importing this package turns off every tool's telemetry before any of them is imported: nothing
in a run may try to reach the internet. It also turns off the Hugging Face progress bars (one
"Loading weights" bar per model load, in every stage's log), which tell nothing here.
"""

import os

from tasks.interpreter import ensure_project_env

ensure_project_env()

for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}.items():
    os.environ.setdefault(_key, _value)
