"""grpoflow core library: GRPO math, data, models. Knows nothing of Prefect, MLflow or DVC."""

__version__ = "0.1.0"
