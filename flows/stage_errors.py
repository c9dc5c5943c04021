"""How a stage run fails, as the flows tell failures apart: :class:`StageVerdict` is one a retry
would repeat (Prefect does not retry it), any other :class:`StageFailed` may pass on a retry.

They live apart from :mod:`flows.stage_run`, which raises them, so that :mod:`flows.lineage` can
add one of its own while the stage run imports lineage."""

from __future__ import annotations


class StageFailed(RuntimeError):
    pass


class StageVerdict(StageFailed):
    """A failure a retry would repeat: bad input, a gate's verdict, a diagnosed stop."""


class StageInterrupted(StageVerdict):
    """The stage command was interrupted (SIGINT, exit 130): the run stops, it is not retried. A SIGINT to the
    process group without a terminal reaches the stage, which stops on it, whether or not the flow heard it."""
