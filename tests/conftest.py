"""Shared test configuration: hypothesis profiles and float64 helpers.

Profiles: ``ci`` (derandomized, so CI runs the same examples every time; selected by nox) and ``dev``
(random, more examples). Choose with ``HYPOTHESIS_PROFILE``.
"""

import os

import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

DOUBLE = torch.float64
