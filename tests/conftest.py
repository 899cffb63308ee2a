"""Shared test settings: small Hypothesis runs, no example database written into the checkout."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "vspec",
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("vspec"), max_examples=1000)
settings.load_profile(os.environ.get("VSPEC_HYPOTHESIS_PROFILE", "vspec"))
