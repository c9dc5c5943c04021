"""Tuning each ablation arm's own settings on an equal budget (flows/tune.py drives Optuna): the
search space as trials sample it and the set a trial trains (:mod:`.space`), the step budget
(:mod:`.budget`), the tuned overlay the seeded comparison reads (:mod:`.overlay`) and the report
(:mod:`.report`). Nothing here reads the test split, and nothing imports Prefect, MLflow or DVC."""
