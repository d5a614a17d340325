"""Shared test configuration: a fast, deterministic hypothesis profile."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "amorgp",
    deadline=None,
    max_examples=60,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("amorgp")
