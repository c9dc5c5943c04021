"""Settings every test shares."""

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # a bare GPU image runs the gpu check's tests without it (benchmarks/gpu/check.sh)
    settings = None

if settings is not None:
    # A loaded 2-core CI machine can stall any example for seconds: a per-example deadline, or the
    # health check on slow data generation, would then fail a property that holds. Examples stay random.
    settings.register_profile("grpoflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("grpoflow")


def pytest_sessionfinish(session) -> None:
    """Stop the temporary Prefect server a test of this process started (a task or flow called with no
    API to reach) while pytest still captures the output: left to Prefect's exit hook, its "Stopping
    temporary server" line went to a capture file pytest had closed, and each run's log ended with
    that logging error's traceback (now it ends with nothing of the server's)."""
    import logging
    import sys

    server = sys.modules.get("prefect.server.api.server")
    if server is None:
        return
    logging.disable(logging.INFO)  # the goodbye line alone: a failure to stop is a warning, and shows
    try:
        for instance in list(server.SubprocessASGIServer._instances.values()):
            instance.stop()
    finally:
        logging.disable(logging.NOTSET)
