"""Scheduled runs missed while nothing served them, against a real (temporary) Prefect server: the
scheduler's runs due before the grace are cancelled with a reason; a user's run, a run due within
the grace and the runs still to come are left as they were."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest

from flows import serve
from flows.missed_runs import Missed, cancel_missed

UTC = dt.UTC


@pytest.fixture
def api_url(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))  # a database of its own
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with serve.temporary_server() as url:
        yield url


def _booked(api_url: str, now: dt.datetime) -> tuple[str, str]:
    """A deployment every 7 minutes, its runs booked by the scheduler from an hour ago to 20 minutes
    ahead (Prefect's backfill endpoint, as its scheduler service books them), and a run a user
    triggered for two hours ago; the deployment's and the user's run's ids."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import IntervalSchedule
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Scheduled

    # Runs due 53.5 ... 11.5 min ago (past the grace), 4.5 min ago (within it), 2.5 and 9.5 min ahead.
    schedule = IntervalSchedule(interval=dt.timedelta(minutes=7), anchor_date=now - dt.timedelta(minutes=60.5))
    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("grpoflow-pipeline")
        deployment = client.create_deployment(
            flow_id, "scheduled", schedules=[DeploymentScheduleCreate(schedule=schedule, active=True)]
        )
        client.create_deployment(flow_id, "other", schedules=[DeploymentScheduleCreate(schedule=schedule)])
        window = {"start_time": (now - dt.timedelta(minutes=60)).isoformat(), "min_time": 80 * 60, "max_runs": 100}
        request = urllib.request.Request(
            f"{api_url}/deployments/{deployment}/schedule",
            data=json.dumps(window).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).close()
        mine = client.create_flow_run_from_deployment(
            deployment, state=Scheduled(scheduled_time=now - dt.timedelta(hours=2))
        )
    return str(deployment), str(mine.id)


def _states(api_url: str, now: dt.datetime) -> dict[str, tuple[float, str, bool, str]]:
    """Each run: minutes from ``now`` (the test's clock, however slow the machine) to its time, its
    state, whether the scheduler made it, its message."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        return {
            str(r.id): (
                (r.expected_start_time - now).total_seconds() / 60,
                r.state.type.value,
                r.auto_scheduled,
                r.state.message or "",
            )
            for r in client.read_flow_runs(limit=200)
        }


def test_only_the_schedulers_runs_past_the_grace_are_cancelled_each_with_its_reason(api_url):
    now = dt.datetime.now(UTC)
    _, mine = _booked(api_url, now)
    before = _states(api_url, now)
    auto = {i: s for i, s in before.items() if s[2]}
    assert len(auto) >= 10 and {s[1] for s in before.values()} == {"SCHEDULED"}, before

    assert cancel_missed(api_url, ["grpoflow-pipeline/other"], grace_s=300, now=now) == []  # not named
    assert _states(api_url, now).keys() == before.keys() and {s[1] for s in _states(api_url, now).values()} == {
        "SCHEDULED"
    }
    (missed,) = cancel_missed(api_url, ["grpoflow-pipeline/scheduled"], grace_s=300, now=now)

    after = _states(api_url, now)
    overdue = {i for i, (minutes, *_) in auto.items() if minutes < -5}
    assert len(overdue) == 7  # due 53.5, 46.5, ... 11.5 minutes ago
    assert {i for i, s in after.items() if s[1] == "CANCELLED"} == overdue
    assert all(after[i][3].startswith("missed: due ") for i in overdue)
    assert after[mine][1] == "SCHEDULED"  # a user's run waits for its worker, however late
    assert sum(1 for i, s in auto.items() if s[0] > -5 and after[i][1] == "SCHEDULED") == len(auto) - 7
    assert missed.deployment == "grpoflow-pipeline/scheduled" and missed.runs == 7
    assert abs((missed.last_due - now).total_seconds() / 60 + 11.5) < 0.1
    assert cancel_missed(api_url, ["grpoflow-pipeline/scheduled"], grace_s=300, now=now) == []  # nothing twice


def test_the_console_line_names_the_deployment_the_count_and_how_to_run_one_now():
    line = Missed("grpoflow-pipeline/scheduled", 3, dt.datetime(2026, 12, 7, 2, 0, tzinfo=UTC)).line()
    assert line.startswith("3 scheduled runs of grpoflow-pipeline/scheduled missed while nothing served them")
    assert "(the last due 2026-12-07 02:00 UTC)" in line
    assert "`prefect deployment run grpoflow-pipeline/scheduled` starts one now" in line
    assert Missed("a/b", 1, dt.datetime(2026, 12, 7, tzinfo=UTC)).line().startswith("1 scheduled run of a/b ")
