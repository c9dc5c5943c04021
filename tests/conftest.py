"""Settings every test shares."""

import pytest
from hypothesis import HealthCheck, settings

# A loaded 2-core CI machine can stall any example for seconds: a per-example deadline, or the
# health check on slow data generation, would then fail a property that holds. Examples stay random.
settings.register_profile("grpoflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("grpoflow")


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that uses a fixture of this suite built once per session or
    module: the session fixture's name (all its users on one worker, so it is built once), else
    the module's path (a module fixture is built once per worker that runs the module)."""
    shared = [
        (defs[-1].scope, name)
        for name, defs in item._fixtureinfo.name2fixturedefs.items()  # the test's whole fixture closure
        if defs and defs[-1].scope in ("session", "module") and defs[-1].func.__module__.startswith("tests.")
    ]
    session = sorted(name for scope, name in shared if scope == "session")
    if session:
        return session[0]
    return item.nodeid.split("::")[0] if shared else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `make test` runs the suite on pytest-xdist workers with --dist loadgroup: grouped tests share
    # one worker, the rest go wherever a worker is free.
    for item in items:
        group = shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
