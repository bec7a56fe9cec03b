"""Hypothesis profiles of the ops_mapping property tests.

``HYPOTHESIS_PROFILE=long`` (or ``ci``) selects a bigger run; ``OPS_MAPPING_EXAMPLES=N``
overrides the example count of whichever profile is active. The profiles are applied per test
(``opsmap_properties.ops_settings``), never loaded globally, so other suites keep theirs.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings

_COMMON: dict[str, Any] = {
    "deadline": None,  # the first example pays Arrow's lazy kernel set-up
    "suppress_health_check": [HealthCheck.too_slow],
}

settings.register_profile("ops_mapping-default", max_examples=300, **_COMMON)
settings.register_profile("ops_mapping-ci", max_examples=1000, **_COMMON)
settings.register_profile("ops_mapping-long", max_examples=5000, **_COMMON)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ops_demo: shows a property test catching a deliberately injected bug"
    )
