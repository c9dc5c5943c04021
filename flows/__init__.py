"""Prefect flows: the scheduled, observable front end of the pipeline."""

import tasks  # noqa: F401  (turns telemetry off before prefect is imported)
