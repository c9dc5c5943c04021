"""Scheduled runs whose time passed while nothing served them: cancelled when ``make serve`` starts
again, not run all at once, days late.

Prefect's scheduler books a cron deployment's next runs ahead of time. When ``make serve`` stops,
those stay in the server's database; a run whose time passes goes Late and stays Scheduled, and
the next worker on the pool would start every one of them together (the nightly pipeline, three
times over, queued behind the ``gpu`` limit). cron skips a run whose time passed while it was
down, and so does this: each such run ends Cancelled with a message saying why, so the run history
keeps it. Only runs the scheduler made are touched: a run a user triggered waits for its worker.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from uuid import UUID

# A run due less than this long ago still runs: a restart at 02:03 keeps 02:00's nightly run.
GRACE_S = 300.0


@dataclass(frozen=True)
class Missed:
    """The runs of one deployment that were cancelled, and when the last of them was due."""

    deployment: str
    runs: int
    last_due: dt.datetime

    def line(self) -> str:
        """What the console says of them."""
        plural = "s" if self.runs > 1 else ""
        return (
            f"{self.runs} scheduled run{plural} of {self.deployment} missed while nothing served them "
            f"(the last due {self.last_due:%Y-%m-%d %H:%M} UTC): cancelled, not run late; "
            f"`prefect deployment run {self.deployment}` starts one now"
        )


def cancel_missed(
    api_url: str, deployments: list[str], grace_s: float = GRACE_S, now: dt.datetime | None = None
) -> list[Missed]:
    """Cancel the scheduler-made runs of ``deployments`` (``flow/deployment``) at ``api_url`` still
    waiting more than ``grace_s`` after their time; what was cancelled, by deployment. Other
    deployments on the server are not this checkout's to judge."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelled

    cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(seconds=grace_s)
    due: dict[UUID, list[dt.datetime]] = defaultdict(list)
    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        ids = {client.read_deployment_by_name(name).id: name for name in deployments}
        for run in _waiting_before(client, list(ids), cutoff):
            message = f"missed: due {run.expected_start_time:%Y-%m-%d %H:%M} UTC while no worker served it"
            client.set_flow_run_state(run.id, Cancelled(message=message), force=True)
            due[run.deployment_id].append(run.expected_start_time)
    return [Missed(ids[deployment], len(times), max(times)) for deployment, times in due.items()]


def _waiting_before(client, deployment_ids: list[UUID], cutoff: dt.datetime) -> list:
    """The flow runs still Scheduled (Late included) that the scheduler made for ``deployment_ids``,
    due before ``cutoff``."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    waiting = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
        expected_start_time=FlowRunFilterExpectedStartTime(before_=cutoff),
        deployment_id=FlowRunFilterDeploymentId(any_=deployment_ids),
    )
    runs, offset = [], 0
    while page := client.read_flow_runs(flow_run_filter=waiting, offset=offset, limit=200):
        runs += [run for run in page if run.auto_scheduled]
        offset += len(page)
    return runs
