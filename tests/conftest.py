"""Shared test configuration: warnings and the hypothesis profiles.

CI uses the ``ci`` profile: a fixed, derandomized budget.  A long local soak:
``THUNDER_EXT_HYPOTHESIS_PROFILE=soak pytest tests/test_fuzz.py`` (or ``scripts/soak.py``).
``THUNDER_EXT_FUZZ_EXAMPLES`` overrides either budget.
"""

from __future__ import annotations

import os
import warnings

warnings.filterwarnings("ignore", message="transformer_engine module not found")

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is in the test extra; without it only the fuzz tests skip
    settings = None

if settings is not None:
    for name, examples, derandomize in (("ci", "40", True), ("soak", "2000", False)):
        settings.register_profile(
            name,
            max_examples=int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", examples)),
            derandomize=derandomize,
            deadline=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
    settings.load_profile(os.environ.get("THUNDER_EXT_HYPOTHESIS_PROFILE", "ci"))
