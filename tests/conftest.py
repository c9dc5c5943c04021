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
